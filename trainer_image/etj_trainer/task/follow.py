"""The loop of a job that follows its files (``data.files.follow``): the files that land
under the pattern are trained as they arrive, in name order, each exactly once in the
model across restarts.

The unit of work is one whole file: ``FollowParts.run`` trains it (a closure under
ParameterServer, whose worker reads the file it is named; a call in one process). Files
are taken in rounds (the new files listed, at most ``ROUND_FILES`` per worker); after a
round every file of it has been trained, the position (``InputPosition.last_file``) moves
to the round's last file, and a checkpoint is written when ``everySteps`` steps have passed
since the last one, when the location goes quiet, on SIGTERM and at the end. The position
is saved with the tables, so what a failure re-reads is exactly the files after the
position of the checkpoint restored:

- the chief (or the one process) killed, or a ps (the chief is restarted and restores): the
  files trained since the last checkpoint are trained again, from the restored tables;
  their first training is gone with the state it made, so each counts once;
- a worker lost under ParameterServer: ClusterCoordinator runs the closure of the file it
  held again on another worker, after some of its steps may already have reached the ps. The
  loop sees it (more closures started than it scheduled: ``FollowParts.started``), restores
  the last checkpoint in place at the end of the round (the workers, the ps and the chief
  stay up) and trains the files after its position again.

Stops: at ``training.steps`` if given (at the end of the file that reaches it), when no file
has landed for ``stopAfterIdleSeconds``, or on SIGTERM (suspend, delete: checkpoint, exit
143). It builds no strategy or dataset itself.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import tensorflow as tf

from etj.api.progress import EVENT_EVALUATION
from etj.api.spec import FileFormat
from etj.api.trainer import TrainerConfig
from etj_trainer import exitcodes
from etj_trainer.data.follow import csv_header, file_batches, late_files, list_files, new_files
from etj_trainer.task.checkpoint import Checkpoints, restore_in_pieces
from etj_trainer.task.evaluate import Scorer, held_out
from etj_trainer.task.events import emit
from etj_trainer.task.export import export_to
from etj_trainer.task.loop import StopFlag, _report_versions, _reporter
from etj_trainer.task.state import TrainingState
from etj_trainer.task.step import ChunkResult
from etj_trainer.task.supervisor import Heartbeat
from etj_trainer.task.versions import Versions

log = logging.getLogger(__name__)

# Files a round takes per worker at most: enough to keep every worker busy, few enough that
# a round ends (and may checkpoint) soon after a burst of files lands.
ROUND_FILES = 4
# The longest the loop waits between two looks at SIGTERM and two heartbeats while idle.
IDLE_SLICE_SECONDS = 2.0


@dataclass
class FollowParts:
    """How a role trains one file."""

    # Train one file (maybe asynchronously): a handle. A Kafka job's: one chunk's arguments
    # (etj_trainer.task.kafka).
    run: Callable[[Any], Any]
    result: Callable[[Any], tuple[int, ChunkResult]]  # wait for it: its steps and results
    barrier: Callable[[], None]  # wait until every file scheduled is done
    workers: int
    examples_per_step: int
    # Trace the file function before the watchdog arms (minutes on a busy machine).
    warm_up: Callable[[], None]
    # Closures started so far (ParameterServer: a lost worker's file runs again); None
    # where nothing runs twice.
    started: Callable[[], int] | None = None


def file_function(
    config: TrainerConfig, state: TrainingState, header: list[str] | None, starts: Any = None
) -> Any:
    """The ``tf.function`` that trains one file named by a string tensor; ``starts`` (a
    variable where the steps run) counts its runs."""
    batch = config.training.batch_size_per_replica

    @tf.function(input_signature=[tf.TensorSpec([], tf.string)])
    def train_file(name: tf.Tensor) -> tf.Tensor:
        if starts is not None:
            # Before any step of the file: a run cut short shows in the count.
            with tf.control_dependencies([starts.assign_add(1)]):
                name = tf.identity(name)
        return state.train_batches(file_batches(config.model, config.data, name, batch, header))

    return train_file


def first_header(config: TrainerConfig, stop: StopFlag) -> list[str] | None:
    """A csv location's columns, from its first file (waited for); None for TFRecord or
    when SIGTERM came first."""
    files = config.data.files
    assert files is not None and files.follow is not None
    if files.format != FileFormat.CSV:
        return None
    if files.columns:
        return list(files.columns)
    while not stop:
        names = sorted(list_files(files.pattern))
        if names:
            return csv_header(config.data, names[0])
        stop.event.wait(min(files.follow.poll_seconds, IDLE_SLICE_SECONDS))
    return None


class _Rollback(Exception):
    """A lost worker's file ran twice: restore the last checkpoint."""


