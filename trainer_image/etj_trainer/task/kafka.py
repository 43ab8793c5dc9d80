"""The loop of a job that trains from a Kafka topic (``data.kafka``): the chief consumes
(``etj_trainer.data.kafka``: why a bridge in the chief, and what it costs) and each
closure trains one chunk of at most ``C = batchSizePerReplica x stepsPerExecution``
messages, handed to it as a string tensor (one call in one process).

Chunks are taken in rounds (at most ``ROUND_CHUNKS`` per worker, ``W`` workers; one in one
process). After a round every chunk of it has been trained, the offsets
(``InputPosition.offsets``: each partition's next offset) move past the round's messages;
a checkpoint is written at the end of the first round after which ``everySteps`` steps
have passed since the last one, when the topic goes quiet, on SIGTERM and at the end. The
offsets are saved with the tables, and a restart or rollback reads every partition again
from the offsets of the checkpoint restored, so no message is lost and what a failure
trains again is the messages trained after that checkpoint:

- the chief (or the one process) killed, or a ps (the chief is restarted and restores):
  the messages trained since the last checkpoint are read and trained again, from the
  restored tables (their first training is gone with the state it made);
- a worker lost under ParameterServer: its chunk's closure runs again on another worker
  after some of its steps may have reached the ps; the loop sees it (more closures
  started than scheduled), restores the last checkpoint in place at the end of the round
  and reads again from its offsets.

The bound (``reread_bound``): at the end of a round that did not checkpoint fewer than
``everySteps`` steps have passed since the last checkpoint, each of at most ``batch``
messages; the round in flight holds at most ``ROUND_CHUNKS x W x C`` messages. So a failure
trains again at most ``(everySteps - 1) x batch + ROUND_CHUNKS x W x C`` messages (a
SIGTERM: none, it checkpoints first). Messages the chief had read but not trained when it
died are read again too, but were never trained: they are no re-read of training.

Stops: at ``training.steps`` if given (at the end of the round that reaches it), when no
message has come for ``data.kafka.stopAfterIdleSeconds``, or on SIGTERM (checkpoint, exit
143). It builds no strategy and consumes through the reader it is given.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from typing import Any

import tensorflow as tf

from etj.api.progress import EVENT_EVALUATION
from etj.api.trainer import TrainerConfig
from etj_trainer import exitcodes
from etj_trainer.data.kafka import Chunk, TopicReader, advance, chunk_batches, decode_offsets
from etj_trainer.data.kafka import encode_offsets as _encode
from etj_trainer.task.checkpoint import Checkpoints, restore_in_pieces
from etj_trainer.task.evaluate import Scorer, held_out
from etj_trainer.task.events import emit
from etj_trainer.task.export import export_to
from etj_trainer.task.follow import FollowParts, _Rollback
from etj_trainer.task.loop import StopFlag, _report_versions, _reporter
from etj_trainer.task.state import TrainingState
from etj_trainer.task.supervisor import Heartbeat
from etj_trainer.task.versions import Versions

log = logging.getLogger(__name__)

# Chunks a round takes per worker at most: every worker busy, rounds short.
ROUND_CHUNKS = 2
# Seconds the chief waits for a round's first message (then looks at SIGTERM, the idle
# limit, the watchdog), and for each further chunk of a round.
FIRST_WAIT_SECONDS = 1.0
MORE_WAIT_SECONDS = 0.2


def chunk_messages(config: TrainerConfig) -> int:
    """``C``: the messages of one closure. Pure."""
    return config.training.batch_size_per_replica * config.steps_per_execution


def reread_bound(config: TrainerConfig, workers: int) -> int:
    """The most messages a failure trains again (the module's docstring). Pure."""
    every = config.checkpoint.every_steps if config.checkpoint else 0
    batch = config.training.batch_size_per_replica
    return max(every - 1, 0) * batch + ROUND_CHUNKS * max(workers, 1) * chunk_messages(config)


def group_id(config: TrainerConfig) -> str:
    """``data.kafka.consumerGroup``, else ``etj-<job name>``. Pure."""
    assert config.data.kafka is not None
    return config.data.kafka.consumer_group or f"etj-{config.job_name}"


def chunk_function(config: TrainerConfig, state: TrainingState, starts: Any = None) -> Any:
    """The ``tf.function`` that trains one chunk (lines, "<topic>/<partition>" of each,
    offsets); ``starts`` (a variable where the steps run) counts its runs."""
    kafka = config.data.kafka
    assert kafka is not None
    batch = config.training.batch_size_per_replica
    max_bad = config.data.max_bad_records

    @tf.function(
        input_signature=[
            tf.TensorSpec([None], tf.string),
            tf.TensorSpec([None], tf.string),
            tf.TensorSpec([None], tf.int64),
        ]
    )
    def train_chunk(lines: tf.Tensor, sources: tf.Tensor, offsets: tf.Tensor) -> tf.Tensor:
        if starts is not None:
            with tf.control_dependencies([starts.assign_add(1)]):
                lines = tf.identity(lines)
        return state.train_batches(
            chunk_batches(config.model, kafka, lines, sources, offsets, batch, max_bad)
        )

    return train_chunk


def chunk_args(topic: str, chunk: Chunk) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """A chunk as ``chunk_function``'s arguments."""
    return (
        tf.constant(chunk.lines, tf.string),
        tf.constant([f"{topic}/{p}" for p in chunk.partitions], tf.string),
        tf.constant(chunk.offsets, tf.int64),
    )


def kafka_loop(
    config: TrainerConfig,
    state: TrainingState,
    checkpoints: Checkpoints,
    parts: FollowParts,
    restored: int | None,
    stop: StopFlag,
    metrics_port: int | None,
    reader: TopicReader | None = None,
) -> int:
    """Train the topic's messages as they arrive; the exit code."""
    kafka = config.data.kafka
    assert kafka is not None and state.position is not None
    position = state.position
    reader = reader or TopicReader(kafka, group_id(config))
    limit = config.steps
    every = config.checkpoint.every_steps if config.checkpoint else None
    start = restored or 0
    most = chunk_messages(config)
    reporter = _reporter(config, parts, metrics_port, True)  # type: ignore[arg-type]
    reporter.max_bad_records = config.data.max_bad_records
    reporter.start(start, checkpoints.restarts, restored)
    validation = held_out(config)
    scorer = Scorer(state.model, validation) if validation is not None else None
    versions = None
    if config.export is not None:
        versions = Versions(state, config.export, steps_done=lambda: reporter.last_step)
        versions.start(start)
    offsets = decode_offsets(position.saved_offsets())
    if restored is not None:
        emit(
            "restored",
            step=restored,
            path=checkpoints.restored_path,
            offsets=_wire(offsets),
            records=position.trained(),
        )
    reporter.input_position("", position.trained())
    bound = reread_bound(config, parts.workers)
    emit(
        "start",
        step=start,
        restoredFrom=restored,
        steps=limit,
        topic=kafka.topic,
        offsets=_wire(offsets),
        chunkMessages=most,
        rereadBound=bound,
    )
    reader.seek(offsets)
    saved = start
    if checkpoints.enabled and checkpoints.latest() is None:
        # The state a lost worker's round rolls back to, before any message is trained.
        reporter.checkpointed(checkpoints.save())

    def save() -> None:
        nonlocal saved
        step = int(state.step.numpy())
        if not checkpoints.enabled or (step == saved and checkpoints.latest() is not None):
            return
        reporter.checkpointed(checkpoints.save())
        saved = step
        emit(
            "positionSaved",
            step=step,
            offsets=_wire(decode_offsets(position.saved_offsets())),
            records=position.trained(),
        )
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
            chunks = _take_round(reader, most, ROUND_CHUNKS * max(parts.workers, 1))
            watchdog.beat()
            if not chunks:
                save()  # a quiet topic: the offsets are durable
                idle = time.monotonic() - quiet_since
                if kafka.stop_after_idle_seconds and idle >= kafka.stop_after_idle_seconds:
                    emit("idle", seconds=round(idle, 1), offsets=_wire(offsets))
                    break
                continue
            if not traced:
                began = time.monotonic()
                parts.warm_up()
                log.info("chunk training traced in %.1fs", time.monotonic() - began)
                watchdog.arm()
                traced = True
            try:
                step = _round(state, parts, reporter, watchdog, chunks, versions, kafka.topic)
            except _Rollback:
                path = checkpoints.latest()
                if path is None:
                    raise
                restore_in_pieces(state, path)
                step = saved = int(state.step.numpy())
                offsets = decode_offsets(position.saved_offsets())
                reader.seek(offsets)
                reporter.step(step, force=True)
                reporter.input_position("", position.trained())
                emit(
                    "rolledBack",
                    path=path,
                    step=step,
                    offsets=_wire(offsets),
                    records=position.trained(),
                    messages=sum(len(c) for c in chunks),
                )
                watchdog.beat()
                continue
            offsets = decode_offsets(position.saved_offsets())
            quiet_since = time.monotonic()
            if every is not None and step - saved >= every:
                save()
                watchdog.beat()
        watchdog.disarm()
        save()
        if stop:
            emit("terminated", step=int(state.step.numpy()), offsets=_wire(offsets))
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
            offsets=_wire(offsets),
            records=position.trained(),
        )
        reporter.complete()
        return exitcodes.SUCCESS
    finally:
        watchdog.disarm()
        reader.close()


