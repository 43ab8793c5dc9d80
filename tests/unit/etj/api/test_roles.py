"""The contract's roles and leader rule (``etj.api.roles``): one definition the operator,
``etj run`` and the trainer all import, so what the operator renders is what the trainer
and a job's own program (``etj_trainer.sdk``) read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from etj.api.constants import REPLICA_INDEX_ENV, REPLICA_TYPE_ENV
from etj.api.roles import ALL_ROLES, TRAINING_ROLES, ReplicaSet, Role, is_leader, leader
from etj.cli.convert import convert_tfjob
from etj.core.render import RenderSettings, build_pods, replica_set
from etj.core.tfconfig import cluster_spec, tf_config
from etj.core.validation import validate_manifest
from etj_trainer import sdk
from etj_trainer.task.cluster import parse_tf_config


def test_roles_in_tensorflows_order():
    assert [r.value for r in ALL_ROLES] == ["chief", "worker", "ps", "evaluator"]
    assert TRAINING_ROLES == (Role.CHIEF, Role.WORKER, Role.PS)


@pytest.mark.parametrize(
    ("has_chief", "expected"), [(True, (Role.CHIEF, 0)), (False, (Role.WORKER, 0))]
)
def test_the_leader_is_the_chief_else_worker_0(has_chief, expected):
    assert leader(has_chief) == expected
    assert is_leader(*expected, has_chief)
    assert not is_leader(Role.WORKER, 1, has_chief)
    assert not is_leader(Role.PS, 0, has_chief)
    assert not is_leader(Role.EVALUATOR, 0, has_chief)
    # A job with a chief: worker 0 is a plain worker.
    assert is_leader(Role.WORKER, 0, has_chief) is (not has_chief)
    # A chief is the leader even where no cluster lists it (one local process).
    assert is_leader(Role.CHIEF, 0, has_chief)


def test_replica_set_is_keyed_by_role():
    replicas = ReplicaSet(chief=1, worker=2, ps=3)
    assert replicas.count(Role.PS) == replicas.count("ps") == 3
    assert dict(replicas.items()) == {Role.CHIEF: 1, Role.WORKER: 2, Role.PS: 3, Role.EVALUATOR: 0}
    assert replicas.tasks()[:3] == [(Role.CHIEF, 0), (Role.WORKER, 0), (Role.WORKER, 1)]
    with pytest.raises(ValueError, match="'master' is not a valid Role"):
        replicas.count("master")


@pytest.mark.parametrize(
    "replicas",
    [
        ReplicaSet(chief=1, worker=2, ps=2),
        ReplicaSet(chief=1, worker=1, ps=1, evaluator=1),
        ReplicaSet(chief=0, worker=3),
        ReplicaSet(chief=0, worker=4, ps=2),  # a TFJob's PS + Worker without a Chief
        ReplicaSet(chief=0, worker=1, evaluator=1),
        ReplicaSet(chief=1, worker=0),
    ],
)
def test_the_trainer_reads_the_leader_the_operator_renders(replicas: ReplicaSet):
    """Each task's TF_CONFIG as the operator writes it, parsed by the trainer: exactly the
    operator's leader says it is the chief."""

    def address(role: str, index: int) -> str:
        return f"{role}-{index}:2222"

    chiefs = [
        task
        for task in replicas.tasks()
        if parse_tf_config(tf_config(replicas, *task, address)).is_leader()
    ]
    assert chiefs == [replicas.leader()]
    # TF_CONFIG keeps plain strings: the enum never reaches the wire as anything else.
    assert all(type(k) is str for k in cluster_spec(replicas, address))
    role, index = replicas.leader()
    assert json.loads(tf_config(replicas, role, index, address))["task"] == {
        "type": role.value,
        "index": 0,
    }


def test_the_sdk_leader_of_rendered_pods_is_the_operators():
    """A job's own program asks ``etj_trainer.sdk.is_leader`` with what etj renders: for
    Kubeflow's dist-mnist shape (PS + Worker, no Chief) that is worker 0 alone."""
    tfjob = Path(__file__).resolve().parents[3] / "cases" / "tfjob" / "dist-mnist.yaml"
    result = validate_manifest(convert_tfjob(yaml.safe_load(tfjob.read_text())))
    assert result.job is not None and result.plan is not None
    leaders = []
    for pod in build_pods(result.job, result.plan, RenderSettings()):
        env = {e["name"]: e.get("value") or "" for e in pod["spec"]["containers"][0]["env"]}
        if sdk.is_leader(env):
            leaders.append((env[REPLICA_TYPE_ENV], int(env[REPLICA_INDEX_ENV])))
    assert leaders == [replica_set(result.job, result.plan).leader()] == [("worker", 0)]
