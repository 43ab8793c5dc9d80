"""Serving versions while the job trains (``spec.export``): the leader writes the serving
SavedModel (``etj_trainer.task.serving_model``, what TensorFlow Serving serves) as numbered
versions under the serving base path, keeping the newest ``keep``.

Each version is written aside, in a directory of the base path whose name is not a number
(TF Serving skips it), and renamed into place whole: a reader that lists the base path
never sees half a version. An old version is renamed out of the way before it is deleted,
for the same reason. On a ``gs://`` base path (no atomic rename) a version is written
locally, then copied up file by file with ``saved_model.pb`` last, and deleted with it
first: a reader that finds ``saved_model.pb`` finds the rest. Names and numbers:
``etj.api.export``.

What a version costs training: the write runs on a thread of the leader while training
goes on. Only the dynamic tables' indexes are read before it starts, on the loop's thread
between two chunks (the index changes only there under ParameterServer, and inside steps
under MultiWorkerMirrored, so it is read whole); tables and tower are read by the writer
while steps update them, as asynchronous training reads them anyway: a version holds the
weights of the few steps its write took, the index of the step it names. Its bytes are
read through the leader (``serving_model.local_io``): under ParameterServer they cross the
network from every ps to the chief, under MultiWorkerMirrored the chief is worker 0, whose
steps (and so every worker's, in sync) slow down while its CPU writes. One version at a
time: one that falls due while the last is being written waits for it.

A failed version (a full disk) is an ``exportFailed`` line and a warning; training goes
on, and the next version is tried when due. This module does not decide when training ends
or write the final export (``etj_trainer.task.export``).
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tensorflow as tf

from etj.api.export import (
    SAVED_MODEL_FILE,
    ExportSchedule,
    is_leftover,
    next_version,
    retiring_name,
    staging_name,
    versions_in,
    versions_to_prune,
)
from etj.api.trainer import TrainerExport
from etj_trainer.task.export import dynamic_indexes, is_remote, upload, write_serving
from etj_trainer.task.state import TrainingState

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Written:
    """A version moved into place (``error`` None), or one that failed."""

    version: int
    step: int
    time: float  # Unix seconds it was in place (or failed)
    seconds: float  # how long its write took
    location: str
    # Steps trained while it was written (its cost, seen from training: 0 for the final one).
    trained_during: int = 0
    error: str | None = None


class _Place:
    """The base path's directory operations, on a local path or a TensorFlow filesystem."""

    def __init__(self, base: str):
        self.base = base.rstrip("/")
        self.remote = is_remote(base)

    def names(self) -> list[str]:
        if not tf.io.gfile.isdir(self.base):
            return []
        return [n.rstrip("/") for n in tf.io.gfile.listdir(self.base)]

    def delete(self, name: str) -> None:
        path = f"{self.base}/{name}"
        if self.remote:
            # The SavedModel file first: what is left of it is no version to a reader.
            if tf.io.gfile.exists(f"{path}/{SAVED_MODEL_FILE}"):
                tf.io.gfile.remove(f"{path}/{SAVED_MODEL_FILE}")
            tf.io.gfile.rmtree(path)
            return
        retiring = f"{self.base}/{retiring_name(int(name))}" if name.isdigit() else path
        if retiring != path:
            os.rename(path, retiring)
        shutil.rmtree(retiring, ignore_errors=True)


class Versions:
    """The leader's versioned exports: ``tick`` between chunks (starts a version when one
    is due), ``collect`` the versions written since, ``final`` at the end."""

    def __init__(
        self,
        state: TrainingState,
        spec: TrainerExport,
        clock: Callable[[], float] = time.time,
        steps_done: Callable[[], int] | None = None,
    ):
        """``steps_done``: the steps trained so far, as the loop counts them (read by the
        writer's thread when a version is in place); by default the step variable."""
        self.state = state
        self.steps_done = steps_done or (lambda: int(state.step.numpy()))
        self.spec = spec
        self.schedule = ExportSchedule(spec.every_steps, spec.every_seconds)
        self.place = _Place(spec.directory)
        self.clock = clock
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._written: list[Written] = []
        self.last: Written | None = None
        self._last_step = 0
        self._last_time = 0.0

    def start(self, step: int) -> None:
        """Training starts at ``step``: the base path made, what a stopped writer left
        there deleted; the first version is due an interval from now."""
        if not self.place.remote:
            Path(self.place.base).mkdir(parents=True, exist_ok=True)
        for name in self.place.names():
            if is_leftover(name):
                log.info("deleting %s/%s, left by a stopped export", self.place.base, name)
                self.place.delete(name)
        self._last_step, self._last_time = step, self.clock()

    @property
    def busy(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def tick(self, step: int) -> bool:
        """Called between chunks with the steps done so far: start a version when one is
        due and none is being written. Whether one was started."""
        if self.busy or not self.schedule.due(step, self.clock(), self._last_step, self._last_time):
            return False
        exact = int(self.state.step.numpy())
        indexes = dynamic_indexes(self.state)  # here: no step changes them meanwhile
        self._last_step, self._last_time = exact, self.clock()
        self._thread = threading.Thread(
            target=self._write, args=(exact, indexes), name="etj-export", daemon=True
        )
        self._thread.start()
        return True

    def collect(self) -> list[Written]:
        """The versions written (or failed) since the last call, oldest first."""
        with self._lock:
            out, self._written = self._written, []
        return out

    def wait(self) -> None:
        """Until the version being written (if any) is in place."""
        if self._thread is not None:
            self._thread.join()

    def final(self, step: int) -> None:
        """The version at the end of training (``step``), unless the last one holds it;
        written on this thread, after the one being written."""
        self.wait()
        last = self.last
        if last is not None and last.error is None and last.step == step:
            return
        self._write(step, dynamic_indexes(self.state))

    def _write(self, step: int, indexes: dict[str, Any]) -> None:
        began = time.monotonic()
        version = next_version(self.clock(), versions_in(self.place.names()))
        try:
            self._put(version, indexes)
            self._prune()
            # The steps the leader counted meanwhile (no round trip to a ps).
            during = max(0, self.steps_done() - step)
            seconds = time.monotonic() - began
            done = Written(version, step, self.clock(), seconds, self.place.base, during)
            log.info(
                "serving version %d (step %d) in %.1fs, %d steps trained meanwhile",
                version,
                step,
                seconds,
                during,
            )
        except Exception as e:  # a version is worth a warning, not the job
            log.warning("serving version %d (step %d) failed: %s", version, step, e)
            done = Written(
                version,
                step,
                self.clock(),
                time.monotonic() - began,
                self.place.base,
                error=f"{type(e).__name__}: {str(e)[:500]}",
            )
        with self._lock:
            self.last = done
            self._written.append(done)

    def _put(self, version: int, indexes: dict[str, Any]) -> None:
        base = self.place.base
        if self.place.remote:
            with tempfile.TemporaryDirectory(prefix="etj-version-") as tmp:
                local = Path(tmp) / str(version)
                write_serving(self.state, local, indexes)
                upload(local, f"{base}/{version}", last=SAVED_MODEL_FILE)
            return
        staging = Path(base) / staging_name(version, os.getpid())
        shutil.rmtree(staging, ignore_errors=True)
        try:
            write_serving(self.state, staging, indexes)
            # One rename: the version appears whole (same directory, same filesystem).
            os.rename(staging, Path(base) / str(version))
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def _prune(self) -> None:
        for version in versions_to_prune(versions_in(self.place.names()), self.spec.keep):
            self.place.delete(str(version))
