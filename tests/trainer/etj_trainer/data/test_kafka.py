"""The Kafka bridge's parts (etj_trainer.data.kafka): offsets as the checkpoint keeps them,
what a round of chunks advances, a message's columns, one chunk's rows parsed into batches
as a worker's graph parses them, and the reader on the real broker (every partition
assigned from given offsets, nothing committed)."""

from __future__ import annotations

from typing import Any

import pytest
import tensorflow as tf

from etj.api.spec import KafkaData, ModelSpec
from etj_testcluster.waiting import wait_for
from etj_trainer.data.batch import LABEL_KEY
from etj_trainer.data.kafka import (
    Chunk,
    TopicReader,
    advance,
    chunk_batches,
    decode_offsets,
    encode_offsets,
    kafka_columns,
)
from etj_trainer.data.records import DataError

MODEL = ModelSpec.model_validate(
    {
        "embeddings": [{"name": "ids", "vocabularySize": 100, "dimension": 4}],
        "features": [
            {"name": "label", "kind": "label"},
            {"name": "x", "kind": "dense"},
            {"name": "c", "kind": "categorical", "table": "ids"},
        ],
    }
)


def _kafka(**extra: Any) -> KafkaData:
    return KafkaData.model_validate({"bootstrapServers": "127.0.0.1:9", "topic": "t", **extra})


def test_offsets_round_trip_and_advance_past_the_highest_offset_of_each_partition():
    assert decode_offsets("") == decode_offsets("{}") == {}
    assert decode_offsets(encode_offsets({2: 7, 0: 3})) == {0: 3, 2: 7}
    a, b = Chunk(), Chunk()
    for p, o in [(0, 3), (1, 0), (0, 4)]:
        a.add(p, o, b"row")
    b.add(1, 1, b"row")
    assert advance({0: 3, 2: 7}, [a, b]) == {0: 5, 1: 2, 2: 7}
    # Never moved back (a chunk of older offsets after a newer one).
    old = Chunk()
    old.add(0, 1, b"row")
    assert advance({0: 5}, [old]) == {0: 5}


def test_columns_default_to_the_features_in_declared_order():
    assert kafka_columns(MODEL, _kafka()) == ["label", "x", "c"]
    assert kafka_columns(MODEL, _kafka(columns=["c", "label", "x"])) == ["c", "label", "x"]


def test_a_chunk_is_parsed_in_batches_and_a_bad_row_is_named_by_partition_and_offset():
    lines = tf.constant(["1,0.5,a", "0,1.5,b", "1,2.5,c"])
    sources = tf.constant(["t/0", "t/0", "t/1"])
    offsets = tf.constant([10, 11, 4], tf.int64)
    batches = list(chunk_batches(MODEL, _kafka(), lines, sources, offsets, 2, 0))
    assert [b[LABEL_KEY].numpy().tolist() for b in batches] == [[1.0, 0.0], [1.0]]
    bad = tf.constant(["1,0.5,a", "1,oops,b"])
    where, at = tf.constant(["t/1"] * 2), tf.constant([7, 8], tf.int64)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"t/1:8: dense column x"):
        list(chunk_batches(MODEL, _kafka(), bad, where, at, 2, 0))


def test_the_reader_takes_every_partition_from_the_given_offsets_and_commits_nothing(kafka: Any):
    kafka.create_topic("reader", partitions=2)
    kafka.produce("reader", [(i % 2, f"{i % 2},{i},x{i}\n".encode()) for i in range(10)])
    data = KafkaData.model_validate({"bootstrapServers": kafka.bootstrap, "topic": "reader"})
    reader = TopicReader(data, "etj-test-reader")
    got = Chunk()

    def all_taken() -> bool:
        chunk = reader.take(10, 1.0)
        for p, o, v in zip(chunk.partitions, chunk.offsets, chunk.lines, strict=True):
            got.add(p, o, v)
        return len(got) >= 7

    try:
        reader.seek({0: 3})  # partition 0 from offset 3, partition 1 from its start
        assert reader.partitions == [0, 1]
        # A broker that answers: a quiet topic is quiet (asked until it does, with a deadline:
        # on a loaded machine one answer can take longer than the reader waits for it).
        wait_for(reader.answers, 300, "the broker to answer for the topic")
        wait_for(all_taken, 120, "the messages after the given offsets")
    finally:
        reader.close()
    taken = sorted(zip(got.partitions, got.offsets, strict=True))
    assert taken == [(0, 3), (0, 4), (1, 0), (1, 1), (1, 2), (1, 3), (1, 4)]
    # Rows come without their line end.
    assert b"0,6,x6" in got.lines
    # Nothing committed to the group (asked until its coordinator answers).
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    probe = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "etj-test-reader"})

    def committed() -> list[Any] | None:
        try:
            return list(probe.committed([TopicPartition("reader", p) for p in (0, 1)], timeout=120))
        except KafkaException:  # NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS: not yet
            return None

    try:
        answer = wait_for(committed, 600, "the group's committed offsets")
    finally:
        probe.close()
    assert all(tp.offset < 0 for tp in answer), answer


def test_no_broker_answering_is_retryable_at_the_start_and_no_failure_at_a_refresh(
    monkeypatch: pytest.MonkeyPatch,
):
    from etj_trainer.data import kafka as bridge

    monkeypatch.setattr(bridge, "METADATA_SECONDS", 1.0)
    monkeypatch.setattr(bridge, "ANSWER_SECONDS", 1.0)
    reader = TopicReader(_kafka(), "etj-test-away")  # 127.0.0.1:9: nothing listens
    try:
        # At the start (or a rollback's seek): a retryable failure, the chief restarted.
        with pytest.raises(tf.errors.UnavailableError, match="no metadata"):
            reader.seek({0: 5})
        # While it reads (a broker restarting mid-stream): the refresh of the partitions
        # is skipped, the partitions assigned are read on.
        monkeypatch.setattr(bridge, "PARTITIONS_REFRESH_SECONDS", 0.0)
        reader.partitions = [0]
        assert len(reader.take(10, 0.5)) == 0
        assert reader.partitions == [0]
        # Nothing taken and no broker answering: not known to be quiet (no idle stop).
        assert not reader.answers()
    finally:
        reader.close()


def test_a_missing_topic_is_a_data_error(kafka: Any):
    data = KafkaData.model_validate({"bootstrapServers": kafka.bootstrap, "topic": "nowhere"})
    reader = TopicReader(data, "etj-test-missing")
    try:
        with pytest.raises(DataError, match="nowhere"):
            reader.seek({})
    finally:
        reader.close()
