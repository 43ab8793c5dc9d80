"""The test suite's Kafka broker (etj_testcluster.kafka, the ``kafka`` fixture) is a real
one: messages produced to a topic's partitions are read back from them, in order, with
their offsets; restarted (``LocalKafka.restart``), it keeps them and takes more on the same
port."""

from __future__ import annotations

from typing import Any

from etj_testcluster.waiting import wait_for


def _read_back(kafka: Any, topic: str, partitions: int, n: int) -> list[tuple[int, int, bytes]]:
    """The first ``n`` messages of ``topic`` (partition, offset, value), read from offset 0."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": topic})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got: list[tuple[int, int, bytes]] = []

    def all_read() -> bool:
        for m in consumer.consume(n, timeout=0.5):
            assert m.error() is None, m.error()
            got.append((m.partition(), m.offset(), m.value()))
        return len(got) >= n

    try:
        wait_for(all_read, 120, "the produced messages read back")
    finally:
        consumer.close()
    return got


def test_produced_messages_are_consumed_per_partition_in_order(kafka: Any):
    kafka.create_topic("smoke", partitions=2)
    rows = [(i % 2, f"row-{i}".encode()) for i in range(10)]
    kafka.produce("smoke", rows)
    got = _read_back(kafka, "smoke", 2, len(rows))
    by_partition = {p: [(o, v) for q, o, v in got if q == p] for p in (0, 1)}
    assert by_partition[0] == [(i, f"row-{2 * i}".encode()) for i in range(5)]
    assert by_partition[1] == [(i, f"row-{2 * i + 1}".encode()) for i in range(5)]


def test_a_restarted_broker_keeps_its_topics_and_messages_on_the_same_port(own_kafka: Any):
    own_kafka.create_topic("kept", partitions=1)
    own_kafka.produce("kept", [(0, f"before-{i}".encode()) for i in range(5)])
    bootstrap, first = own_kafka.bootstrap, own_kafka.proc.popen.pid
    own_kafka.restart()
    assert own_kafka.bootstrap == bootstrap and own_kafka.proc.popen.pid != first
    own_kafka.produce("kept", [(0, f"after-{i}".encode()) for i in range(5)])
    got = _read_back(own_kafka, "kept", 1, 10)
    want = [f"before-{i}" for i in range(5)] + [f"after-{i}" for i in range(5)]
    assert [(o, v) for _, o, v in got] == [(i, w.encode()) for i, w in enumerate(want)]


def test_more_messages_than_the_producers_local_queue_holds_all_reach_the_broker(kafka: Any):
    from confluent_kafka import Consumer, TopicPartition

    n = 150_000  # librdkafka queues 100,000 at most before the broker has them
    kafka.create_topic("many", partitions=1)
    kafka.produce("many", [(0, b"x")] * n)
    consumer = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "many"})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition("many", 0), timeout=300)
    finally:
        consumer.close()
    assert (low, high) == (0, n)
