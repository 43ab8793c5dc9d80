"""The trainer and the operator name the same roles and pick the same leader.

Each package keeps its own copy (the trainer's ``Role`` and ``is_leader``; the operator's
``etj.core.tfconfig`` role tuples and ``ReplicaSet.leader``), so a role renamed or added on one
side only, or a leader rule changed on one side only, fails here rather than in a cluster.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from etj.cli.convert import convert_tfjob
from etj.core.render import RenderSettings, build_pods, replica_set
from etj.core.tfconfig import ALL_ROLES, TRAINING_ROLES, ReplicaSet
from etj.core.validation import validate_manifest
from etj_trainer import sdk
from etj_trainer.task.cluster import CLUSTER_ROLES, Role, is_leader


def test_trainer_roles_are_the_operators():
    assert [r.value for r in Role] == list(ALL_ROLES)


def test_trainer_cluster_roles_are_the_operators_training_roles():
    assert [r.value for r in CLUSTER_ROLES] == list(TRAINING_ROLES)


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
def test_trainer_and_operator_pick_the_same_leader(replicas: ReplicaSet):
    leaders = [(r, i) for r, i in replicas.tasks() if is_leader(r, i, replicas.chief > 0)]
    assert leaders == [replicas.leader()]


def test_the_sdk_leader_of_rendered_pods_is_the_operators():
    """A job's own program asks ``etj_trainer.sdk.is_leader`` with what etj renders: for
    Kubeflow's dist-mnist shape (PS + Worker, no Chief) that is worker 0 alone."""
    tfjob = Path(__file__).resolve().parents[1] / "cases" / "tfjob" / "dist-mnist.yaml"
    result = validate_manifest(convert_tfjob(yaml.safe_load(tfjob.read_text())))
    assert result.job is not None and result.plan is not None
    leaders = []
    for pod in build_pods(result.job, result.plan, RenderSettings()):
        env = {e["name"]: e.get("value") or "" for e in pod["spec"]["containers"][0]["env"]}
        if sdk.is_leader(env):
            leaders.append((env["ETJ_REPLICA_TYPE"], int(env["ETJ_REPLICA_INDEX"])))
    assert leaders == [replica_set(result.job, result.plan).leader()] == [("worker", 0)]
