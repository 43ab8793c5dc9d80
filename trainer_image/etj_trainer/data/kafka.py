"""Kafka input (``data.kafka``): a bridge in the chief, rows handed to the workers in the
closures that train them.

Why a bridge. Under ParameterServer a worker's input pipeline is a graph the coordinator
ships, so a Python consumer in the coordinator's process cannot run on the worker. Three
ways were open: (a) the chief consumes (confluent-kafka, librdkafka) and hands each closure
a chunk of rows as a string tensor in its arguments; (b) a consumer process beside each
worker; (c) a dataset kernel of our own over librdkafka. (a) is taken: it is the
follow-files machinery (``etj_trainer.task.follow``: one closure per unit, a round trained
whole before the position moves, a lost worker's re-run closure seen and rolled back), so
the offsets the checkpoint holds are exactly the messages the saved tables learned from,
with no second process to keep in step with the checkpoint and no kernel to build for every
TensorFlow. Its cost: every message crosses the chief's Python (consume, one bytes object
each) and then gRPC to a worker in the closure's arguments, so the chief's one core and
link bound a job's messages/s however many workers it has (measured against the same rows
from files: ``benchmarks/kafka_input.py``, ``benchmarks/RESULTS.md``). (b) or (c) would lift
that bound when a job needs more than the chief can bridge.

Partitions: the chief assigns every partition of the topic to itself explicitly
(``Consumer.assign``, never ``subscribe``: no group rebalance, no commits; ``group.id`` is
only librdkafka's requirement), from the checkpoint's offsets (the earliest retained one
for a partition the checkpoint does not name: a first start, or partitions added since;
the metadata is read again every ``PARTITIONS_REFRESH_SECONDS``; a refresh no broker
answers is skipped, while at the start no answer is a retryable failure). Workers are not given
partitions: each closure's chunk goes to whichever worker is free, so scaling the workers
re-divides the stream at once, with nothing to reassign.

This module consumes and builds the graph of one chunk's batches; the pure parts (offsets
as text, what a chunk advances) have no I/O. It decides nothing about rounds or checkpoints.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

import tensorflow as tf

from etj.api.spec import KafkaData, ModelSpec
from etj_trainer.data import features as fx
from etj_trainer.data.batch import LABEL_KEY
from etj_trainer.data.delimited import DelimitedParser
from etj_trainer.data.records import BAD_KEY, DataError

__all__ = [
    "Chunk",
    "TopicReader",
    "advance",
    "chunk_batches",
    "decode_offsets",
    "encode_offsets",
    "kafka_columns",
]

log = logging.getLogger(__name__)

# How often the chief looks for partitions added to the topic.
PARTITIONS_REFRESH_SECONDS = 30.0
# How long the chief waits for the topic's metadata.
METADATA_SECONDS = 30.0
# How long a quiet topic's broker has to answer for the quiet to count as idle: a broker
# that is down does not answer at all, so this only has to outlast a slow answer (2 s did
# not, at a load of ~35 in cold CI: a broker that was up was taken for one that was not).
ANSWER_SECONDS = 10.0


def encode_offsets(offsets: dict[int, int]) -> str:
    """The checkpoint's text of ``partition -> next offset to read``. Pure."""
    return json.dumps({str(p): int(o) for p, o in sorted(offsets.items())}, separators=(",", ":"))


def decode_offsets(text: str) -> dict[int, int]:
    """``encode_offsets``' inverse ("" or "{}": nothing read yet). Pure."""
    return {int(p): int(o) for p, o in json.loads(text or "{}").items()}


@dataclass
class Chunk:
    """Messages taken in one go, in the order read (per partition, offset order)."""

    lines: list[bytes] = field(default_factory=list)
    partitions: list[int] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.lines)

    def add(self, partition: int, offset: int, value: bytes) -> None:
        self.lines.append(value)
        self.partitions.append(partition)
        self.offsets.append(offset)


def advance(offsets: dict[int, int], chunks: Iterable[Chunk]) -> dict[int, int]:
    """The offsets after ``chunks`` are trained: each partition's next offset is one past
    the highest offset taken from it (never moved back). Pure."""
    out = dict(offsets)
    for chunk in chunks:
        for p, o in zip(chunk.partitions, chunk.offsets, strict=True):
            if o + 1 > out.get(p, 0):
                out[p] = o + 1
    return out


def kafka_columns(model: ModelSpec, kafka: KafkaData) -> list[str]:
    """The fields of a message: ``data.kafka.columns``, else the columns of
    ``model.features`` in the order they are declared (each column once). Pure."""
    if kafka.columns:
        return list(kafka.columns)
    assert model.features is not None
    return list(dict.fromkeys(f.source for f in model.features))


