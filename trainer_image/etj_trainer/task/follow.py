"""The one loop of a job that follows arriving data, over a source (``Source``): the files
that land under ``data.files.follow``'s pattern (``FileSource``, here) or a Kafka topic's
messages (``etj_trainer.task.kafka.TopicSource``), trained as they arrive, each exactly once
in the model across restarts.

The unit of work is one source unit, a whole file or a chunk of messages:
``FollowParts.run`` trains it (a closure under ParameterServer, whose worker reads the file
it is named or the rows it is handed; a call in one process). Units are taken in rounds (at
most a few per worker); after a round every unit of it has been trained, the source moves
its position past them (``InputPosition.last_file`` to the round's last file; a topic's
offsets past its messages), and a checkpoint is written when ``everySteps`` steps have
passed since the last one, when the source goes quiet, on SIGTERM and at the end. The
position is saved with the tables, so what a failure re-reads is exactly the units after
the position of the checkpoint restored:

- the chief (or the one process) killed, or a ps (the chief is restarted and restores): the
  units trained since the last checkpoint are trained again, from the restored tables;
  their first training is gone with the state it made, so each counts once;
- a worker lost under ParameterServer: ClusterCoordinator runs the closure of the unit it
  held again on another worker, after some of its steps may already have reached the ps. The
  loop sees it (more closures started than it scheduled: ``FollowParts.started``), restores
  the last checkpoint in place at the end of the round (the workers, the ps and the chief
  stay up), rewinds the source to the restored position and trains from there again.

Stops: at ``training.steps`` if given (at the end of the round that reaches it), when the
source has been quiet for its ``stopAfterIdleSeconds``, or on SIGTERM (suspend, delete:
checkpoint, exit 143). It builds no strategy or dataset itself.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

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
from etj_trainer.task.position import InputPosition
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
    """How a role trains one unit of its source."""

    # Train one unit (maybe asynchronously) from its arguments (``Source.args``): a handle.
    run: Callable[[tuple[Any, ...]], Any]
    result: Callable[[Any], tuple[int, ChunkResult]]  # wait for it: its steps and results
    barrier: Callable[[], None]  # wait until every unit scheduled is done
    workers: int
    examples_per_step: int
    # Trace the unit function before the watchdog arms (minutes on a busy machine).
    warm_up: Callable[[], None]
    # Closures started so far (ParameterServer: a lost worker's unit runs again); None
    # where nothing runs twice.
    started: Callable[[], int] | None = None


class Source(Protocol):
    """What the loop follows: it takes units, trains them through ``FollowParts`` and tells
    the source when a round is trained, rolled back or over."""

    stop_after_idle_seconds: int | None

    def start_fields(self, workers: int) -> dict[str, Any]:
        """The ``start`` event's fields of the source."""

    def where(self) -> dict[str, Any]:
        """The position as events show it (``position`` or ``offsets``)."""

    def label(self) -> str:
        """The position as progress lines show it."""

    def rewind(self) -> None:
        """Read again from the position the state holds (at start and after a rollback)."""

    def take(self, workers: int, stop: StopFlag, watchdog: Heartbeat, traced: bool) -> list[Any]:
        """The next round's units; none when the source is quiet (having waited a while)."""

    def args(self, unit: Any) -> tuple[Any, ...]:
        """A unit as the unit function's arguments."""

    def advance(self, units: list[Any]) -> dict[str, Any]:
        """Move the position past a trained round; the ``consumed`` event's fields."""

    def describe(self, units: list[Any]) -> dict[str, Any]:
        """A rolled-back round in the ``rolledBack`` event."""

    def idle(self, stop: StopFlag, watchdog: Heartbeat) -> None:
        """Wait before looking at a quiet source again."""

    def answers(self) -> bool:
        """Whether a quiet source is known to be quiet (its broker answered): the idle
        stop counts only time it was."""

    def close(self) -> None: ...


class FileSource:
    """The files that land under ``data.files.pattern``, in name order, whole files a unit."""

    def __init__(self, config: TrainerConfig, position: InputPosition):
        files = config.data.files
        assert files is not None and files.follow is not None
        self.pattern = files.pattern
        self.follow = files.follow
        self.stop_after_idle_seconds = files.follow.stop_after_idle_seconds
        self.position = position
        self.known: set[str] = set()

    def start_fields(self, workers: int) -> dict[str, Any]:
        return self.where()

    def where(self) -> dict[str, Any]:
        return {"position": self.position.last()}

    def label(self) -> str:
        return self.position.last()

    def rewind(self) -> None:
        pass  # the next listing starts after the restored position

    def take(self, workers: int, stop: StopFlag, watchdog: Heartbeat, traced: bool) -> list[str]:
        names = list_files(self.pattern)
        last = self.position.last()
        late = late_files(names, last, self.known)
        self.known.update(names)
        if late and traced:
            log.warning("files landed before the position %s, never trained: %s", last, late[:5])
            emit("lateFiles", files=late, position=last)
        return new_files(names, last)[: ROUND_FILES * max(workers, 1)]

    def args(self, unit: str) -> tuple[Any, ...]:
        return (tf.constant(unit),)

    def advance(self, units: list[str]) -> dict[str, Any]:
        self.position.last_file.assign(units[-1])
        return {"files": units}

    def describe(self, units: list[str]) -> dict[str, Any]:
        return {"files": units}

    def idle(self, stop: StopFlag, watchdog: Heartbeat) -> None:
        _wait(stop, watchdog, self.follow.poll_seconds)

    def answers(self) -> bool:
        return True  # a listing that fails raises

    def close(self) -> None:
        pass


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


