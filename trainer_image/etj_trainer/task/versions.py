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

Deltas (``spec.export.deltaSteps``/``deltaSeconds``: ``TrainerExport.delta_directory``):
between versions, the writer's thread also writes deltas (``etj_trainer.task.deltas``), one
at a time as versions are. The writer keeps the state the last export holds: after a
version is in place it reads the version back from its files (so the state is the
version's own bits, not a second read of tables training changes meanwhile); a delta reads
the tables and dense weights now (the dynamic indexes, as for a version, between chunks),
writes what changed since that state, and keeps the new one. After each version the chain
of the version before is closed by one more delta, from the last state to the new
version's, naming it: a reader holding version ``v`` and applying its deltas holds the
next version bit for bit. A leader that restarts rebuilds that state from the newest
version and its deltas (``etj_trainer.task.delta_reader``) and goes on with its chain; a
delta after a restore carries every row the restore moved. The deltas of versions
pruned go with them. What it costs: each delta reads every table through the leader as a
version does (the comparison, ``deltas`` says why), and the leader holds the tables of
the last export in memory.

A failed version (a full disk) is an ``exportFailed`` line and a warning; training goes
on, and the next version is tried when due (a failed delta: ``deltaFailed``, the next
delta carries its rows). This module does not decide when training ends
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

import numpy as np
import tensorflow as tf

from etj.api.export import (
    DELTA_MANIFEST,
    SAVED_MODEL_FILE,
    ExportSchedule,
    delta_name,
    is_leftover,
    next_version,
    retiring_name,
    staging_name,
    version_of,
    versions_in,
    versions_to_prune,
)
from etj.api.trainer import TrainerExport
from etj_trainer.task import deltas
from etj_trainer.task.delta_reader import ServingChain, version_snapshot
from etj_trainer.task.deltas import Delta, Snapshot
from etj_trainer.task.export import dynamic_indexes, is_remote, upload, write_serving
from etj_trainer.task.serving_model import local_io
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


@dataclass(frozen=True)
class DeltaWritten:
    """A delta moved into place (``error`` None), or one that failed."""

    base: int  # the version it applies to
    sequence: int
    step: int
    time: float
    rows: int  # table rows it carries
    evicted: int  # dynamic tables' ids evicted
    seconds: float
    location: str
    next_version: int | None = None  # the version it closes its chain with
    error: str | None = None


@dataclass
class _Chain:
    """The state the last export holds: version ``base`` after its ``sequence`` deltas."""

    base: int
    sequence: int
    state: Snapshot


def live_snapshot(
    state: TrainingState, indexes: dict[str, tuple[np.ndarray, np.ndarray]], scratch: str
) -> Snapshot:
    """The model as serving would hold it now: the tables read, the dense weights saved
    from the tower into ``scratch`` (a local directory) under a serving version's keys —
    a module holding the tower as ``tower``, as the serving model does — and read back."""
    model = state.model
    tables = {
        i: [np.asarray(s.read_value().numpy()) for s in model.table_components(i)]
        for i in range(len(model.tables))
    }
    holder = tf.Module()
    holder.tower = model.tower
    options = tf.train.CheckpointOptions(experimental_io_device=local_io().experimental_io_device)
    prefix = tf.train.Checkpoint(root=holder).write(f"{scratch}/dense", options=options)
    reader = tf.train.load_checkpoint(prefix)
    dense = {
        k: np.asarray(reader.get_tensor(k))
        for k in reader.get_variable_to_shape_map()
        if k != "_CHECKPOINTABLE_OBJECT_GRAPH"
    }
    return Snapshot(
        tables,
        dense,
        {n: (np.asarray(k, np.int64), np.asarray(r, np.int64)) for n, (k, r) in indexes.items()},
    )


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
        self.delta_directory = spec.delta_directory
        self.delta_schedule = (
            ExportSchedule(spec.delta_steps, spec.delta_seconds)
            if spec.delta_directory is not None
            else None
        )
        # The last export of either kind (a delta is due an interval after it).
        self._delta_step = 0
        self._delta_time = 0.0
        self._chain: _Chain | None = None
        self._deltas: list[DeltaWritten] = []
        self._names = {i: t.name for i, t in enumerate(state.config.model.tables)}

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
        self._delta_step, self._delta_time = self._last_step, self._last_time
        if self.delta_directory is not None:
            self._resume_chain()

    def _resume_chain(self) -> None:
        """The state of the newest version and its deltas, to go on with its chain."""
        versions = versions_in(self.place.names())
        if not versions:
            return
        assert self.delta_directory is not None
        self._delete_stale_deltas(versions)
        try:
            chain = ServingChain(self.place.base, self.delta_directory).load(versions[-1])
            chain.follow()
        except Exception as e:  # the next version starts a chain
            log.warning("deltas: cannot go on from version %d: %s", versions[-1], e)
            return
        self._chain = _Chain(chain.version, chain.sequence, chain.model)
        log.info("deltas go on from version %d after delta %d", chain.version, chain.sequence)

    @property
    def busy(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def tick(self, step: int) -> bool:
        """Called between chunks with the steps done so far: start a version when one is
        due and none is being written. Whether one was started."""
        if self.busy:
            return False
        if not self.schedule.due(step, self.clock(), self._last_step, self._last_time):
            return self._tick_delta(step)
        exact = int(self.state.step.numpy())
        indexes = dynamic_indexes(self.state)  # here: no step changes them meanwhile
        self._last_step, self._last_time = exact, self.clock()
        self._delta_step, self._delta_time = self._last_step, self._last_time
        self._thread = threading.Thread(
            target=self._write, args=(exact, indexes), name="etj-export", daemon=True
        )
        self._thread.start()
        return True

    def _tick_delta(self, step: int) -> bool:
        chain, schedule = self._chain, self.delta_schedule
        if chain is None or schedule is None:
            return False
        if not schedule.due(step, self.clock(), self._delta_step, self._delta_time):
            return False
        exact = int(self.state.step.numpy())
        indexes = dynamic_indexes(self.state)
        self._delta_step, self._delta_time = exact, self.clock()
        self._thread = threading.Thread(
            target=self._write_delta, args=(exact, indexes), name="etj-delta", daemon=True
        )
        self._thread.start()
        return True

    def collect_deltas(self) -> list[DeltaWritten]:
        """The deltas written (or failed) since the last call, oldest first."""
        with self._lock:
            out, self._deltas = self._deltas, []
        return out

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
            written = self._put(version, indexes)
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
        if done.error is None and self.delta_directory is not None:
            self._close_chain(version, step, written)

    def _put(self, version: int, indexes: dict[str, Any]) -> Snapshot | None:
        """Write version ``version``; with deltas, the state it holds (read from its files)."""
        base = self.place.base
        deltas_on = self.delta_directory is not None
        if self.place.remote:
            with tempfile.TemporaryDirectory(prefix="etj-version-") as tmp:
                local = Path(tmp) / str(version)
                write_serving(self.state, local, indexes)
                held = version_snapshot(str(local)) if deltas_on else None
                upload(local, f"{base}/{version}", last=SAVED_MODEL_FILE)
            return held
        staging = Path(base) / staging_name(version, os.getpid())
        shutil.rmtree(staging, ignore_errors=True)
        try:
            write_serving(self.state, staging, indexes)
            # One rename: the version appears whole (same directory, same filesystem).
            os.rename(staging, Path(base) / str(version))
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return version_snapshot(str(Path(base) / str(version))) if deltas_on else None

    def _close_chain(self, version: int, step: int, held: Snapshot | None) -> None:
        """Version ``version`` is in place holding ``held``: the chain before it ends with
        a delta to it, and its own chain starts."""
        if held is None:
            return
        chain, self._chain = self._chain, _Chain(version, 0, held)
        if chain is not None:
            self._delta(chain, step, lambda: held, next_version=version)
        versions = versions_in(self.place.names())
        try:
            self._delete_stale_deltas(versions)
        except OSError as e:
            log.warning("deltas: old ones not deleted: %s", e)

    def _write_delta(self, step: int, indexes: dict[str, tuple[np.ndarray, np.ndarray]]) -> None:
        chain = self._chain
        if chain is None:
            return
        with tempfile.TemporaryDirectory(prefix="etj-delta-") as scratch:
            after = self._delta(chain, step, lambda: live_snapshot(self.state, indexes, scratch))
        if after is not None and self._chain is chain:
            self._chain = _Chain(chain.base, chain.sequence + 1, after)

    def _delta(
        self,
        chain: _Chain,
        step: int,
        now: Callable[[], Snapshot],
        next_version: int | None = None,
    ) -> Snapshot | None:
        """Write the delta from ``chain``'s state to ``now()``; that state (None: failed)."""
        began = time.monotonic()
        sequence = chain.sequence + 1
        assert self.delta_directory is not None
        where = f"{self.delta_directory.rstrip('/')}/{chain.base}"
        try:
            after = now()
            changes = deltas.changes(chain.state, after)
            delta = Delta(
                chain.base, sequence, step, self.clock(), changes, next_version, self._names
            )
            self._put_delta(where, delta)
            done = DeltaWritten(
                chain.base,
                sequence,
                step,
                self.clock(),
                changes.rows,
                changes.evicted,
                time.monotonic() - began,
                where,
                next_version,
            )
            log.info(
                "delta %d of version %d (step %d): %d rows, %d evicted, in %.1fs",
                sequence,
                chain.base,
                step,
                changes.rows,
                changes.evicted,
                done.seconds,
            )
        except Exception as e:  # a delta is worth a warning, not the job
            log.warning(
                "delta %d of version %d (step %d) failed: %s", sequence, chain.base, step, e
            )
            after = None
            done = DeltaWritten(
                chain.base,
                sequence,
                step,
                self.clock(),
                0,
                0,
                time.monotonic() - began,
                where,
                next_version,
                error=f"{type(e).__name__}: {str(e)[:500]}",
            )
        with self._lock:
            self._deltas.append(done)
        return after

    def _put_delta(self, where: str, delta: Delta) -> None:
        if not is_remote(where):
            deltas.write(Path(where), delta)
            return
        with tempfile.TemporaryDirectory(prefix="etj-delta-") as tmp:
            local = deltas.write(Path(tmp), delta)
            upload(local, f"{where}/{delta_name(delta.sequence)}", last=DELTA_MANIFEST)

    def _delete_stale_deltas(self, versions: list[int]) -> None:
        """The deltas of versions no longer kept, and what a stopped writer left."""
        assert self.delta_directory is not None
        root = self.delta_directory.rstrip("/")
        if not tf.io.gfile.isdir(root):
            return
        oldest = versions[0] if versions else None
        for name in tf.io.gfile.listdir(root):
            name = name.rstrip("/")
            base = version_of(name)
            if base is not None and (oldest is None or base < oldest):
                tf.io.gfile.rmtree(f"{root}/{name}")
            elif base is not None and not is_remote(root):
                for entry in Path(root, name).iterdir():
                    if is_leftover(entry.name):
                        shutil.rmtree(entry, ignore_errors=True)

    def _prune(self) -> None:
        for version in versions_to_prune(versions_in(self.place.names()), self.spec.keep):
            self.place.delete(str(version))
