"""Gang scheduling: the gang object of a job and what its pods carry to join it.

A job with ``runPolicy.schedulingPolicy`` gets one gang object, named as the job, owned by
it and sized from the shard plan (a ``ps: auto`` job's pod count is known only then):

- ``Workload``: Kubernetes' own Workload (``scheduling.k8s.io/v1alpha1``, v1.35 alpha,
  feature gates ``GenericWorkload`` on the API server and ``GenericWorkload`` +
  ``GangScheduling`` on kube-scheduler). One pod group with a ``gang`` policy of
  ``minCount``; every pod points at it with ``spec.workloadRef``. Its pod groups are
  immutable: a changed size means a new Workload of the same name.
- ``Volcano``: ``scheduling.volcano.sh/v1beta1`` PodGroup (minMember, minResources, queue,
  priorityClassName); pods carry the annotation ``scheduling.k8s.io/group-name`` and
  schedulerName ``volcano``.
- ``SchedulerPlugins``: scheduler-plugins' coscheduling ``scheduling.x-k8s.io/v1alpha1``
  PodGroup (minMember, minResources, scheduleTimeoutSeconds); pods carry the label
  ``scheduling.x-k8s.io/pod-group`` and schedulerName ``scheduler-plugins-scheduler``.

Hand-written because no maintained Python library renders these objects; their shapes
follow the Go types of each project (k8s.io/api/scheduling/v1alpha1 at v0.35,
volcano.sh/apis, sigs.k8s.io/scheduler-plugins). Pure: no I/O, no environment, no client;
the operator applies what this returns.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from etj.api.constants import GROUP, KIND
from etj.api.job import EmbeddingTrainingJob
from etj.api.quantity import format_bytes, parse_quantity
from etj.api.roles import Role
from etj.api.spec import GangScheduler, SchedulingPolicy
from etj.core.tfconfig import ReplicaSet


@dataclass(frozen=True)
class GangApi:
    """Where a backend's gang object lives in the API."""

    group: str
    version: str
    plural: str
    kind: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"


GANG_APIS: dict[GangScheduler, GangApi] = {
    GangScheduler.WORKLOAD: GangApi("scheduling.k8s.io", "v1alpha1", "workloads", "Workload"),
    GangScheduler.VOLCANO: GangApi("scheduling.volcano.sh", "v1beta1", "podgroups", "PodGroup"),
    GangScheduler.SCHEDULER_PLUGINS: GangApi(
        "scheduling.x-k8s.io", "v1alpha1", "podgroups", "PodGroup"
    ),
}

# How a pod names its gang, per backend.
VOLCANO_GROUP_ANNOTATION = "scheduling.k8s.io/group-name"
COSCHEDULING_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
# The one pod group inside a job's Workload (a DNS label).
WORKLOAD_POD_GROUP = "replicas"
# The scheduler a backend's gangs need, unless schedulingPolicy.schedulerName names one.
DEFAULT_SCHEDULER_NAMES: dict[GangScheduler, str] = {
    GangScheduler.VOLCANO: "volcano",
    GangScheduler.SCHEDULER_PLUGINS: "scheduler-plugins-scheduler",
}
# Whose pods must be placed first when minAvailable is less than every pod: without the
# chief and the ps no worker can train.
_GANG_ORDER = (Role.CHIEF, Role.PS, Role.WORKER, Role.EVALUATOR)


# One pod's container requests, by (role, index).
RequestsOf = Callable[[Role, int], dict[str, Any] | None]


@dataclass(frozen=True)
class PodScheduling:
    """What one pod carries for its gang: merged into the rendered Pod."""

    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    # Pod spec fields (schedulerName, priorityClassName, workloadRef).
    spec: dict[str, Any] = field(default_factory=dict)


def policy_of(job: EmbeddingTrainingJob) -> SchedulingPolicy | None:
    return job.spec.run_policy.scheduling_policy


def gang_scheduler(job: EmbeddingTrainingJob, default: GangScheduler) -> GangScheduler | None:
    """The backend of the job's gang (its own choice, else ``default``); None: no gang."""
    policy = policy_of(job)
    if policy is None:
        return None
    # The model keeps enum values as plain strings.
    chosen = GangScheduler(policy.gang_scheduler or default)
    return None if chosen == GangScheduler.NONE else chosen


def gang_tasks(replicas: ReplicaSet) -> list[tuple[Role, int]]:
    """Every task of the job, the ones the gang needs first first."""
    return sorted(replicas.tasks(), key=lambda t: (_GANG_ORDER.index(t[0]), t[1]))


def min_available(job: EmbeddingTrainingJob, replicas: ReplicaSet) -> int:
    """Pods the gang needs placed at once: the policy's minAvailable, at most every pod."""
    total = len(replicas.tasks())
    policy = policy_of(job)
    wanted = policy.min_available if policy and policy.min_available else total
    return min(wanted, total)


