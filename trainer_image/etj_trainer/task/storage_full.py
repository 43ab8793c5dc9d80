"""A checkpoint save that found its volume full: recognising it, and the message a person
can act on (which volume, how big, how free, what the last checkpoint took).

The kernel says ENOSPC ("No space left on device") or, over a quota, EDQUOT ("Disk quota
exceeded"); TensorFlow's file system turns both into ``ResourceExhaustedError`` keeping the
kernel's words, and a ps's failed write reaches the chief as the same error with the same
text. ``ResourceExhaustedError`` alone is no proof (an allocation that failed is one too):
the words are. Every restart would train from the last checkpoint and fail at the next save,
so the trainer stops with ``CheckpointStorageFull`` (``etj.api.trainer_reasons``) instead.

``is_storage_full`` and ``full_message`` are pure; ``measure`` reads the volume's size
(``statvfs``: a local or mounted path only; an object store has no size) and the bytes of a
checkpoint's files. This module decides nothing about saving or restoring.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass

from etj.api.quantity import human_bytes
from etj.api.trainer_reasons import REASON_CHECKPOINT_STORAGE_FULL

# The kernel's words for ENOSPC and EDQUOT, as strerror gives them (and TensorFlow keeps).
_FULL_WORDS = ("No space left on device", "Disk quota exceeded")


class CheckpointStorageFull(Exception):
    """A checkpoint could not be written: its volume is full (or over its quota)."""

    reason = REASON_CHECKPOINT_STORAGE_FULL


def is_storage_full(text: str) -> bool:
    """Whether an error's text says its file system is full or over quota."""
    return any(w in text for w in _FULL_WORDS)


@dataclass(frozen=True)
class Volume:
    """What is known of the checkpoint volume when a save failed (None: not known)."""

    total_bytes: int | None
    free_bytes: int | None
    # The newest complete checkpoint and the bytes of its files.
    last_path: str | None
    last_bytes: int | None


def full_message(directory: str, step: int, keep: int, volume: Volume, planned: int) -> str:
    """The one line a person reads in the job's condition. ``planned``: the bytes of the
    tables and their optimizer slots by the shard plan (what a checkpoint holds at least),
    the estimate when no checkpoint was ever completed."""
    parts = [f"the checkpoint volume at {directory} is full: saving step {step} failed"]
    if volume.total_bytes is not None and volume.free_bytes is not None:
        parts.append(
            f"it holds {human_bytes(volume.total_bytes)}, {human_bytes(volume.free_bytes)} free"
        )
    if volume.last_bytes is not None and volume.last_path is not None:
        each = volume.last_bytes
        parts.append(
            f"the last checkpoint ({os.path.basename(volume.last_path)}) took {human_bytes(each)}"
        )
    else:
        each = planned
        parts.append(
            f"no checkpoint was completed; one needs about {human_bytes(each)} (the plan's tables and slots)"
        )
    # The manager deletes the oldest only after the new one is written: keep + 1 at once.
    need = (keep + 1) * each
    parts.append(
        f"with checkpoint.keep {keep} the volume needs at least {human_bytes(need)} "
        f"({keep + 1} checkpoints at once while the next is written): free space on it, "
        "give it more, or lower checkpoint.keep; the complete checkpoints on it are intact "
        "(the newest restores)"
    )
    return "; ".join(parts)


def measure(directory: str, last_path: str | None) -> Volume:
    """The volume's size and free bytes (a mounted path), and the bytes of ``last_path``'s
    files (``<prefix>.index``, ``<prefix>.data-*``); None for what cannot be read."""
    import tensorflow as tf

    total = free = None
    if "://" not in directory:
        with contextlib.suppress(OSError):
            st = os.statvfs(directory)
            total, free = st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize
    last_bytes = None
    if last_path is not None:
        with contextlib.suppress(tf.errors.OpError):
            files = tf.io.gfile.glob(f"{last_path}.*")
            last_bytes = sum(tf.io.gfile.stat(f).length for f in files) if files else None
    return Volume(total, free, last_path, last_bytes)
