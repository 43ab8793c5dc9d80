"""What the operator needs to know of a Pod, read from the Pod object the API returns.

Pure: a Pod dict in, a ``PodState`` out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from etj.api.constants import (
    ANNOTATION_CLUSTER_WORKERS,
    DISRUPTION_CONDITIONS,
    KUEUE_ADMISSION_GATE,
    KUEUE_POD_FINALIZER,
    KUEUE_POD_GROUP_NAME_LABEL,
    KUEUE_RETRIABLE_IN_GROUP_ANNOTATION,
    KUEUE_TERMINATION_CONDITION,
    LABEL_REPLICA_INDEX,
    LABEL_REPLICA_TYPE,
)
from etj.api.quantity import quantity_bytes
from etj.api.roles import ALL_ROLES, Role
from etj.api.status import PodPhase
from etj.api.trainer_reasons import (
    REASON_CHECKPOINT_STORAGE_FULL,
    REASON_DATA_ERROR,
    REASON_MODEL_ERROR,
)


@dataclass(frozen=True)
class PodState:
    """One replica's pod as observed."""

    name: str
    # The replica-type label's value (a pod whose label names no Role is not a replica).
    role: Role
    index: int
    phase: PodPhase
    ready: bool = False
    exit_code: int | None = None
    reason: str | None = None  # OOMKilled, Error, Evicted, ...
    terminating: bool = False
    memory_limit: int | None = None
    # The container's termination message: the trainer writes "<Reason>: <message>".
    message: str | None = None
    # When the container started and (if it ended) finished: how long it ran cleanly.
    started_at: datetime | None = None
    finished_at: datetime | None = None
    # Marked for disruption (DISRUPTION_CONDITIONS): evicted, preempted, stopped by Kueue.
    disrupted: bool = False
    # The node it is bound to (spec.nodeName); None while the scheduler has not placed it.
    node_name: str | None = None
    # The scheduler's word when it could not place the pod (PodScheduled False,
    # Unschedulable), e.g. "0/1 nodes are available: 1 Insufficient cpu."
    unschedulable: str | None = None
    # Taken off a NotReady or unreachable node (etj.core.reconcile.policies.nodeloss).
    node_lost: bool = False
    # Kueue's plain-Pod group (etj.core.reconcile.policies.queue): the pod is one of a
    # group, Kueue's finalizer holds it, it is marked unretriable, and why the queue took it
    # (Kueue's TerminationTarget message, e.g. "Preempted to accommodate ...", or deleted
    # while held at Kueue's gate; either makes it ``disrupted``).
    in_queue_group: bool = False
    queue_held: bool = False
    unretriable: bool = False
    stopped_by_queue: str | None = None
    # How many workers its TF_CONFIG names (ANNOTATION_CLUSTER_WORKERS); None: not said
    # (a pod made before etj said it, or not by etj).
    cluster_workers: int | None = None
    # The API server's uid for it: a replacement keeps the name, not the uid (Kueue's
    # Workload names its owner pods by uid: etj.core.reconcile.policies.queue).
    uid: str | None = None

    def ran_seconds(self, now: datetime) -> float | None:
        """How long the container ran (until now if it still runs); None if unknown."""
        if self.started_at is None:
            return None
        return max(0.0, ((self.finished_at or now) - self.started_at).total_seconds())

    @property
    def preempted(self) -> bool:
        """Taken away rather than crashed: deleted (or evicted) before its process ended."""
        return (
            (self.terminating and not self.finished) or self.reason == "Evicted" or self.disrupted
        )

    @property
    def key(self) -> tuple[Role, int]:
        return (self.role, self.index)

    @property
    def finished(self) -> bool:
        return self.phase in (PodPhase.SUCCEEDED, PodPhase.FAILED)

    @property
    def active(self) -> bool:
        return (
            self.phase in (PodPhase.PENDING, PodPhase.RUNNING, PodPhase.UNKNOWN)
            and not self.terminating
        )

    @property
    def oom_killed(self) -> bool:
        return self.reason == "OOMKilled"

    @property
    def trainer_reason(self) -> str | None:
        """The reason the trainer gave for ending (``WatchdogTimeout``, ...), if it gave one."""
        match = _TRAINER_REASON.match(self.message or "")
        return match.group(1) if match else None

    def describe(self) -> str:
        """How the pod ended, for events and messages."""
        if self.node_lost:
            return f"{self.name} was lost with its node {self.node_name or '(unknown)'}"
        if self.disrupted:
            return f"{self.name} was disrupted (evicted, preempted or stopped by its queue)"
        if self.terminating and not self.finished:
            return f"{self.name} was deleted"
        parts = [f"{self.name} {self.phase.lower()}"]
        if self.exit_code is not None:
            parts.append(f"with exit code {self.exit_code}")
        if self.trainer_reason in SAYS_WHAT_TO_FIX and self.message:
            # The trainer's own words first, e.g. "DataError: /data/day_0.txt:81733:
            # expected 40 fields, found 39": the file and line a person must fix are the
            # job's message; which pod said it follows.
            return f"{self.message.strip()} ({' '.join(parts)})"
        reasons = [r for r in (self.reason, self.trainer_reason) if r]
        if reasons:
            parts.append(f"({', '.join(reasons)})")
        return " ".join(parts)


