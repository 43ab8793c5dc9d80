"""The training loop every training role shares, and what ends it.

``train_loop`` trains from the restored step to ``training.steps`` in chunks of
``stepsPerExecution`` steps or sized by their time (``chunk_size``; ``LoopParts`` says how
a role runs and waits for a chunk),
checkpoints every ``everySteps`` and on SIGTERM, evaluates held-out data after each
checkpoint, reports progress (and TensorBoard summaries), feeds the watchdog, starts the
serving versions of ``spec.export`` between chunks (``etj_trainer.task.versions``: written
beside training), exports at the end, and returns the exit code (``etj_trainer.exitcodes``). ``classify`` maps an error that escaped training
to an exit code: distributed failures a restart cures are retryable (138).

Strategy-neutral: it never builds a strategy, a dataset or the training state.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import tensorflow as tf

from etj.api.progress import EVENT_DELTA_FAILED, EVENT_EVALUATION, EVENT_WARM_STARTED
from etj.api.trainer import TrainerConfig
from etj_trainer import exitcodes
from etj_trainer.task.checkpoint import Checkpoints
from etj_trainer.task.chunk_size import TARGET_SECONDS, ChunkSizer
from etj_trainer.task.evaluate import Scorer, held_out
from etj_trainer.task.events import emit
from etj_trainer.task.export import export_to
from etj_trainer.task.progress import EVAL_RUN, ProgressReporter, tensorboard_dir
from etj_trainer.task.state import TrainingState
from etj_trainer.task.step import ChunkResult, block_steps
from etj_trainer.task.supervisor import Heartbeat
from etj_trainer.task.versions import Versions

log = logging.getLogger(__name__)

# Errors of a peer, a ps or a collective that a restart from the last checkpoint cures.
RETRYABLE_ERRORS: tuple[type[Exception], ...] = (
    tf.errors.UnavailableError,
    tf.errors.AbortedError,
    tf.errors.CancelledError,
    tf.errors.DeadlineExceededError,
)
# After a ps restarted empty, reads of its variables fail with these; a chief restart
# (restoring the checkpoint into the new ps) cures them.
PS_LOST_ERRORS: tuple[type[Exception], ...] = (
    tf.errors.NotFoundError,
    tf.errors.FailedPreconditionError,
)


class Terminated(Exception):
    """SIGTERM arrived: checkpoint (chief) and exit 143."""


class StopFlag:
    """Set by SIGTERM; the loop checks it between chunks."""

    def __init__(self) -> None:
        self.event = threading.Event()

    def install(self) -> StopFlag:
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, lambda *_: self.event.set())
        return self

    def __bool__(self) -> bool:
        return self.event.is_set()


@dataclass
class LoopParts:
    """What the loop needs beyond the training state."""

    schedule: Callable[[int], Any]  # run a chunk of n steps (maybe asynchronously)
    result: Callable[[Any], ChunkResult]  # wait for a chunk's result
    barrier: Callable[[], None]  # wait until every scheduled chunk is done
    max_inflight: int
    examples_per_step: int
    # Trace and compile the chunk function without training (a zero-step chunk): done
    # before the watchdog arms, as it costs minutes on a busy machine and is no hang.
    warm_up: Callable[[], None]
    # Every ``pause_every`` scheduled steps: drain, wait for every chunk, then ``pause(step)``
    # (the dynamic tables' one writer under ParameterServer, with no step in flight).
    pause_every: int | None = None
    pause: Callable[[int], None] | None = None


def _boundaries(start: int, total: int, every: int | None) -> Iterator[int]:
    """The steps at which the loop joins and checkpoints, after ``start``, ending at total."""
    step = start
    while step < total:
        step = min(total, (step // every + 1) * every) if every else total
        yield step


def train_loop(
    config: TrainerConfig,
    state: TrainingState,
    checkpoints: Checkpoints,
    parts: LoopParts,
    restored: int | None,
    stop: StopFlag,
    metrics_port: int | None,
    is_chief: bool,
) -> int:
    """Train from the restored step to ``training.steps``; the exit code."""
    total = config.steps
    # A job that follows its files has a loop of its own (etj_trainer.task.follow).
    assert total is not None
    sizer = ChunkSizer(
        config.steps_per_execution,
        multiple=block_steps(config),
        target_seconds=TARGET_SECONDS if config.sized_by_time else None,
    )
    every = config.checkpoint.every_steps if config.checkpoint else None
    start = restored or 0
    reporter = _reporter(config, parts, metrics_port, is_chief)
    reporter.max_bad_records = config.data.max_bad_records
    if state.model.dynamic:
        reporter.dynamic_source = state.dynamic_stats
    if state.disk_tables():
        reporter.disk_source = state.disk_counters
    reporter.start(start, checkpoints.restarts, restored)
    validation = held_out(config) if is_chief else None
    versions = None
    if is_chief and config.export is not None:
        versions = Versions(state, config.export, steps_done=lambda: reporter.last_step)
    if versions is not None:
        versions.start(start)

    def between_chunks() -> None:
        if versions is not None:
            versions.tick(reporter.last_step)
            _report_versions(versions, reporter)

    scorer = Scorer(state.model, validation) if validation is not None else None
    if is_chief:
        warm = checkpoints.warm_started
        if warm is not None:
            reporter.warm_started(warm.source_step, [t.to_wire() for t in warm.tables])
            emit(
                EVENT_WARM_STARTED,
                source=warm.source,
                path=warm.path,
                sourceStep=warm.source_step,
                step=warm.step,
                tables=[t.to_wire() for t in warm.tables],
                tower=warm.tower,
                lines=warm.lines(),
            )
        if restored is not None:
            emit(
                "restored",
                step=restored,
                path=checkpoints.restored_path,
                seconds=checkpoints.restore_seconds,
                digest=state.digest(),
                warmStart=warm is not None,
            )
        emit("start", step=start, restoredFrom=restored, steps=total)
    if start < total:
        began = time.monotonic()
        parts.warm_up()
        log.info("training step traced and compiled in %.1fs", time.monotonic() - began)
    watchdog = Heartbeat.from_env()
    watchdog.arm()
    try:
        step = start
        for boundary in _boundaries(start, total, every):
            step = _run_round(
                state, parts, reporter, watchdog, step, boundary, sizer, stop, between_chunks
            )
            # Boundaries are the checkpoint steps (and the last step), or where SIGTERM cut.
            if checkpoints.enabled:
                reporter.checkpointed(checkpoints.save())
                watchdog.beat()
            if scorer is not None and (checkpoints.enabled or step >= total):
                # Inline held-out evaluation of the state just saved (the job's status
                # shows it); the watchdog must not count its time as a hang.
                result = scorer(step)
                emit(EVENT_EVALUATION, **result)
                reporter.evaluated(result)
                watchdog.beat()
            if stop:
                raise Terminated
        watchdog.disarm()
        reporter.report()
        if is_chief and config.export_dir:
            export_to(state, config.export_dir)
        if versions is not None:
            # The last version, at the final step (TF Serving's newest), after the one
            # being written.
            versions.final(int(state.step.numpy()))
            _report_versions(versions, reporter)
        reporter.complete()  # the chief's final record; nothing elsewhere
        return exitcodes.SUCCESS
    except Terminated:
        emit("terminated", step=int(state.step.numpy()))
        return exitcodes.TERMINATED
    finally:
        watchdog.disarm()


def _run_round(
    state: TrainingState,
    parts: LoopParts,
    reporter: ProgressReporter,
    watchdog: Heartbeat,
    step: int,
    boundary: int,
    sizer: ChunkSizer,
    stop: StopFlag,
    between_chunks: Callable[[], None] = lambda: None,
) -> int:
    """Chunks from ``step`` to ``boundary`` (fewer on SIGTERM), of the sizes ``sizer``
    gives, ``between_chunks`` called after each chunk's result; the exact step after."""
    pending: deque[tuple[int, Any]] = deque()

    def drain_one() -> None:
        n, handle = pending.popleft()
        try:
            done = parts.result(handle)
        except RETRYABLE_ERRORS as e:
            # The chunk ran (its updates and step count are on the ps) but its worker went
            # away before its loss was fetched. A real ps failure still surfaces from the
            # coordinator's next schedule/join and from reading the step.
            log.warning("lost the result of a finished chunk: %s", str(e).splitlines()[0][:300])
            watchdog.beat()
            reporter.chunk_done(n, None, None)
            return
        watchdog.beat()
        reporter.chunk_done(n, done.loss, done.hist, done.bad)
        between_chunks()
        before = sizer.next()
        after = sizer.observe(n, done.seconds)
        if after >= 2 * before or 2 * after <= before:  # not each small correction
            log.info(
                "chunks of %d steps now, were %d (%d took %.3f s)", after, before, n, done.seconds
            )

    scheduled = step
    every = parts.pause_every
    while scheduled < boundary and not stop:
        n = min(sizer.next(), boundary - scheduled)
        if every:
            # A chunk never runs across a pause.
            n = min(n, every - scheduled % every)
        pending.append((n, parts.schedule(n)))
        scheduled += n
        while len(pending) > parts.max_inflight:
            drain_one()
        if every and parts.pause and scheduled % every == 0:
            while pending:
                drain_one()
            parts.barrier()
            parts.pause(int(state.step.numpy()))
    while pending:
        drain_one()
    parts.barrier()
    exact = int(state.step.numpy())
    if exact > scheduled:
        # ClusterCoordinator runs a closure at least once: a chunk whose worker died after
        # its updates reached the ps is run again elsewhere, and both runs count. Training
        # goes on from the exact count; never fewer steps than scheduled.
        emit("rerun", steps=exact - scheduled, step=exact)
    reporter.step(exact)
    return exact