def chunk_batches(
    model: ModelSpec,
    kafka: KafkaData,
    lines: tf.Tensor,
    sources: tf.Tensor,
    offsets: tf.Tensor,
    batch_size: int,
    max_bad: int,
) -> tf.data.Dataset:
    """A chunk's messages (``lines``; ``sources`` "<topic>/<partition>" and ``offsets``
    name each in a ``DataError``: ``<topic>/<partition>:<offset>``) in batches of
    ``batch_size`` (the last one shorter), parsed as delimited rows of ``model.features``.
    Built inside the function that trains the chunk (a worker's graph)."""
    parse = DelimitedParser(
        fx.FeatureSet(model),
        kafka_columns(model, kafka),
        kafka.delimiter,
        max_bad,
        kafka.quote,
    )
    rows = tf.data.Dataset.from_tensor_slices((sources, offsets, lines)).batch(batch_size)
    parsed = rows.map(parse)
    return parsed.filter(lambda b: tf.logical_or(tf.size(b[LABEL_KEY]) > 0, b[BAD_KEY] > 0))


def _row(value: bytes | None) -> bytes:
    """A message's row: without a line end (producers often send one)."""
    return (value or b"").rstrip(b"\r\n")


class TopicReader:
    """The chief's consumer of ``data.kafka.topic``: every partition assigned explicitly
    from given offsets; nothing committed."""

    def __init__(self, kafka: KafkaData, group_id: str):
        from confluent_kafka import Consumer

        self.kafka = kafka
        self.consumer = Consumer(
            {
                "bootstrap.servers": kafka.bootstrap_servers,
                "group.id": group_id,
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "auto.offset.reset": "earliest",
                # Enough fetched ahead that a chunk is one consume call.
                "queued.max.messages.kbytes": 65536,
                "fetch.wait.max.ms": 100,
            }
        )
        self.partitions: list[int] = []
        self._refreshed = 0.0

    def topic_partitions(self, timeout: float | None = None) -> list[int]:
        """The topic's partitions now (metadata from the brokers, within ``timeout``
        seconds, else ``METADATA_SECONDS``). ``UnavailableError`` (retryable: a restart
        may cure it) when no broker answers in time."""
        from confluent_kafka import KafkaException

        try:
            meta = self.consumer.list_topics(
                self.kafka.topic, timeout=METADATA_SECONDS if timeout is None else timeout
            )
        except KafkaException as e:
            raise tf.errors.UnavailableError(
                None, None, f"kafka topic {self.kafka.topic!r}: no metadata: {e}"
            ) from e
        topic = meta.topics.get(self.kafka.topic)
        if topic is None or topic.error is not None:
            why = topic.error if topic is not None else "not in the metadata"
            raise DataError(f"kafka topic {self.kafka.topic!r}: {why}")
        return sorted(topic.partitions)

    def seek(self, offsets: dict[int, int]) -> None:
        """Read every partition from ``offsets`` (the earliest retained message of one it
        does not name)."""
        from confluent_kafka import OFFSET_BEGINNING, TopicPartition

        self.partitions = self.topic_partitions()
        self._refreshed = time.monotonic()
        self.consumer.assign(
            [
                TopicPartition(self.kafka.topic, p, offsets.get(p, OFFSET_BEGINNING))
                for p in self.partitions
            ]
        )

    def _refresh(self) -> None:
        """Partitions added to the topic since: read from their start."""
        from confluent_kafka import OFFSET_BEGINNING, TopicPartition

        if time.monotonic() - self._refreshed < PARTITIONS_REFRESH_SECONDS:
            return
        self._refreshed = time.monotonic()
        try:
            now = self.topic_partitions()
        except (tf.errors.UnavailableError, DataError) as e:
            # A broker away (restarted, busy) or metadata without the topic for a moment:
            # the partitions assigned are read on; the next refresh looks again.
            log.warning("kafka topic %r: partitions not refreshed: %s", self.kafka.topic, e)
            return
        added = [p for p in now if p not in self.partitions]
        if added:
            self.consumer.incremental_assign(
                [TopicPartition(self.kafka.topic, p, OFFSET_BEGINNING) for p in added]
            )
            self.partitions = sorted(self.partitions + added)

    def take(self, most: int, timeout: float) -> Chunk:
        """Up to ``most`` messages, waiting at most ``timeout`` seconds for the first."""
        from confluent_kafka import KafkaError

        self._refresh()
        chunk = Chunk()
        deadline = time.monotonic() + timeout
        while len(chunk) < most:
            left = deadline - time.monotonic()
            messages = self.consumer.consume(most - len(chunk), timeout=max(left, 0.0))
            for m in messages:
                error = m.error()
                if error is not None:
                    if error.fatal():
                        raise DataError(f"kafka topic {self.kafka.topic!r}: {error}")
                    if error.code() != KafkaError._PARTITION_EOF:
                        # A broker away (restarted, moved): librdkafka reconnects itself.
                        log.warning("kafka topic %r: %s", self.kafka.topic, error)
                    continue
                chunk.add(m.partition(), m.offset(), _row(m.value()))
            if not messages or time.monotonic() >= deadline:
                break
        return chunk

    def answers(self) -> bool:
        """Whether a broker answers for the topic now (metadata within ``ANSWER_SECONDS``):
        a quiet topic whose brokers do not answer is not known to be quiet."""
        try:
            self.topic_partitions(ANSWER_SECONDS)
        except (tf.errors.UnavailableError, DataError):
            return False
        return True

    def close(self) -> None:
        self.consumer.close()