def follow_loop(
    config: TrainerConfig,
    state: TrainingState,
    checkpoints: Checkpoints,
    parts: FollowParts,
    restored: int | None,
    stop: StopFlag,
    metrics_port: int | None,
) -> int:
    """Train the files that land, as they land; the exit code."""
    files = config.data.files
    assert files is not None and files.follow is not None and state.position is not None
    follow, position = files.follow, state.position
    limit = config.steps
    every = config.checkpoint.every_steps if config.checkpoint else None
    start = restored or 0
    reporter = _reporter(config, parts, metrics_port, True)  # type: ignore[arg-type]
    reporter.max_bad_records = config.data.max_bad_records
    reporter.start(start, checkpoints.restarts, restored)
    validation = held_out(config)
    scorer = Scorer(state.model, validation) if validation is not None else None
    versions = None
    if config.export is not None:
        versions = Versions(state, config.export, steps_done=lambda: reporter.last_step)
        versions.start(start)
    if restored is not None:
        emit(
            "restored",
            step=restored,
            path=checkpoints.restored_path,
            position=position.last(),
            records=position.trained(),
        )
    reporter.input_position(position.last(), position.trained())
    emit("start", step=start, restoredFrom=restored, steps=limit, position=position.last())
    saved = start
    if checkpoints.enabled and checkpoints.latest() is None:
        # The state a lost worker's round rolls back to, before any file is trained.
        reporter.checkpointed(checkpoints.save())

    def save() -> None:
        nonlocal saved
        step = int(state.step.numpy())
        if not checkpoints.enabled or (step == saved and checkpoints.latest() is not None):
            return
        reporter.checkpointed(checkpoints.save())
        saved = step
        emit("positionSaved", step=step, position=position.last(), records=position.trained())
        if scorer is not None:
            result = scorer(step)
            emit(EVENT_EVALUATION, **result)
            reporter.evaluated(result)

    watchdog = Heartbeat.from_env()
    traced = False
    known: set[str] = set()
    quiet_since = time.monotonic()
    step = start
    try:
        while not stop and (limit is None or step < limit):
            names = list_files(files.pattern)
            late = late_files(names, position.last(), known)
            known.update(names)
            if late and traced:
                log.warning(
                    "files landed before the position %s, never trained: %s",
                    position.last(),
                    late[:5],
                )
                emit("lateFiles", files=late, position=position.last())
            todo = new_files(names, position.last())
            if not todo:
                save()  # a quiet location: the position is durable
                idle = time.monotonic() - quiet_since
                if follow.stop_after_idle_seconds and idle >= follow.stop_after_idle_seconds:
                    emit("idle", seconds=round(idle, 1), position=position.last())
                    break
                _wait(stop, watchdog, follow.poll_seconds)
                continue
            if not traced:
                began = time.monotonic()
                parts.warm_up()
                log.info("file training traced in %.1fs", time.monotonic() - began)
                watchdog.arm()
                traced = True
            batch_of = todo[: ROUND_FILES * max(parts.workers, 1)]
            try:
                step = _round(state, parts, reporter, watchdog, batch_of, versions)
            except _Rollback:
                path = checkpoints.latest()
                if path is None:
                    raise
                restore_in_pieces(state, path)
                step = saved = int(state.step.numpy())
                reporter.step(step, force=True)
                emit(
                    "rolledBack",
                    path=path,
                    step=step,
                    position=position.last(),
                    records=position.trained(),
                    files=batch_of,
                )
                watchdog.beat()
                continue
            quiet_since = time.monotonic()
            if every is not None and step - saved >= every:
                save()
                watchdog.beat()
        watchdog.disarm()
        save()
        if stop:
            emit("terminated", step=int(state.step.numpy()), position=position.last())
            return exitcodes.TERMINATED
        reporter.report()
        if config.export_dir:
            export_to(state, config.export_dir)
        if versions is not None:
            versions.final(int(state.step.numpy()))
            _report_versions(versions, reporter)
        emit(
            "followed",
            step=int(state.step.numpy()),
            position=position.last(),
            records=position.trained(),
        )
        reporter.complete()
        return exitcodes.SUCCESS
    finally:
        watchdog.disarm()


def _round(
    state: TrainingState,
    parts: FollowParts,
    reporter: Any,
    watchdog: Heartbeat,
    names: list[str],
    versions: Versions | None,
) -> int:
    """Train ``names`` (every one, in flight two per worker at most); move the position to
    the last of them; the step after. ``_Rollback`` when a file ran twice."""
    assert state.position is not None
    before = parts.started() if parts.started else 0
    pending: deque[tuple[str, Any]] = deque()

    def drain_one() -> None:
        _, handle = pending.popleft()
        steps, done = parts.result(handle)
        watchdog.beat()
        reporter.chunk_done(steps, done.loss, done.hist, done.bad)
        if versions is not None:
            versions.tick(reporter.last_step)
            _report_versions(versions, reporter)

    for name in names:
        pending.append((name, parts.run(name)))
        while len(pending) > 2 * max(parts.workers, 1):
            drain_one()
    while pending:
        drain_one()
    parts.barrier()
    if parts.started is not None and parts.started() - before > len(names):
        raise _Rollback
    state.position.last_file.assign(names[-1])
    step = int(state.step.numpy())
    if state.maintain_every() is not None:
        state.maintain_between_steps(step)  # dynamic tables: no step in flight here
    records = state.position.trained()
    reporter.input_position(names[-1], records)
    reporter.step(step)
    emit("consumed", files=names, step=step, records=records)
    return step


def _wait(stop: StopFlag, watchdog: Heartbeat, seconds: float) -> None:
    """Wait ``seconds`` or until SIGTERM, beating the watchdog (an idle job is no hang)."""
    end = time.monotonic() + seconds
    while not stop and (left := end - time.monotonic()) > 0:
        stop.event.wait(min(left, IDLE_SLICE_SECONDS))
        watchdog.beat()
