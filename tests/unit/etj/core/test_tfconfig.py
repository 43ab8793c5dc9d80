"""TF_CONFIG: every task agrees on the cluster; strategy and evaluator conventions."""

from __future__ import annotations

import json

import pytest

from etj.core.tfconfig import ReplicaSet, cluster_spec, dns_address, tf_config


def test_every_task_names_the_same_cluster():
    replicas = ReplicaSet(chief=1, worker=3, ps=2)
    addr = dns_address("ctr", "ml")
    docs = [json.loads(tf_config(replicas, r, i, addr)) for r, i in replicas.tasks()]
    assert len(docs) == 6
    assert all(d["cluster"] == docs[0]["cluster"] for d in docs)
    assert docs[0]["cluster"]["ps"] == ["ctr-ps-0.ctr.ml.svc:2222", "ctr-ps-1.ctr.ml.svc:2222"]
    assert [(d["task"]["type"], d["task"]["index"]) for d in docs] == replicas.tasks()


def test_mirrored_cluster_has_no_ps_and_worker_zero_leads():
    replicas = ReplicaSet(chief=0, worker=2)
    cluster = cluster_spec(replicas, dns_address("j", "ns"))
    assert set(cluster) == {"worker"}


def test_evaluator_is_not_in_the_cluster_but_has_its_task():
    replicas = ReplicaSet(chief=1, worker=1, ps=1, evaluator=1)
    doc = json.loads(tf_config(replicas, "evaluator", 0, dns_address("j", "ns")))
    assert "evaluator" not in doc["cluster"]
    assert doc["task"] == {"type": "evaluator", "index": 0}
    assert set(doc["cluster"]) == {"chief", "worker", "ps"}


def test_custom_addressing_maps_tasks_to_loopback():
    replicas = ReplicaSet(chief=1, worker=2, ps=1)
    ports = {task: 20000 + n for n, task in enumerate(replicas.tasks())}
    doc = json.loads(tf_config(replicas, "worker", 1, lambda r, i: f"127.0.0.1:{ports[(r, i)]}"))
    assert doc["cluster"]["worker"] == ["127.0.0.1:20001", "127.0.0.1:20002"]


def test_unknown_task_is_refused():
    with pytest.raises(ValueError, match="no task worker/2"):
        tf_config(ReplicaSet(worker=2), "worker", 2, dns_address("j", "ns"))
