"""Checkpoints: where they go, restoring the newest one, writing one.

Under ParameterServerStrategy each ps writes its own shards into the directory, so it must
be on every replica (the operator mounts it); a checkpoint restores into a different number
of shards or ps. Under MultiWorkerMirrored every worker must take part in a save; only the
chief's copy is kept (the others write to a scratch directory and delete it).

The optimizer slots are built before ``restore`` (``TrainingState`` creates them eagerly);
the variables are read a piece at a time (``etj_trainer.task.restore``). This module does
not decide when to save.

A checkpoint cannot be half-read: TensorFlow writes a save's data under a temporary
prefix, its index last, and names it in the ``checkpoint`` state file only then (a save
cut short, by SIGKILL or a full volume, leaves the state file naming the checkpoint before).
One the state file names may still be unreadable (a file lost or truncated after the fact,
an object store's rename that is a copy): ``restore`` then says so, naming it, and restores
the one before. A save that finds its volume full stops the trainer with
``CheckpointStorageFull`` (``etj_trainer.task.storage_full``).
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import time
from typing import TYPE_CHECKING, Any

import tensorflow as tf

from etj.api.trainer import TrainerCheckpoint
from etj_trainer.task.events import emit
from etj_trainer.task.restore import restore_components
from etj_trainer.task.state import TrainingState
from etj_trainer.task.storage_full import (
    CheckpointStorageFull,
    full_message,
    is_storage_full,
    measure,
)

if TYPE_CHECKING:
    from etj_trainer.task.warmstart import WarmStartReport

log = logging.getLogger(__name__)

RESTARTS_FILE = "restarts"
# What reading an incomplete checkpoint raises: a file truncated (OutOfRange: "Read less
# bytes than requested"), a block that fails its checksum (DataLoss), a data file missing
# (NotFound, naming the file: told apart from a ps's lost variable by the path).
_UNREADABLE = (tf.errors.OutOfRangeError, tf.errors.DataLossError, tf.errors.NotFoundError)


def restore_in_pieces(state: TrainingState, path: str) -> None:
    """Assign every saved variable of ``state`` from ``path`` (``restore_components``)."""
    position = state.position.variables_by_key() if state.position is not None else {}
    restore_components(path, {**state.named_variables(), "step": [state.step], **position})
    state.restore_dynamic(path)


class Checkpoints:
    """Restore and save ``state`` under ``spec.directory`` (no-op without a spec)."""

    def __init__(
        self,
        state: TrainingState,
        spec: TrainerCheckpoint | None,
        scratch: str | None = None,
        count_restarts: bool = True,
    ):
        self.state = state
        # Resumes counted so far (``restarts`` file); only the chief counts them.
        self.count_restarts = count_restarts
        self.restarts = 0
        self.restore_seconds: float | None = None
        # The checkpoint restored (this job's own, or a warm start's source), and what a
        # warm start did.
        self.restored_path: str | None = None
        self.warm_started: WarmStartReport | None = None
        self.spec = spec
        self.scratch = scratch
        self.manager: Any = None
        if spec is not None:
            directory = spec.directory if scratch is None else scratch
            tf.io.gfile.makedirs(directory)
            self.manager = tf.train.CheckpointManager(
                state.checkpoint, directory, max_to_keep=spec.keep, step_counter=state.step
            )

    @property
    def enabled(self) -> bool:
        return self.spec is not None

    def latest(self) -> str | None:
        if self.spec is None:
            return None
        path: str | None = tf.train.latest_checkpoint(self.spec.directory)
        return path

    def candidates(self) -> list[str]:
        """The checkpoints the state file names, newest first."""
        if self.spec is None:
            return []
        state = tf.train.get_checkpoint_state(self.spec.directory)
        if state is None:
            return []
        paths = list(state.all_model_checkpoint_paths) or [state.model_checkpoint_path]
        return [p for p in reversed(paths) if p]

    def restore(self) -> int | None:
        """Restore the newest checkpoint of the job's own that reads whole (an unreadable
        one is skipped, naming it), else warm start from the source the config names
        (``etj_trainer.task.warmstart``); the step training goes on from, or None when
        there is nothing to restore. A restart always finds its own first."""
        started = time.monotonic()
        path = None
        for candidate in self.candidates():
            why = self._restore_whole(candidate)
            if why is None:
                path = candidate
                break
            log.warning(
                "checkpoint %s is incomplete (%s): skipped, trying the one before", candidate, why
            )
            emit("checkpointSkipped", path=candidate, why=why)
        if path is None:
            return self._warm_start()
        self.restored_path = path
        self.restore_seconds = round(time.monotonic() - started, 2)
        if self.count_restarts:
            self.restarts = self._bump_restarts()
        step = int(self.state.step.numpy())
        log.info("restored %s at step %d", path, step)
        return step

    def _restore_whole(self, path: str) -> str | None:
        """Restore ``path``; why it cannot be read whole, or None when it was. A failed
        read may have assigned some variables: the next restore assigns every one."""
        if not tf.io.gfile.exists(f"{path}.index"):
            return "no index file"
        try:
            restore_in_pieces(self.state, path)
        except tf.errors.OpError as e:
            text = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
            if isinstance(e, tf.errors.NotFoundError) and path not in str(e):
                raise  # not a file of this checkpoint: a ps lost its variables
            if not isinstance(e, _UNREADABLE) and "sstable" not in text:
                raise
            return f"{type(e).__name__}: {text[:300]}"
        return None

    def _warm_start(self) -> int | None:
        ws = self.state.config.warm_start
        if ws is None:
            return None
        from etj_trainer.task.warmstart import warm_start

        started = time.monotonic()
        self.warm_started = warm_start(self.state, ws)
        self.restore_seconds = round(time.monotonic() - started, 2)
        self.restored_path = self.warm_started.path
        return self.warm_started.step

    def _bump_restarts(self) -> int:
        """Count this resume in a file next to the checkpoints.

        Not in the checkpoint itself: two restarts from the same checkpoint would count once.
        """
        assert self.spec is not None
        path = f"{self.spec.directory}/{RESTARTS_FILE}"
        count = 0
        if tf.io.gfile.exists(path):
            with tf.io.gfile.GFile(path) as f:
                text = f.read().strip()
            count = int(text) if text.isdigit() else 0
        count += 1
        tmp = f"{path}.tmp"
        with tf.io.gfile.GFile(tmp, "w") as f:
            f.write(str(count))
        tf.io.gfile.rename(tmp, path, overwrite=True)
        return count

    def save(self) -> int:
        """Write a checkpoint of the current state; its step."""
        assert self.manager is not None
        step = int(self.state.step.numpy())
        try:
            path = self.manager.save(checkpoint_number=step)
        except (tf.errors.OpError, OSError) as e:
            if not is_storage_full(str(e)):
                raise
            raise CheckpointStorageFull(self._full(step)) from e
        if self.scratch is None and self.spec is not None:
            from etj_trainer.task.warmstart import write_manifest

            # What the checkpoints hold, by table name: what a warm start from them reads.
            write_manifest(self.spec.directory, self.state.config)
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)
            tf.io.gfile.makedirs(self.scratch)
        log.info("checkpoint %s", path)
        return step

    def _full(self, step: int) -> str:
        """The message of a save that found the volume full; what the failed save left
        (its temporary files) is removed, so the volume holds the complete ones only."""
        assert self.spec is not None
        directory = self.spec.directory if self.scratch is None else self.scratch
        for leftover in tf.io.gfile.glob(f"{directory.rstrip('/')}/ckpt-{step}_temp*"):
            with contextlib.suppress(tf.errors.OpError):
                tf.io.gfile.rmtree(leftover)
        volume = measure(directory, self.latest() if self.scratch is None else None)
        return full_message(
            directory, step, self.spec.keep, volume, self.state.config.shard_plan.total_bytes
        )
