"""Versioned exports for serving (``spec.export``): the layout TensorFlow Serving watches,
and the pure rules that name, schedule and prune its versions.

A job's serving base path (``SERVING_DIR`` beside its checkpoints: ``serving_location``)
is what TF Serving's ``--model_base_path`` names. It holds one directory per version,
named by a positive integer, each a whole SavedModel (``saved_model.pb``, ``variables/``,
``assets/``); TF Serving loads the highest number and ignores any name that is not one.
The leader writes a version aside, under a name that is not a number (``staging_name``),
and renames it into place whole, so a reader never sees half of one; it retires an old
version the same way (renamed to ``retiring_name`` first, then deleted).

A version's number is the Unix time (seconds) it was started, raised past the highest
version already there (``next_version``), not the training step: the number is then
greater than every earlier one whatever happened in between — a restart that resumed from
an older checkpoint (the step goes back; versions written after that checkpoint stay, and
a step-numbered version of the resumed run would rank below them, or collide with one),
or a warm-started job whose step count restarts at 0. ``status.export`` says which step
each number holds.

Deltas (``spec.export.deltaSteps``/``deltaSeconds``) live beside the base path, in
``DELTAS_DIR``: ``deltas/<version>/<sequence>/`` holds the ``sequence``-th delta on top of
version ``version`` (sequences 1, 2, ... in the order they apply), its manifest
(``DELTA_MANIFEST``, naming its base version and sequence) written last and the directory
renamed into place whole; the last delta of a version's chain names the next version it
brings a reader to (``etj_trainer.task.deltas`` writes and applies them).

Pure: no I/O, no environment, no clock (the caller passes the time).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

# The serving base path's directory name, beside the job's checkpoints.
SERVING_DIR = "serving"
# A version's SavedModel file: the last file a version copied file by file (to gs://) gets.
SAVED_MODEL_FILE = "saved_model.pb"
# Names in the base path that are not versions (TF Serving skips them): a version being
# written, and one being deleted.
STAGING_PREFIX = ".staging-"
RETIRING_PREFIX = ".retiring-"
# The default number of versions kept (spec.export.keep).
DEFAULT_KEEP = 5
# Where a job's deltas go, beside the serving base path, and a delta's manifest.
DELTAS_DIR = "deltas"
DELTA_MANIFEST = "delta.json"
_SEQUENCE_DIGITS = 8


def serving_location(checkpoint_directory: str) -> str:
    """The serving base path of a job whose checkpoints are in ``checkpoint_directory``."""
    return f"{checkpoint_directory.rstrip('/')}/{SERVING_DIR}"


def deltas_location(checkpoint_directory: str) -> str:
    """Where the deltas of a job whose checkpoints are in ``checkpoint_directory`` go."""
    return f"{checkpoint_directory.rstrip('/')}/{DELTAS_DIR}"


def delta_name(sequence: int) -> str:
    """The directory of the ``sequence``-th delta of a version (zero-padded: names sort
    as sequences do)."""
    if sequence < 1:
        raise ValueError(f"a delta's sequence starts at 1, not {sequence}")
    return f"{sequence:0{_SEQUENCE_DIGITS}d}"


def sequence_of(name: str) -> int | None:
    """The sequence a delta directory's name stands for, or None (staging, anything else)."""
    return version_of(name)


def version_of(name: str) -> int | None:
    """The version a directory name stands for (as TF Serving reads it: a positive
    decimal integer), or None (staging, retiring, anything else)."""
    if not name.isascii() or not name.isdigit():
        return None
    version = int(name)
    return version if version > 0 else None


def versions_in(names: Iterable[str]) -> list[int]:
    """The versions among a base path's entries, ascending."""
    return sorted(v for n in names if (v := version_of(n)) is not None)


def next_version(now: float, existing: Iterable[int]) -> int:
    """The number of a version started at Unix time ``now``: its second, or one past the
    highest version there when that is not lower (two in one second; a clock set back)."""
    return max(int(now), max(existing, default=0) + 1)


def versions_to_prune(existing: Iterable[int], keep: int) -> list[int]:
    """The versions to delete so that the newest ``keep`` remain, oldest first."""
    if keep < 1:
        raise ValueError(f"keep must be at least 1, not {keep}")
    ordered = sorted(set(existing))
    return ordered[: max(0, len(ordered) - keep)]


def staging_name(version: int, pid: int) -> str:
    """Where version ``version`` is written before it is moved into place."""
    return f"{STAGING_PREFIX}{version}-{pid}"


def retiring_name(version: int) -> str:
    """What an old version is renamed to before it is deleted."""
    return f"{RETIRING_PREFIX}{version}"


def is_leftover(name: str) -> bool:
    """A staging or retiring directory: a writer that stopped half-way left it (the next
    writer deletes it)."""
    return name.startswith((STAGING_PREFIX, RETIRING_PREFIX))


@dataclass(frozen=True)
class ExportSchedule:
    """When a version is due during training: every ``every_steps`` steps (when the step
    passes a multiple of it) or every ``every_seconds`` seconds since the last version
    (or the start); neither: only the final one, at the end."""

    every_steps: int | None = None
    every_seconds: float | None = None

    def due(self, step: int, now: float, last_step: int, last_time: float) -> bool:
        """Whether a version is due at ``step`` and time ``now``, the last one (or the
        start) having been at ``last_step`` and ``last_time``."""
        if self.every_steps is not None:
            return step // self.every_steps > last_step // self.every_steps
        if self.every_seconds is not None:
            return now - last_time >= self.every_seconds
        return False