def _wire(offsets: dict[int, int]) -> dict[str, int]:
    """Offsets as an event's JSON object (partition numbers as keys)."""
    return {str(p): o for p, o in sorted(offsets.items())}


def _take_round(reader: TopicReader, most: int, chunks: int) -> list[Chunk]:
    """Up to ``chunks`` chunks of up to ``most`` messages; none when the topic is quiet."""
    out: list[Chunk] = []
    while len(out) < chunks:
        chunk = reader.take(most, FIRST_WAIT_SECONDS if not out else MORE_WAIT_SECONDS)
        if not chunk:
            break
        out.append(chunk)
        if len(chunk) < most:
            break  # the topic is drained for now: train what came
    return out


def _round(
    state: TrainingState,
    parts: FollowParts,
    reporter: Any,
    watchdog: Heartbeat,
    chunks: list[Chunk],
    versions: Versions | None,
    topic: str,
) -> int:
    """Train ``chunks`` (every one, in flight two per worker at most); move the offsets past
    them; the step after. ``_Rollback`` when a chunk ran twice."""
    assert state.position is not None and state.position.offsets is not None
    before = parts.started() if parts.started else 0
    pending: deque[Any] = deque()

    def drain_one() -> None:
        steps, done = parts.result(pending.popleft())
        watchdog.beat()
        reporter.chunk_done(steps, done.loss, done.hist, done.bad)
        if versions is not None:
            versions.tick(reporter.last_step)
            _report_versions(versions, reporter)

    for chunk in chunks:
        pending.append(parts.run(chunk_args(topic, chunk)))
        while len(pending) > 2 * max(parts.workers, 1):
            drain_one()
    while pending:
        drain_one()
    parts.barrier()
    if parts.started is not None and parts.started() - before > len(chunks):
        raise _Rollback
    offsets = advance(decode_offsets(state.position.saved_offsets()), chunks)
    state.position.offsets.assign(_encode(offsets))
    step = int(state.step.numpy())
    if state.maintain_every() is not None:
        state.maintain_between_steps(step)
    records = state.position.trained()
    reporter.input_position("", records)
    reporter.step(step)
    emit(
        "consumed",
        messages=sum(len(c) for c in chunks),
        step=step,
        records=records,
        offsets=_wire(offsets),
    )
    return step
