"""Checkpoints: where they go, restoring the newest one, writing one.

Under ParameterServerStrategy each ps writes its own shards into the directory, so it must
be on every replica (the operator mounts it); a checkpoint restores into a different number
of shards or ps. Under MultiWorkerMirrored every worker must take part in a save; only the
chief's copy is kept (the others write to a scratch directory and delete it).

The optimizer slots are built before ``restore`` (``TrainingState`` creates them eagerly).
This module does not decide when to save.
"""

from __future__ import annotations

import logging
import shutil
from typing import Any

import tensorflow as tf

from etj.api.trainer import TrainerCheckpoint
from etj_trainer.core import TrainingState

log = logging.getLogger(__name__)

RESTARTS_FILE = "restarts"


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

    def restore(self) -> int | None:
        """Restore the newest checkpoint; its step, or None when there is none."""
        path = self.latest()
        if path is None:
            return None
        status = self.state.checkpoint.restore(path)
        # Every variable of the model must come back: a partial restore is a config change
        # (a table added or renamed) that training must not silently paper over.
        status.assert_existing_objects_matched()
        if self.count_restarts:
            self.restarts = self._bump_restarts()
        step = int(self.state.step.numpy())
        log.info("restored %s at step %d", path, step)
        return step

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
        path = self.manager.save(checkpoint_number=step)
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)
            tf.io.gfile.makedirs(self.scratch)
        log.info("checkpoint %s", path)
        return step
