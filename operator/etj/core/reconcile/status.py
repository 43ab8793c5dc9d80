"""Counts per role and the summary columns of ``kubectl get etj``. Pure."""

from __future__ import annotations

from collections.abc import Iterable

from etj.api.constants import LABEL_REPLICA_TYPE
from etj.api.roles import ReplicaSet, Role
from etj.api.status import PodPhase, ReplicaStatus, ReplicaStatuses
from etj.core.reconcile.observe import PodState
from etj.core.render.meta import job_selector


def replica_statuses(
    pods: Iterable[PodState], replicas: ReplicaSet, previous: ReplicaStatuses | None
) -> ReplicaStatuses:
    """Active/ready/succeeded/failed per role; restart counters carried over."""
    # Keyed by the label's value (a Role's, or whatever a stray pod carries).
    by_role: dict[str, list[PodState]] = {}
    for p in pods:
        by_role.setdefault(p.role, []).append(p)
    out: dict[str, ReplicaStatus] = {}
    for role, count in replicas.items():
        if count == 0:
            continue
        prev = getattr(previous, role, None) if previous else None
        mine = by_role.get(role, [])
        out[role.value] = ReplicaStatus(
            active=sum(1 for p in mine if p.active),
            ready=sum(1 for p in mine if p.active and p.phase == PodPhase.RUNNING),
            succeeded=sum(1 for p in mine if p.phase == PodPhase.SUCCEEDED),
            failed=sum(1 for p in mine if p.phase == PodPhase.FAILED),
            restarts=prev.restarts if prev else 0,
        )
    return ReplicaStatuses(**out)


def workers_column(statuses: ReplicaStatuses, replicas: ReplicaSet) -> str:
    ready = statuses.worker.ready if statuses.worker else 0
    return f"{ready}/{replicas.worker}"


def worker_selector(job_name: str) -> str:
    """The label selector of a job's worker pods, as the scale subresource gives it."""
    labels = {**job_selector(job_name), LABEL_REPLICA_TYPE: Role.WORKER.value}
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def all_running(pods: dict[tuple[Role, int], PodState], replicas: ReplicaSet) -> bool:
    return all(
        (p := pods.get(task)) is not None and p.active and p.phase == PodPhase.RUNNING
        for task in replicas.tasks()
    )
