"""The chaos soak's pure parts (issue 39, 2): a seeded fault schedule, the invariants checked
over observed snapshots of a job and its pods, and the results table.

The driver on kind (tests/e2e/chaos_driver.py: ``make chaos`` and tests/e2e/test_chaos.py)
injects each fault, takes the snapshots (``kubectl get etj,pods -o json``) and the chief's
``restored`` lines, and hands them here. Pure: no I/O, no clock; every function is given
what it judges.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from etj.api.constants import LABEL_JOB_NAME, LABEL_REPLICA_INDEX, LABEL_REPLICA_TYPE
from etj.api.roles import Role
from etj.api.spec.strategy import Strategy
from etj.api.status import Phase, PodPhase

PS_STRATEGY = Strategy.PARAMETER_SERVER.value
MWM_STRATEGY = Strategy.MULTI_WORKER_MIRRORED.value
TERMINAL = (PodPhase.SUCCEEDED.value, PodPhase.FAILED.value)
CHIEF, WORKER, PS = Role.CHIEF.value, Role.WORKER.value, Role.PS.value


class FaultKind(StrEnum):
    # The replica's trainer killed by SIGKILL (its container's process, from its node):
    # exit 137, the pod Failed; a failure, counted against backoffLimit.
    POD_SIGKILL = "pod-sigkill"
    # `kubectl delete pod` with its grace period: SIGTERM, then the pod is gone.
    POD_DELETE = "pod-delete"
    # The same replica SIGKILLed, and again as soon as its new pod runs: twice within one
    # checkpoint interval (the second restore must not go behind the first).
    SAME_ROLE_TWICE = "same-role-twice"
    # A ps's container over its memory limit: the kernel's OOM kill (137, OOMKilled).
    PS_OOM = "ps-oom"
    # A worker node stopped (`docker stop`) and started again once its pods run elsewhere.
    NODE_STOP = "node-stop"
    # `kubectl drain` (evictions: a disruption, not counted) and `kubectl uncordon`.
    NODE_DRAIN = "node-drain"
    # The operator's pod holding the leader Lease killed (the chart with 2 replicas).
    LEADER_KILL = "operator-leader-kill"
    # The kube-apiserver container on the control-plane node killed (the kubelet restarts
    # its static pod).
    APISERVER_RESTART = "apiserver-restart"


POD_FAULTS = (FaultKind.POD_SIGKILL, FaultKind.POD_DELETE, FaultKind.SAME_ROLE_TWICE)
NODE_FAULTS = (FaultKind.NODE_STOP, FaultKind.NODE_DRAIN)
CLUSTER_FAULTS = (FaultKind.LEADER_KILL, FaultKind.APISERVER_RESTART)
ALL_KINDS = tuple(FaultKind)
# The soak in CI: what needs no node stopped or drained (minutes each on two cores).
CI_KINDS = (*POD_FAULTS, FaultKind.PS_OOM, *CLUSTER_FAULTS)


@dataclass(frozen=True)
class JobUnderTest:
    """One job of the soak: its name, strategy, replicas per role, checkpoint interval."""

    name: str
    strategy: str
    replicas: dict[str, int]
    every_steps: int

    @property
    def leader(self) -> str:
        """The pod that restores and reports progress: the chief, else worker 0."""
        role = CHIEF if self.replicas.get(CHIEF) else WORKER
        return f"{self.name}-{role}-0"

    def pod(self, role: str, index: int) -> str:
        return f"{self.name}-{role}-{index}"

    def tasks(self) -> list[tuple[str, int]]:
        return [(r, i) for r, n in sorted(self.replicas.items()) for i in range(n)]


@dataclass(frozen=True)
class Fault:
    """One fault of the schedule: what, on which job's replica or which node, and how many
    seconds after the previous fault's recovery it comes."""

    kind: FaultKind
    gap: float
    job: str | None = None
    role: str | None = None
    index: int | None = None
    node: str | None = None

    @property
    def target(self) -> str:
        if self.job is not None and self.role is not None:
            return f"{self.job}-{self.role}-{self.index}"
        return self.node or "cluster"


Owed = tuple[str, FaultKind, str | None, str | None, str | None]