# Trainer reasons whose message names what a person must fix (a file and line, ...).
SAYS_WHAT_TO_FIX = frozenset(
    {REASON_DATA_ERROR, REASON_MODEL_ERROR, REASON_CHECKPOINT_STORAGE_FULL}
)
# A trainer's message starts with an identifier and a colon; a log tail (the kubelet's
# fallback when nothing was written) rarely does, and is then no reason.
_TRAINER_REASON = re.compile(r"([A-Z][A-Za-z]+): ")


def _time(text: Any) -> datetime | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def _container_times(pod: dict[str, Any]) -> tuple[datetime | None, datetime | None]:
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        state = cs.get("state") or {}
        if "running" in state:
            return _time((state["running"] or {}).get("startedAt")), None
        term = state.get("terminated") or (cs.get("lastState") or {}).get("terminated")
        if term:
            return _time(term.get("startedAt")), _time(term.get("finishedAt"))
    return None, None


def _container_termination(pod: dict[str, Any]) -> tuple[int | None, str | None, str | None]:
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        state = cs.get("state") or {}
        last = cs.get("lastState") or {}
        term = state.get("terminated") or last.get("terminated")
        if term:
            return term.get("exitCode"), term.get("reason"), term.get("message")
    return None, None, None


def _memory_limit(pod: dict[str, Any]) -> int | None:
    for c in (pod.get("spec") or {}).get("containers") or []:
        limit = ((c.get("resources") or {}).get("limits") or {}).get("memory")
        if limit is not None:
            return quantity_bytes(limit)
    return None


# The pod's condition reason the taint manager gives when it evicts a pod off a tainted
# node, and the pod reason older node controllers set.
REASON_TAINT_MANAGER = "DeletionByTaintManager"
REASON_NODE_LOST = "NodeLost"


def node_lost(pod: dict[str, Any]) -> bool:
    """The pod was taken off its node because the node is NotReady or unreachable."""
    status = pod.get("status") or {}
    if status.get("reason") == REASON_NODE_LOST:
        return True
    return any(
        c.get("type") == "DisruptionTarget"
        and c.get("status") == "True"
        and c.get("reason") == REASON_TAINT_MANAGER
        for c in status.get("conditions") or []
    )


def _pod_phase(text: str | None) -> PodPhase:
    """A pod without a phase yet is Pending; a phase Kubernetes does not have is Unknown."""
    if not text:
        return PodPhase.PENDING
    return PodPhase(text) if text in set(PodPhase) else PodPhase.UNKNOWN


def observe_pod(pod: dict[str, Any]) -> PodState | None:
    """The state of one of a job's pods; None for a pod that is not a replica."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    role = labels.get(LABEL_REPLICA_TYPE)
    index = labels.get(LABEL_REPLICA_INDEX)
    if role not in ALL_ROLES or index is None or not str(index).isdigit():
        return None
    status = pod.get("status") or {}
    exit_code, reason, message = _container_termination(pod)
    conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
    lost = node_lost(pod)
    scheduled: dict[str, Any] = next(
        (c for c in status.get("conditions") or [] if c.get("type") == "PodScheduled"), {}
    )
    started_at, finished_at = _container_times(pod)
    stopped = next(
        (
            c
            for c in status.get("conditions") or []
            if c.get("type") == KUEUE_TERMINATION_CONDITION and c.get("status") == "True"
        ),
        None,
    )
    spec = pod.get("spec") or {}
    in_group = bool(labels.get(KUEUE_POD_GROUP_NAME_LABEL))
    gated = any(g.get("name") == KUEUE_ADMISSION_GATE for g in spec.get("schedulingGates") or [])
    # Deleted while Kueue's gate held it (never scheduled): it cannot have failed; only the
    # queue (or a person) takes such a pod away.
    taken_at_gate = (
        in_group and gated and not spec.get("nodeName") and meta.get("deletionTimestamp")
    )
    if stopped is not None:
        stopped_by_queue = stopped.get("message") or stopped.get("reason") or "stopped by Kueue"
    elif taken_at_gate:
        stopped_by_queue = "deleted while held at Kueue's admission gate"
    else:
        stopped_by_queue = None
    disrupted = (
        lost
        or any(conditions.get(t) == "True" for t in DISRUPTION_CONDITIONS)
        or stopped_by_queue is not None
    )
    return PodState(
        name=meta.get("name", ""),
        role=Role(role),
        index=int(index),
        phase=_pod_phase(status.get("phase")),
        ready=conditions.get("Ready") == "True",
        exit_code=exit_code,
        # The pod-level reason (Evicted, DeadlineExceeded) wins over the container's.
        reason=status.get("reason") or reason,
        terminating=meta.get("deletionTimestamp") is not None,
        memory_limit=_memory_limit(pod),
        message=message,
        started_at=started_at,
        finished_at=finished_at,
        disrupted=disrupted,
        node_lost=lost,
        node_name=(pod.get("spec") or {}).get("nodeName") or None,
        unschedulable=(scheduled.get("message") or "the scheduler cannot place it")
        if scheduled.get("status") == "False" and scheduled.get("reason") == "Unschedulable"
        else None,
        in_queue_group=in_group,
        queue_held=KUEUE_POD_FINALIZER in (meta.get("finalizers") or []),
        unretriable=(meta.get("annotations") or {}).get(KUEUE_RETRIABLE_IN_GROUP_ANNOTATION)
        == "false",
        stopped_by_queue=stopped_by_queue,
        cluster_workers=_int_or_none(
            (meta.get("annotations") or {}).get(ANNOTATION_CLUSTER_WORKERS)
        ),
        uid=meta.get("uid"),
    )


def _int_or_none(text: Any) -> int | None:
    return int(text) if isinstance(text, str) and text.isdigit() else None
