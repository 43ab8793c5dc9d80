"""Kueue's plain-Pod group integration: the labels and annotations that make a job's pods
one Kueue Workload, admitted (or queued, or preempted) as a whole.

A job labelled ``kueue.x-k8s.io/queue-name`` gets, on every pod, the queue name (and a
``kueue.x-k8s.io/priority-class`` if the job has one), the group's name and its total pod
count — chief, workers, ps and evaluator as planned, so a ``ps: auto`` job's count is the
plan's. Every pod is created retriable: a preempted group is then requeued by Kueue, not
counted finished; the operator marks the pods ``kueue.x-k8s.io/retriable-in-group:
"false"`` only once the job has finished (etj.core.reconcile.policies.queue). Keys and
meanings are Kueue's (pkg/controller/jobs/pod, v0.15); Kueue ships no Python library,
hence this module.

Kueue's own webhook holds the pods: it gates each one (``kueue.x-k8s.io/admission``) at
creation and lifts the gates when the group is admitted, so etj's pods wait Pending as
long as Kueue says. This module must not add that gate itself (a pod in a namespace Kueue
does not manage would then wait forever), and it is pure: a job's labels and its plan in,
metadata out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from etj.api.constants import (
    KUEUE_POD_GROUP_NAME_LABEL,
    KUEUE_POD_GROUP_TOTAL_COUNT_ANNOTATION,
    KUEUE_PRIORITY_CLASS_LABEL,
    KUEUE_QUEUE_NAME_LABEL,
)
from etj.api.roles import Role

_UID_CHARS = 8


@dataclass(frozen=True)
class KueueMetadata:
    """What one pod gets; both empty for a job no Kueue queue names."""

    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)


def queue_name(job_labels: Mapping[str, str]) -> str | None:
    """The Kueue LocalQueue a job is submitted to, if any (an empty value is none)."""
    return job_labels.get(KUEUE_QUEUE_NAME_LABEL) or None


def pod_group_name(job_name: str, uid: str | None) -> str:
    """The group's name: the job's, with the start of its uid when it has one, so a job
    deleted and created again under the same name is never mistaken for the old group
    whose Workload Kueue may still hold. At most 45 + 1 + 8 characters: a label value."""
    return f"{job_name}-{uid[:_UID_CHARS]}" if uid else job_name


def kueue_pod_metadata(
    job_labels: Mapping[str, str],
    job_name: str,
    uid: str | None,
    total_count: int,
    role: Role,
) -> KueueMetadata:
    """The Kueue labels and annotations of one pod of a job with ``total_count`` pods."""
    queue = queue_name(job_labels)
    if queue is None:
        return KueueMetadata()
    labels = {
        KUEUE_QUEUE_NAME_LABEL: queue,
        KUEUE_POD_GROUP_NAME_LABEL: pod_group_name(job_name, uid),
    }
    if job_labels.get(KUEUE_PRIORITY_CLASS_LABEL):
        labels[KUEUE_PRIORITY_CLASS_LABEL] = job_labels[KUEUE_PRIORITY_CLASS_LABEL]
    annotations = {KUEUE_POD_GROUP_TOTAL_COUNT_ANNOTATION: str(total_count)}
    return KueueMetadata(labels=labels, annotations=annotations)
