"""etj.core.reconcile.status: counts per role and ``kubectl get etj``'s columns."""

from __future__ import annotations

from etj.api.constants import LABEL_REPLICA_TYPE
from etj.api.roles import ReplicaSet, Role
from etj.api.status import ReplicaStatus, ReplicaStatuses
from etj.core.reconcile.status import all_running, replica_statuses, worker_selector, workers_column
from etj.core.render.meta import job_selector
from tests.unit.reconcile_helpers import pod

REPLICAS = ReplicaSet(chief=1, worker=3, ps=1)


def test_counts_per_role_from_the_pods():
    pods = [
        pod(Role.CHIEF, 0),
        pod(Role.WORKER, 0),
        pod(Role.WORKER, 1, phase="Pending"),
        pod(Role.WORKER, 2, phase="Failed", exit_code=1),
        pod(Role.PS, 0, phase="Succeeded"),
    ]
    st = replica_statuses(pods, REPLICAS, None)
    assert st.chief == ReplicaStatus(active=1, ready=1)
    assert st.worker == ReplicaStatus(active=2, ready=1, failed=1)
    assert st.ps == ReplicaStatus(succeeded=1)
    assert st.evaluator is None  # a role the job does not run has no entry


def test_restart_counts_are_carried_over_and_stray_pods_ignored():
    previous = ReplicaStatuses(worker=ReplicaStatus(restarts=4))
    pods = [pod(Role.WORKER, 0), pod("sidecar-thing", 0)]
    st = replica_statuses(pods, ReplicaSet(worker=1), previous)
    assert st.worker == ReplicaStatus(active=1, ready=1, restarts=4)
    assert st.chief is None and st.ps is None


def test_the_workers_column_is_ready_over_desired():
    st = ReplicaStatuses(worker=ReplicaStatus(ready=2, active=3))
    assert workers_column(st, REPLICAS) == "2/3"
    assert workers_column(ReplicaStatuses(), REPLICAS) == "0/3"


def test_the_worker_selector_is_the_jobs_labels_and_the_worker_role_sorted():
    text = worker_selector("ctr")
    pairs = dict(p.split("=", 1) for p in text.split(","))
    assert pairs == {**job_selector("ctr"), LABEL_REPLICA_TYPE: Role.WORKER.value}
    assert text.split(",") == sorted(text.split(","))


def test_all_running_needs_every_task_running_and_active():
    tasks = {(r, i): pod(r, i) for r, i in REPLICAS.tasks()}
    assert all_running(tasks, REPLICAS)
    assert not all_running({**tasks, (Role.PS, 0): pod(Role.PS, 0, phase="Pending")}, REPLICAS)
    assert not all_running({k: v for k, v in tasks.items() if k != (Role.WORKER, 2)}, REPLICAS)
    assert not all_running(
        {**tasks, (Role.CHIEF, 0): pod(Role.CHIEF, 0, terminating=True)}, REPLICAS
    )