def coverage(
    jobs: Sequence[JobUnderTest], nodes: Sequence[str], kinds: Iterable[FaultKind]
) -> list[Owed]:
    """Every fault the soak owes, unordered, as (group, kind, job, role, node): each pod
    fault on every role of every job, the ps OOM on each ParameterServer job, each node
    fault on one worker node, each cluster fault once. ``group`` is what the schedule
    spreads over: a job's strategy, or ``cluster``."""
    wanted = set(kinds)
    owed: list[Owed] = []
    for job in jobs:
        for role in sorted(r for r, n in job.replicas.items() if n):
            for kind in (FaultKind.POD_SIGKILL, FaultKind.POD_DELETE):
                if kind in wanted:
                    owed.append((job.strategy, kind, job.name, role, None))
        if FaultKind.SAME_ROLE_TWICE in wanted:
            role = PS if job.replicas.get(PS) else WORKER
            owed.append((job.strategy, FaultKind.SAME_ROLE_TWICE, job.name, role, None))
        if FaultKind.PS_OOM in wanted and job.replicas.get(PS):
            owed.append((job.strategy, FaultKind.PS_OOM, job.name, PS, None))
    for kind in NODE_FAULTS:
        if kind in wanted and nodes:
            owed.append(("cluster", kind, None, None, None))
    for kind in CLUSTER_FAULTS:
        if kind in wanted:
            owed.append(("cluster", kind, None, None, None))
    return owed


def schedule(
    seed: int,
    jobs: Sequence[JobUnderTest],
    nodes: Sequence[str],
    count: int | None = None,
    kinds: Iterable[FaultKind] = ALL_KINDS,
    gaps: tuple[float, float] = (5.0, 30.0),
) -> list[Fault]:
    """The seeded schedule: ``count`` faults (default: all ``coverage`` owes; fewer takes
    them round-robin over the groups, so both strategies are hit; more adds seeded picks
    from the same kinds). The same seed gives the same schedule."""
    rng = random.Random(seed)
    owed = coverage(jobs, nodes, kinds)
    if not owed:
        return []
    by_group: dict[str, list[Owed]] = {}
    for item in owed:
        by_group.setdefault(item[0], []).append(item)
    groups = sorted(by_group)
    rng.shuffle(groups)
    for g in groups:
        rng.shuffle(by_group[g])
    # Round-robin over the groups: a short schedule still hits each of them.
    ordered = []
    while any(by_group.values()):
        for g in groups:
            if by_group[g]:
                ordered.append(by_group[g].pop())
    want = len(ordered) if count is None else count
    while len(ordered) < want:
        ordered.append(rng.choice(owed))
    replicas = {j.name: j.replicas for j in jobs}
    faults = []
    for _, kind, job, role, _node in ordered[:want]:
        index = rng.randrange(replicas[job][role]) if job and role else None
        node = rng.choice(sorted(nodes)) if kind in NODE_FAULTS else None
        faults.append(
            Fault(kind, round(rng.uniform(*gaps), 1), job=job, role=role, index=index, node=node)
        )
    return faults


