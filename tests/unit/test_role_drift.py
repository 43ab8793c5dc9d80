"""The trainer and the operator name the same roles and pick the same leader.

Each package keeps its own copy (the trainer's ``Role`` and ``is_leader``; the operator's
``etj.tfconfig`` role tuples and ``ReplicaSet.leader``), so a role renamed or added on one
side only, or a leader rule changed on one side only, fails here rather than in a cluster.
"""

from __future__ import annotations

import pytest

from etj.tfconfig import ALL_ROLES, TRAINING_ROLES, ReplicaSet
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
        ReplicaSet(chief=0, worker=1, evaluator=1),
        ReplicaSet(chief=1, worker=0),
    ],
)
def test_trainer_and_operator_pick_the_same_leader(replicas: ReplicaSet):
    leaders = [(r, i) for r, i in replicas.tasks() if is_leader(r, i, replicas.chief > 0)]
    assert leaders == [replicas.leader()]
