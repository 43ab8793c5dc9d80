"""When a job has succeeded, and which pods go when it finishes.

``runPolicy.successPolicy``, TFJob's rules: ``Chief`` (the default) — the job succeeds when
its leader exits 0: the chief, or worker 0 without a chief (``etj.api.roles.leader``);
``AllWorkers`` — when every worker has exited 0 (a job without a chief only: the API
refuses it with one). ps pods never exit by themselves, so they are always stopped when the
job finishes; the rest follows cleanPodPolicy (All, Running, None).

Pure.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from etj.api.roles import ReplicaSet, Role
from etj.api.spec import CleanPodPolicy, SuccessPolicy
from etj.api.status import PodPhase
from etj.core.reconcile.observe import PodState


def _succeeded(pods: dict[tuple[Role, int], PodState], key: tuple[Role, int]) -> bool:
    pod = pods.get(key)
    return pod is not None and pod.phase == PodPhase.SUCCEEDED


def leader_succeeded(pods: dict[tuple[Role, int], PodState], replicas: ReplicaSet) -> bool:
    return _succeeded(pods, replicas.leader())


def job_succeeded(
    pods: dict[tuple[Role, int], PodState],
    replicas: ReplicaSet,
    policy: SuccessPolicy = SuccessPolicy.CHIEF,
) -> bool:
    """Whether the job has succeeded under ``policy`` (``runPolicy.successPolicy``)."""
    if policy == SuccessPolicy.ALL_WORKERS and replicas.chief == 0 and replicas.worker:
        return all(_succeeded(pods, (Role.WORKER, i)) for i in range(replicas.worker))
    return leader_succeeded(pods, replicas)


# How long a leader that reported it trained every step (status.progress.finishedTime) may
# take to exit before the operator stops it and counts the job succeeded. Its checkpoint,
# export and completion record are written before it reports, and etj's trainer leaves at
# once after (etj_trainer.ending): a minute is far beyond a healthy exit and short against
# a job left Running for good (a program of the job's own, stuck in its teardown).
LEADER_EXIT_GRACE_SECONDS = 60.0


def leader_exit_overdue(
    pods: dict[tuple[Role, int], PodState],
    replicas: ReplicaSet,
    finished_time: datetime | None,
    now: datetime,
) -> float | None:
    """For a leader that reported it finished and whose pod is still active: the seconds
    until the operator stops it (0 once overdue); None otherwise."""
    pod = pods.get(replicas.leader())
    if finished_time is None or pod is None or not pod.active:
        return None
    return max(0.0, LEADER_EXIT_GRACE_SECONDS - (now - finished_time).total_seconds())


def success_message(replicas: ReplicaSet, policy: SuccessPolicy = SuccessPolicy.CHIEF) -> str:
    """What the Succeeded condition says happened."""
    stopped = "; parameter servers stopped" if replicas.ps else ""
    if policy == SuccessPolicy.ALL_WORKERS and replicas.chief == 0 and replicas.worker:
        return f"all {replicas.worker} workers finished{stopped}"
    if replicas.chief:
        return f"the chief finished training{stopped}"
    return f"worker 0 (the chief: the job has none) finished{stopped}"


def pods_to_clean(pods: Iterable[PodState], policy: CleanPodPolicy) -> list[str]:
    """Names of the pods to delete once the job has finished."""
    out = []
    for p in pods:
        if p.terminating:
            continue
        if (
            p.role == Role.PS
            or policy == CleanPodPolicy.ALL
            or (policy == CleanPodPolicy.RUNNING and p.active)
        ):
            out.append(p.name)
    return sorted(out)