def steps_for(seconds: float, steps_per_second: float, every: int) -> int:
    """training.steps for a job that must still run after ``seconds`` at most
    ``steps_per_second`` (its rate on a quiet machine, under its CPU limit, with a
    margin): a whole number of checkpoint intervals."""
    need = int(seconds * steps_per_second)
    return max(every, (need + every - 1) // every * every)


# ---- the invariants ----------------------------------------------------------------------


def _labels(pod: dict[str, Any]) -> dict[str, str]:
    return (pod.get("metadata") or {}).get("labels") or {}


def _live(pod: dict[str, Any]) -> bool:
    """A pod whose trainer may still run: not in a terminal phase (terminating included)."""
    return (pod.get("status") or {}).get("phase") not in TERMINAL


def _owner_uid(pod: dict[str, Any]) -> str | None:
    refs = (pod.get("metadata") or {}).get("ownerReferences") or []
    return next((r.get("uid") for r in refs if r.get("kind") == "EmbeddingTrainingJob"), None)


def one_live_pod_per_replica(pods: Iterable[dict[str, Any]]) -> list[str]:
    """At most one live pod per (job, role, index), whatever its name."""
    seen: dict[tuple[str, str, str], list[str]] = {}
    for pod in pods:
        labels = _labels(pod)
        if LABEL_JOB_NAME not in labels or not _live(pod):
            continue
        key = (labels[LABEL_JOB_NAME], labels.get(LABEL_REPLICA_TYPE, ""),
               labels.get(LABEL_REPLICA_INDEX, ""))  # fmt: skip
        seen.setdefault(key, []).append(pod["metadata"]["name"])
    return [
        f"{len(names)} live pods for {job}/{role}/{index}: {sorted(names)}"
        for (job, role, index), names in sorted(seen.items())
        if len(names) > 1
    ]


def no_orphan_pods(jobs: Iterable[dict[str, Any]], pods: Iterable[dict[str, Any]]) -> list[str]:
    """No live pod of a job that is gone (or of an earlier job of its name), nor of a job
    that finished, not being deleted."""
    by_name = {j["metadata"]["name"]: j for j in jobs}
    found = []
    for pod in pods:
        name = _labels(pod).get(LABEL_JOB_NAME)
        meta = pod.get("metadata") or {}
        if name is None or not _live(pod) or meta.get("deletionTimestamp"):
            continue
        job = by_name.get(name)
        if job is None:
            found.append(f"{meta['name']}: live, its job {name} is gone")
        elif _owner_uid(pod) not in (None, job["metadata"].get("uid")):
            found.append(f"{meta['name']}: live, owned by an earlier job {name}")
        elif ((job.get("status") or {}).get("phase")) in TERMINAL:
            found.append(f"{meta['name']}: live, its job {name} is {job['status']['phase']}")
    return found


def _pod_counts(pods: Iterable[dict[str, Any]], job: str) -> dict[str, dict[str, int]]:
    """active/ready/succeeded/failed per role as the operator counts them
    (etj.core.reconcile.status.replica_statuses)."""
    counts: dict[str, dict[str, int]] = {}
    for pod in pods:
        labels = _labels(pod)
        if labels.get(LABEL_JOB_NAME) != job:
            continue
        role = counts.setdefault(
            labels.get(LABEL_REPLICA_TYPE, ""),
            {"active": 0, "ready": 0, "succeeded": 0, "failed": 0},
        )
        phase = (pod.get("status") or {}).get("phase") or PodPhase.PENDING
        active = phase in (PodPhase.PENDING, PodPhase.RUNNING) and not pod["metadata"].get(
            "deletionTimestamp"
        )
        role["active"] += active
        role["ready"] += active and phase == PodPhase.RUNNING
        role["succeeded"] += phase == PodPhase.SUCCEEDED
        role["failed"] += phase == PodPhase.FAILED
    return counts


def status_true_to_pods(job: dict[str, Any], pods: Iterable[dict[str, Any]]) -> list[str]:
    """The job's replicaStatuses counts those of its pods, role by role, and its phase
    agrees with them (Running: every replica's pod ready; Succeeded: the leader exited 0).
    Status follows pods by a pass: the driver waits for this to hold, with a deadline."""
    name = job["metadata"]["name"]
    st = job.get("status") or {}
    pods = list(pods)
    counts = _pod_counts(pods, name)
    wrong = []
    for role, got in sorted((st.get("replicaStatuses") or {}).items()):
        have = counts.get(role, {"active": 0, "ready": 0, "succeeded": 0, "failed": 0})
        for key in ("active", "ready"):
            if int(got.get(key) or 0) != have[key]:
                wrong.append(f"{name}: status {role}.{key}={got.get(key) or 0}, pods {have[key]}")
    desired = {
        r: int((spec or {}).get("replicas") or (1 if r == CHIEF else 0))
        for r, spec in (job.get("spec", {}).get("replicas") or {}).items()
    }
    phase = st.get("phase")
    if phase == Phase.RUNNING:
        for role, n in desired.items():
            if n and counts.get(role, {}).get("ready", 0) < n:
                wrong.append(
                    f"{name}: Running with {counts.get(role, {}).get('ready', 0)}/{n} {role} ready"
                )
    if phase == Phase.SUCCEEDED:
        leader = CHIEF if desired.get(CHIEF) else WORKER
        if counts.get(leader, {}).get("succeeded", 0) < 1:
            wrong.append(f"{name}: Succeeded without a {leader} pod that exited 0")
    return wrong


def snapshot_violations(
    jobs: Iterable[dict[str, Any]], pods: Iterable[dict[str, Any]]
) -> list[str]:
    """What must hold at every instant: one live pod per replica, no orphan pod."""
    pods = list(pods)
    return one_live_pod_per_replica(pods) + no_orphan_pods(jobs, pods)


# Restarts each fault may add to a job's status.restarts (backoffLimit's count), as
# README's "Failure handling" says: a failure counts once per group restart, a disruption
# (eviction, a lost node) and whatever leaves the job's pods alone count nothing. A
# graceful delete is a failure when the operator sees the pod terminating, nothing when
# it only sees it gone. The same replica killed twice counts twice, or once when its second
# end comes while the restart of its first is still open (its group not all made again:
# seen on kind, a ps killed again as soon as its new pod ran): one restart round.
RESTARTS: dict[FaultKind, tuple[int, int]] = {
    FaultKind.POD_SIGKILL: (1, 1),
    FaultKind.POD_DELETE: (0, 1),
    FaultKind.SAME_ROLE_TWICE: (1, 2),
    FaultKind.PS_OOM: (1, 1),
    FaultKind.NODE_STOP: (0, 0),
    FaultKind.NODE_DRAIN: (0, 0),
    FaultKind.LEADER_KILL: (0, 0),
    FaultKind.APISERVER_RESTART: (0, 0),
}


def restarts_as_policy_says(fault: Fault, job: str, before: int, after: int) -> list[str]:
    """``job``'s counted restarts across ``fault``: the fault's own job within RESTARTS,
    any other job (or a fault of the cluster) none."""
    lo, hi = RESTARTS[fault.kind] if fault.job in (job, None) else (0, 0)
    delta = after - before
    if lo <= delta <= hi:
        return []
    return [f"{job}: {delta} restarts counted across {fault.kind} on {fault.target}, "
            f"policy says {lo}..{hi}"]  # fmt: skip


def steps_lost(step_before: int, restored: int | None) -> int:
    """Steps trained again after a fault: from the last step seen before it to the step the
    leader restored (none restored: nothing lost)."""
    return 0 if restored is None else max(0, step_before - restored)


def restore_violations(
    job: JobUnderTest, checkpoint_before: int, step_before: int, restored: int | None
) -> list[str]:
    """A restore goes back to the last complete checkpoint seen before the fault, or a later
    one, and loses at most one checkpoint interval."""
    if restored is None:
        return []
    wrong = []
    if restored < checkpoint_before:
        wrong.append(
            f"{job.name}: restored step {restored}, behind the checkpoint {checkpoint_before} "
            "written before the fault"
        )
    lost = steps_lost(step_before, restored)
    if lost > job.every_steps:
        wrong.append(
            f"{job.name}: {lost} steps lost (step {step_before} -> restored {restored}), "
            f"more than the checkpoint interval {job.every_steps}"
        )
    return wrong


def digest_violations(restores: Iterable[dict[str, Any]]) -> list[str]:
    """Every restore of one checkpoint step (the trainer's ``restored`` lines: step,
    digest) restored the same state: the same digest; and every restore says its digest
    (a line without one could not be checked against its checkpoint)."""
    first: dict[int, dict[str, float]] = {}
    wrong = []
    for line in restores:
        step, digest = int(line["step"]), line.get("digest")
        if not digest:
            wrong.append(f"step {step} restored from {line.get('path')} without a digest")
            continue
        if step not in first:
            first[step] = digest
        elif digest != first[step]:
            wrong.append(f"step {step} restored twice with different digests")
    return wrong


# Two sums of one variable agree within this (relative, and absolute near 0): the trainer
# sums each shard in float64 where it lives, the host reads the checkpoint's whole tensor.
DIGEST_TOLERANCE = 1e-6


def digest_vs_saved(restored: dict[str, Any], saved: dict[str, float]) -> list[str]:
    """A restore (the leader's ``restored`` line: step, path, digest, the sum of each
    variable it restored) against the sums of the checkpoint it named, read apart from the
    trainer (``saved``: key -> float64 sum of the saved tensor): every variable restored
    is one the checkpoint holds, with its sum."""
    where = f"step {restored.get('step')} restored from {restored.get('path')}"
    digest = restored.get("digest")
    if not digest:
        return [f"{where} without a digest"]
    wrong = []
    for key, value in sorted(digest.items()):
        if key not in saved:
            wrong.append(f"{where}: {key} restored, not in the checkpoint")
        elif not math.isclose(
            float(value), saved[key], rel_tol=DIGEST_TOLERANCE, abs_tol=DIGEST_TOLERANCE
        ):
            wrong.append(f"{where}: {key} sums to {value}, the checkpoint's to {saved[key]}")
    return wrong


# Where the nodes mount the shared host directory the etj-shared class's volumes are in
# (kind-config.yaml's extraMounts; tests/cluster/kind-shared-storage.sh).
NODE_SHARED = "/var/lib/etj-shared"


def host_path(
    path: str,
    pod: dict[str, Any],
    claims: Iterable[dict[str, Any]],
    volumes: Iterable[dict[str, Any]],
    host_shared: str,
    node_shared: str = NODE_SHARED,
) -> str | None:
    """Where a file a pod's container names (``path``, e.g. the checkpoint its trainer
    restored) is on the host: the container's mount that holds it, that mount's volume's
    claim, the claim's PersistentVolume, its hostPath under the nodes' ``node_shared``,
    which is ``host_shared`` on the host. None when ``path`` is not on such a volume (a
    ``gs://`` location, an emptyDir, a claim not bound to a shared hostPath volume)."""
    spec = pod.get("spec") or {}
    mounts = [m for c in spec.get("containers") or [] for m in c.get("volumeMounts") or []]

    def holds(mount: dict[str, Any]) -> bool:
        root = mount["mountPath"].rstrip("/")
        return path == root or path.startswith(root + "/")

    held = [m for m in mounts if holds(m)]
    if not held:
        return None
    mount = max(held, key=lambda m: len(m["mountPath"].rstrip("/")))
    source: dict[str, Any] = next(
        (v for v in spec.get("volumes") or [] if v["name"] == mount["name"]), {}
    )
    claim_name = (source.get("persistentVolumeClaim") or {}).get("claimName")
    claim = next((c for c in claims if c["metadata"]["name"] == claim_name), None)
    volume_name = ((claim or {}).get("spec") or {}).get("volumeName")
    volume = next((v for v in volumes if v["metadata"]["name"] == volume_name), None)
    node_dir = (((volume or {}).get("spec") or {}).get("hostPath") or {}).get("path")
    if claim_name is None or node_dir is None or not node_dir.startswith(node_shared + "/"):
        return None
    rel = path[len(mount["mountPath"].rstrip("/")) :].strip("/")
    parts = [host_shared.rstrip("/"), node_dir[len(node_shared) :].strip("/"),
             (mount.get("subPath") or "").strip("/"), rel]  # fmt: skip
    return "/".join(p for p in parts if p)


# ---- the results -------------------------------------------------------------------------


@dataclass
class Outcome:
    """What one fault did: when it recovered, the steps it cost, what was violated."""

    fault: Fault
    recover_seconds: float | None = None
    steps_lost: dict[str, int] = field(default_factory=dict)
    restarts: dict[str, int] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)
    note: str = ""


def table(outcomes: Sequence[Outcome]) -> str:
    """The soak's table: one row per fault."""
    head = ("#", "fault", "target", "recover s", "steps lost", "restarts", "invariants", "note")
    rows = [head]
    for n, o in enumerate(outcomes, 1):
        lost = ", ".join(f"{j}:{s}" for j, s in sorted(o.steps_lost.items()) if s) or "0"
        counted = ", ".join(f"{j}:+{s}" for j, s in sorted(o.restarts.items()) if s) or "0"
        rows.append((
            str(n), str(o.fault.kind), o.fault.target,
            "-" if o.recover_seconds is None else f"{o.recover_seconds:.0f}",
            lost, counted, "ok" if not o.violations else f"{len(o.violations)} violated", o.note,
        ))  # fmt: skip
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = [" | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    return "\n".join(lines)