def _report_versions(versions: Versions, reporter: ProgressReporter) -> None:
    """Report the serving versions written since the last call (on the loop's thread)."""
    for w in versions.collect():
        if w.error is None:
            reporter.exported(w.version, w.step, w.time, w.location, w.seconds, w.trained_during)
        else:
            emit("exportFailed", version=w.version, step=w.step, error=w.error)
    for d in versions.collect_deltas():
        if d.error is None:
            reporter.delta_exported(
                d.base,
                d.sequence,
                d.step,
                d.time,
                d.rows,
                evicted=d.evicted,
                nextVersion=d.next_version,
                location=d.location,
                seconds=round(d.seconds, 2),
            )
        else:
            emit(EVENT_DELTA_FAILED, base=d.base, sequence=d.sequence, step=d.step, error=d.error)


def _reporter(
    config: TrainerConfig, parts: LoopParts, metrics_port: int | None, is_chief: bool
) -> ProgressReporter:
    writer = eval_writer = None
    logdir = tensorboard_dir(config)
    if is_chief and logdir:
        writer = tf.summary.create_file_writer(logdir)
        eval_writer = tf.summary.create_file_writer(f"{logdir.rstrip('/')}/{EVAL_RUN}")
    # Only the chief reports; the other workers' reporters stay silent. The port is the
    # config's (main.metrics_port); 0: no metrics page.
    return ProgressReporter(
        parts.examples_per_step,
        port=metrics_port or 0,
        enabled=is_chief,
        summary_writer=writer,
        eval_writer=eval_writer,
    )


def classify(error: BaseException, ps_strategy: bool) -> int:
    """The exit code for an error that escaped training."""
    if isinstance(error, RETRYABLE_ERRORS):
        return exitcodes.RETRYABLE
    if ps_strategy and isinstance(error, PS_LOST_ERRORS):
        return exitcodes.RETRYABLE
    return exitcodes.BUG
