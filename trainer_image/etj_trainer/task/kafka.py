"""The source of a job that trains from a Kafka topic (``data.kafka``), for the one follow
loop (``etj_trainer.task.follow.follow_loop``): the chief consumes
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
message has come for ``data.kafka.stopAfterIdleSeconds`` while a broker answered (a broker
restarting or away does not count as a quiet topic: the idle time starts again once one
answers), or on SIGTERM (checkpoint, exit
143). It builds no strategy and no loop, and consumes through the reader it is given.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from etj.api.trainer import TrainerConfig
from etj_trainer.data.kafka import Chunk, TopicReader, advance, chunk_batches, decode_offsets
from etj_trainer.data.kafka import encode_offsets as _encode
from etj_trainer.task.loop import StopFlag
from etj_trainer.task.position import InputPosition
from etj_trainer.task.state import TrainingState
from etj_trainer.task.supervisor import Heartbeat

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


class TopicSource:
    """A topic's messages, chunks of at most ``C`` a unit (``follow.Source``); the offsets
    in the position are each partition's next offset."""

    def __init__(
        self, config: TrainerConfig, position: InputPosition, reader: TopicReader | None = None
    ):
        kafka = config.data.kafka
        assert kafka is not None and position.offsets is not None
        self.config = config
        self.topic = kafka.topic
        self.stop_after_idle_seconds = kafka.stop_after_idle_seconds
        self.position = position
        self.most = chunk_messages(config)
        self.reader = reader or TopicReader(kafka, group_id(config))

    def offsets(self) -> dict[int, int]:
        return decode_offsets(self.position.saved_offsets())

    def start_fields(self, workers: int) -> dict[str, Any]:
        return {
            "topic": self.topic,
            **self.where(),
            "chunkMessages": self.most,
            "rereadBound": reread_bound(self.config, workers),
        }

    def where(self) -> dict[str, Any]:
        return {"offsets": _wire(self.offsets())}

    def label(self) -> str:
        return ""

    def rewind(self) -> None:
        self.reader.seek(self.offsets())

    def take(self, workers: int, stop: StopFlag, watchdog: Heartbeat, traced: bool) -> list[Chunk]:
        """Up to ``ROUND_CHUNKS`` chunks a worker; none when the topic is quiet."""
        out: list[Chunk] = []
        while len(out) < ROUND_CHUNKS * max(workers, 1):
            chunk = self.reader.take(
                self.most, FIRST_WAIT_SECONDS if not out else MORE_WAIT_SECONDS
            )
            if not chunk:
                break
            out.append(chunk)
            if len(chunk) < self.most:
                break  # the topic is drained for now: train what came
        return out

    def args(self, unit: Chunk) -> tuple[Any, ...]:
        return chunk_args(self.topic, unit)

    def advance(self, units: list[Chunk]) -> dict[str, Any]:
        assert self.position.offsets is not None
        self.position.offsets.assign(_encode(advance(self.offsets(), units)))
        return {"messages": sum(len(c) for c in units)}

    def describe(self, units: list[Chunk]) -> dict[str, Any]:
        return {"messages": sum(len(c) for c in units)}

    def idle(self, stop: StopFlag, watchdog: Heartbeat) -> None:
        pass  # ``take`` waited for the first message already

    def answers(self) -> bool:
        return self.reader.answers()

    def close(self) -> None:
        self.reader.close()


def _wire(offsets: dict[int, int]) -> dict[str, int]:
    """Offsets as an event's JSON object (partition numbers as keys)."""
    return {str(p): o for p, o in sorted(offsets.items())}