def _sum(values: list[Any], resource: str) -> str:
    total = sum((parse_quantity(v) for v in values), Decimal(0))
    if resource == "cpu":
        return f"{math.ceil(total * 1000)}m"
    if resource == "memory" or resource.endswith("storage"):
        return format_bytes(math.ceil(total))
    return str(math.ceil(total))


def min_resources(replicas: ReplicaSet, requests_of: RequestsOf, count: int) -> dict[str, str]:
    """The summed requests of the first ``count`` gang tasks."""
    by_resource: dict[str, list[Any]] = {}
    for role, index in gang_tasks(replicas)[:count]:
        for resource, value in (requests_of(role, index) or {}).items():
            by_resource.setdefault(resource, []).append(value)
    return {r: _sum(v, r) for r, v in sorted(by_resource.items())}


def build_gang(
    job: EmbeddingTrainingJob,
    replicas: ReplicaSet,
    backend: GangScheduler,
    labels: dict[str, str],
    owner: dict[str, Any] | None,
    requests_of: RequestsOf,
) -> dict[str, Any]:
    """The gang object of ``job`` for ``backend`` (Workload or PodGroup), for the tasks of
    ``replicas`` (from the plan); ``requests_of(role, index)`` gives a pod's requests."""
    api = GANG_APIS[backend]
    policy = policy_of(job) or SchedulingPolicy()
    count = min_available(job, replicas)
    meta: dict[str, Any] = {"name": job.name, "namespace": job.namespace, "labels": labels}
    if owner is not None:
        meta["ownerReferences"] = [owner]
    spec: dict[str, Any]
    if backend == GangScheduler.WORKLOAD:
        spec = {
            "controllerRef": {"apiGroup": GROUP, "kind": KIND, "name": job.name},
            "podGroups": [{"name": WORKLOAD_POD_GROUP, "policy": {"gang": {"minCount": count}}}],
        }
    else:
        spec = {"minMember": count}
        resources = min_resources(replicas, requests_of, count)
        if resources:
            spec["minResources"] = resources
        if backend == GangScheduler.VOLCANO:
            if policy.queue:
                spec["queue"] = policy.queue
            if policy.priority_class:
                spec["priorityClassName"] = policy.priority_class
        elif policy.schedule_timeout_seconds:
            spec["scheduleTimeoutSeconds"] = policy.schedule_timeout_seconds
    return {"apiVersion": api.api_version, "kind": api.kind, "metadata": meta, "spec": spec}


def pod_scheduling(job: EmbeddingTrainingJob, default: GangScheduler) -> PodScheduling:
    """What every pod of ``job`` carries: its gang reference, schedulerName, priority."""
    policy = policy_of(job)
    if policy is None:
        return PodScheduling()
    backend = gang_scheduler(job, default)
    spec: dict[str, Any] = {}
    scheduler = policy.scheduler_name or (DEFAULT_SCHEDULER_NAMES.get(backend) if backend else None)
    if scheduler:
        spec["schedulerName"] = scheduler
    template = job.spec.pod_template
    if policy.priority_class and not (template and template.priority_class_name):
        spec["priorityClassName"] = policy.priority_class
    if backend == GangScheduler.WORKLOAD:
        spec["workloadRef"] = {"name": job.name, "podGroup": WORKLOAD_POD_GROUP}
        return PodScheduling(spec=spec)
    if backend == GangScheduler.VOLCANO:
        return PodScheduling(annotations={VOLCANO_GROUP_ANNOTATION: job.name}, spec=spec)
    if backend == GangScheduler.SCHEDULER_PLUGINS:
        return PodScheduling(labels={COSCHEDULING_GROUP_LABEL: job.name}, spec=spec)
    return PodScheduling(spec=spec)


def gang_fingerprint(gang: dict[str, Any]) -> str:
    """What makes two gang objects the same for the operator: API, kind and spec."""
    return json.dumps([gang["apiVersion"], gang["kind"], gang.get("spec") or {}], sort_keys=True)


def gang_covers(existing: dict[str, Any] | None, desired: dict[str, Any]) -> bool:
    """``existing`` (as the API server returned it) has every spec field of ``desired``
    (fields the server defaulted besides do not count)."""
    if existing is None or existing.get("apiVersion") != desired["apiVersion"]:
        return False
    have = existing.get("spec") or {}
    return all(have.get(k) == v for k, v in (desired.get("spec") or {}).items())


def immutable_gang(gang: dict[str, Any]) -> bool:
    """A Workload's pod groups cannot change: a new size needs a new object."""
    return bool(gang["kind"] == GANG_APIS[GangScheduler.WORKLOAD].kind)
