"""When a job has succeeded, and which pods go when it finishes.

The job succeeds when its leader succeeds: the chief, or worker 0 without a chief. ps
pods never exit by themselves, so they are always stopped when the job finishes; the
rest follows cleanPodPolicy (All, Running, None).

Pure.
"""

from __future__ import annotations

from collections.abc import Iterable

from etj.api.spec import CleanPodPolicy
from etj.reconcile.observe import PodState
from etj.tfconfig import ReplicaSet


def leader_succeeded(pods: dict[tuple[str, int], PodState], replicas: ReplicaSet) -> bool:
    pod = pods.get(replicas.leader())
    return pod is not None and pod.phase == "Succeeded"


def pods_to_clean(pods: Iterable[PodState], policy: str) -> list[str]:
    """Names of the pods to delete once the job has finished."""
    out = []
    for p in pods:
        if p.terminating:
            continue
        if (
            p.role == "ps"
            or policy == CleanPodPolicy.ALL.value
            or (policy == CleanPodPolicy.RUNNING.value and p.active)
        ):
            out.append(p.name)
    return sorted(out)
