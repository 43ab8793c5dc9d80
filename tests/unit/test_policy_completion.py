"""policies/completion: the leader decides success; cleanPodPolicy decides what goes."""

from etj.reconcile.policies.completion import leader_succeeded, pods_to_clean
from etj.tfconfig import ReplicaSet

from .reconcile_helpers import pod

PODS = [
    pod("chief", 0, "Succeeded"),
    pod("worker", 0, "Running"),
    pod("worker", 1, "Failed"),
    pod("ps", 0, "Running"),
    pod("worker", 2, "Running", terminating=True),
]


def test_leader_is_chief_else_worker_zero():
    assert ReplicaSet(chief=1, worker=2).leader() == ("chief", 0)
    assert ReplicaSet(chief=0, worker=2).leader() == ("worker", 0)
    assert leader_succeeded({p.key: p for p in PODS}, ReplicaSet(chief=1, worker=2))
    assert not leader_succeeded({p.key: p for p in PODS}, ReplicaSet(chief=0, worker=2))


def test_clean_pod_policies():
    assert pods_to_clean(PODS, "All") == ["j-chief-0", "j-ps-0", "j-worker-0", "j-worker-1"]
    assert pods_to_clean(PODS, "Running") == ["j-ps-0", "j-worker-0"]
    assert pods_to_clean(PODS, "None") == ["j-ps-0"]
