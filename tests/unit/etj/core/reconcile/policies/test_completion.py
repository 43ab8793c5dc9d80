"""policies/completion: the leader decides success (or every worker, under successPolicy
AllWorkers); cleanPodPolicy decides what goes."""

from etj.core.reconcile.policies.completion import (
    LEADER_EXIT_GRACE_SECONDS,
    job_succeeded,
    leader_exit_overdue,
    leader_succeeded,
    pods_to_clean,
    success_message,
)
from etj.core.tfconfig import ReplicaSet
from tests.unit.reconcile_helpers import T0, later, pod

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


def _by_key(*pods):
    return {p.key: p for p in pods}


def test_default_policy_worker_zero_decides_without_a_chief():
    """TFJob's default: worker 0 exits 0 -> done, whatever the other workers do."""
    no_chief = ReplicaSet(chief=0, worker=3, ps=2)
    pods = _by_key(pod("worker", 0, "Succeeded"), pod("worker", 1, "Running"))
    assert job_succeeded(pods, no_chief)
    assert job_succeeded(pods, no_chief, "Chief")
    assert not job_succeeded(_by_key(pod("worker", 1, "Succeeded")), no_chief)
    # With a chief, only the chief counts.
    with_chief = ReplicaSet(chief=1, worker=3, ps=2)
    assert not job_succeeded(pods, with_chief)
    assert job_succeeded(_by_key(pod("chief", 0, "Succeeded")), with_chief)


def test_all_workers_policy_waits_for_every_worker():
    no_chief = ReplicaSet(chief=0, worker=3, ps=2)
    done = [pod("worker", i, "Succeeded") for i in range(3)]
    assert job_succeeded(_by_key(*done), no_chief, "AllWorkers")
    assert not job_succeeded(
        _by_key(*done[:2], pod("worker", 2, "Running")), no_chief, "AllWorkers"
    )
    assert not job_succeeded(_by_key(*done[:2]), no_chief, "AllWorkers")  # one has no pod yet
    assert not job_succeeded(_by_key(*done[:2], pod("worker", 2, "Failed")), no_chief, "AllWorkers")


def test_success_message_names_who_finished():
    assert success_message(ReplicaSet(chief=1, worker=2, ps=1)) == (
        "the chief finished training; parameter servers stopped"
    )
    assert success_message(ReplicaSet(chief=0, worker=4, ps=2)).startswith("worker 0 (the chief")
    assert success_message(ReplicaSet(chief=0, worker=4, ps=2), "AllWorkers") == (
        "all 4 workers finished; parameter servers stopped"
    )
    assert success_message(ReplicaSet(chief=0, worker=2), "AllWorkers") == "all 2 workers finished"


def test_a_leader_that_reported_finished_and_runs_on_is_overdue_after_the_grace():
    replicas = ReplicaSet(chief=0, worker=2)
    running = _by_key(pod("worker", 0, "Running"), pod("worker", 1, "Succeeded"))
    assert leader_exit_overdue(running, replicas, None, later(600)) is None  # never reported
    assert leader_exit_overdue(running, replicas, T0, later(10)) == LEADER_EXIT_GRACE_SECONDS - 10
    assert leader_exit_overdue(running, replicas, T0, later(LEADER_EXIT_GRACE_SECONDS)) == 0
    assert leader_exit_overdue(running, replicas, T0, later(3600)) == 0
    # Exited, already going, or no pod: nothing to stop.
    for leader in (
        pod("worker", 0, "Succeeded"),
        pod("worker", 0, "Failed"),
        pod("worker", 0, "Running", terminating=True),
    ):
        assert leader_exit_overdue(_by_key(leader), replicas, T0, later(3600)) is None
    assert leader_exit_overdue({}, replicas, T0, later(3600)) is None