def quiet_source_unknown(source: Source) -> bool:
    """A source that gave nothing and could not say it is quiet (its broker away): the
    idle stop starts counting again."""
    if source.stop_after_idle_seconds is None or source.answers():
        return False
    log.warning("the source does not answer: not counted as idle")
    return True


class _Rollback(Exception):
    """A lost worker's unit ran twice: restore the last checkpoint."""


def follow_loop(
    config: TrainerConfig,
    state: TrainingState,
    checkpoints: Checkpoints,
    parts: FollowParts,
    source: Source,
    restored: int | None,
    stop: StopFlag,
    metrics_port: int | None,
) -> int:
    """Train the source's units as they arrive; the exit code."""
    assert state.position is not None
    position = state.position
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
            seconds=checkpoints.restore_seconds,
            # What was restored, to check against the checkpoint (as the step loop's).
            digest=state.digest(),
            **source.where(),
            records=position.trained(),
        )
    reporter.input_position(source.label(), position.trained())
    emit(
        "start",
        step=start,
        restoredFrom=restored,
        steps=limit,
        **source.start_fields(parts.workers),
    )
    source.rewind()
    saved = start
    if checkpoints.enabled and checkpoints.latest() is None:
        # The state a lost worker's round rolls back to, before any unit is trained.
        reporter.checkpointed(checkpoints.save())

    def save() -> None:
        nonlocal saved
        step = int(state.step.numpy())
        if not checkpoints.enabled or (step == saved and checkpoints.latest() is not None):
            return
        reporter.checkpointed(checkpoints.save())
        saved = step
        emit("positionSaved", step=step, **source.where(), records=position.trained())
        if scorer is not None:
            result = scorer(step)
            emit(EVENT_EVALUATION, **result)
            reporter.evaluated(result)

    watchdog = Heartbeat.from_env()
    traced = False
    quiet_since = time.monotonic()
    step = start
    try:
        while not stop and (limit is None or step < limit):
            units = source.take(parts.workers, stop, watchdog, traced)
            watchdog.beat()
            if not units:
                save()  # a quiet source: the position is durable
                if quiet_source_unknown(source):
                    quiet_since = time.monotonic()
                idle = time.monotonic() - quiet_since
                quiet = source.stop_after_idle_seconds
                if quiet and idle >= quiet:
                    emit("idle", seconds=round(idle, 1), **source.where())
                    break
                source.idle(stop, watchdog)
                continue
            if not traced:
                began = time.monotonic()
                parts.warm_up()
                log.info("unit training traced in %.1fs", time.monotonic() - began)
                watchdog.arm()
                traced = True
            try:
                step = _round(state, parts, source, reporter, watchdog, units, versions)
            except _Rollback:
                path = checkpoints.latest()
                if path is None:
                    raise
                restore_in_pieces(state, path)
                step = saved = int(state.step.numpy())
                source.rewind()
                reporter.step(step, force=True)
                reporter.input_position(source.label(), position.trained())
                emit(
                    "rolledBack",
                    path=path,
                    step=step,
                    **source.where(),
                    records=position.trained(),
                    **source.describe(units),
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
            emit("terminated", step=int(state.step.numpy()), **source.where())
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
            **source.where(),
            records=position.trained(),
        )
        reporter.complete()
        return exitcodes.SUCCESS
    finally:
        watchdog.disarm()
        source.close()


def _round(
    state: TrainingState,
    parts: FollowParts,
    source: Source,
    reporter: Any,
    watchdog: Heartbeat,
    units: Sequence[Any],
    versions: Versions | None,
) -> int:
    """Train ``units`` (every one, in flight two per worker at most); move the source's
    position past them; the step after. ``_Rollback`` when a unit ran twice."""
    assert state.position is not None
    before = parts.started() if parts.started else 0
    pending: deque[Any] = deque()

    def drain_one() -> None:
        steps, done = parts.result(pending.popleft())
        watchdog.beat()
        reporter.chunk_done(steps, done.loss, done.hist, done.bad)
        if versions is not None:
            versions.tick(reporter.last_step)
            _report_versions(versions, reporter)

    for unit in units:
        pending.append(parts.run(source.args(unit)))
        while len(pending) > 2 * max(parts.workers, 1):
            drain_one()
    while pending:
        drain_one()
    parts.barrier()
    if parts.started is not None and parts.started() - before > len(units):
        raise _Rollback
    consumed = source.advance(list(units))
    step = int(state.step.numpy())
    if state.maintain_every() is not None:
        state.maintain_between_steps(step)  # dynamic tables: no step in flight here
    records = state.position.trained()
    reporter.input_position(source.label(), records)
    reporter.step(step)
    emit("consumed", **consumed, step=step, records=records, **source.where())
    return step


def _wait(stop: StopFlag, watchdog: Heartbeat, seconds: float) -> None:
    """Wait ``seconds`` or until SIGTERM, beating the watchdog (an idle job is no hang)."""
    end = time.monotonic() + seconds
    while not stop and (left := end - time.monotonic()) > 0:
        stop.event.wait(min(left, IDLE_SLICE_SECONDS))
        watchdog.beat()
