"""The local Kafka broker's configuration (etj_testcluster.kafka): one KRaft node on
loopback, and the cluster id in the form the storage tool takes."""

from __future__ import annotations

import base64
import uuid
from pathlib import Path

import pytest

from etj_testcluster.kafka import (
    cluster_id,
    end_offsets,
    java_command,
    kafka_lib,
    server_properties,
)


def test_one_node_is_broker_and_controller_on_loopback_only():
    props = dict(
        line.split("=", 1) for line in server_properties(9092, 9093, Path("/s/data")).splitlines()
    )
    assert props["process.roles"] == "broker,controller"
    assert props["controller.quorum.voters"] == "1@127.0.0.1:9093"
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093"
    assert props["advertised.listeners"] == "PLAINTEXT://127.0.0.1:9092"
    assert props["log.dirs"] == "/s/data"
    # One broker: an internal topic asking for three replicas would never be created.
    assert props["offsets.topic.replication.factor"] == "1"


def test_the_cluster_id_is_a_uuid_in_unpadded_url_safe_base64():
    seed = uuid.UUID("12345678-1234-5678-1234-567812345678")
    cid = cluster_id(seed)
    assert len(cid) == 22 and "=" not in cid
    assert base64.urlsafe_b64decode(cid + "==") == seed.bytes
    assert cluster_id() != cluster_id()


def test_java_runs_a_main_class_on_the_cached_classpath():
    cmd = java_command("kafka.Kafka", "server.properties")
    assert cmd[0] == "java" and cmd[-2:] == ["kafka.Kafka", "server.properties"]
    assert cmd[cmd.index("-cp") + 1] == f"{kafka_lib()}/*"


def test_a_cluster_id_never_starts_with_a_dash(monkeypatch):
    """The storage tool reads an id that starts with "-" as an option and fails (seen:
    ``-t -mUZbb4p...``); Kafka's own random ids never start with one, nor do these."""
    leading_dash = uuid.UUID(bytes=b"\xf8" + bytes(15))
    assert base64.urlsafe_b64encode(leading_dash.bytes).startswith(b"-")
    drawn = iter([leading_dash, uuid.UUID("12345678-1234-5678-1234-567812345678")])
    monkeypatch.setattr(uuid, "uuid4", lambda: next(drawn))
    assert cluster_id() == cluster_id(uuid.UUID("12345678-1234-5678-1234-567812345678"))
    with pytest.raises(ValueError, match="starts with '-'"):
        cluster_id(leading_dash)


def test_end_offsets_of_rows_round_robin_from_an_empty_topic():
    assert end_offsets(5, 2) == {"0": 3, "1": 2}
    assert end_offsets(0, 3) == {"0": 0, "1": 0, "2": 0}
