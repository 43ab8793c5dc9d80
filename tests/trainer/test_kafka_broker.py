"""The test suite's Kafka broker (etj_testcluster.kafka, the ``kafka`` fixture) is a real
one: messages produced to a topic's partitions are read back from them, in order, with
their offsets."""

from __future__ import annotations

from typing import Any

from etj_testcluster.waiting import wait_for


def test_produced_messages_are_consumed_per_partition_in_order(kafka: Any):
    from confluent_kafka import Consumer, TopicPartition

    kafka.create_topic("smoke", partitions=2)
    rows = [(i % 2, f"row-{i}".encode()) for i in range(10)]
    kafka.produce("smoke", rows)
    consumer = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "smoke"})
    consumer.assign([TopicPartition("smoke", p, 0) for p in (0, 1)])
    got: list[tuple[int, int, bytes]] = []

    def all_read() -> bool:
        for m in consumer.consume(10, timeout=0.5):
            assert m.error() is None, m.error()
            got.append((m.partition(), m.offset(), m.value()))
        return len(got) >= len(rows)

    try:
        wait_for(all_read, 120, "the produced messages read back")
    finally:
        consumer.close()
    by_partition = {p: [(o, v) for q, o, v in got if q == p] for p in (0, 1)}
    assert by_partition[0] == [(i, f"row-{2 * i}".encode()) for i in range(5)]
    assert by_partition[1] == [(i, f"row-{2 * i + 1}".encode()) for i in range(5)]


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
