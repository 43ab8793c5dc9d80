"""Failed replicas: which failures count (one fault once: a replica that ended before the
last counted restart was decided is part of that fault), restarting their group (or failing
the job when the restart policy or backoffLimit says so), the restart back-off, a Kueue
requeue, and a raised memory limit after an OOM kill.

Pure: no I/O; each rule changes the pass it is given.
"""

from __future__ import annotations

from etj.api.quantity import human_bytes, quantity_bytes
from etj.api.reasons import (
    REASON_BACKOFF_LIMIT_EXCEEDED,
    REASON_NODE_LOST,
    REASON_OOM_KILLED,
    REASON_PREEMPTED,
    REASON_REPLICA_FAILED,
    REASON_RESTARTING,
)
from etj.api.roles import ReplicaSet, Role
from etj.api.status import ConditionType, Phase, PodPhase, ReplicaBackoff
from etj.api.trainer_reasons import REASON_CHECKPOINT_STORAGE_FULL
from etj.core.reconcile.decision import iso, parse_time
from etj.core.reconcile.policies.backoff import due_time, restart_wait
from etj.core.reconcile.policies.nodeloss import pods_to_force_delete
from etj.core.reconcile.policies.oom import raised_limit
from etj.core.reconcile.policies.pass_state import _Pass
from etj.core.reconcile.policies.peerloss import (
    loss_window,
    lost_with_a_peer,
    refunds,
    remembered,
)
from etj.core.reconcile.policies.queue import QUEUE_REASONS, queue_eviction
from etj.core.reconcile.policies.restart import Failure, classify, restart_group
from etj.core.reconcile.status import replica_statuses
from etj.core.tfconfig import pod_name


def fail_or_restart(p: _Pass, replicas: ReplicaSet) -> bool:
    """The failures step of a pass: pods of lost nodes force-deleted, failed replicas
    restarted with their group; True when the job itself failed."""
    p.d.force_delete_pods = pods_to_force_delete(p.w.pods)
    _refund_peer_losses(p, replicas)
    return _handle_failures(p, replicas)


def _refund_peer_losses(p: _Pass, replicas: ReplicaSet) -> None:
    """Restarts counted for 138s whose lost peer is seen only now are refunded; entries
    past the node-loss window are forgotten (policies.peerloss)."""
    kept = p.st.retryable_restarts
    if not kept:
        return
    assert p.w.plan is not None
    window = loss_window(p.job.spec, p.w.node_loss_seconds)
    left, refunded = refunds(
        kept, p.job.name, p.w.pods, p.w.plan.strategy, replicas, p.w.now, window
    )
    p.st.retryable_restarts = left
    if not refunded:
        return
    p.st.restarts = max(0, p.st.restarts - len(refunded))
    what = "; ".join(
        f"{', '.join(kept[i].pods)} exited 138 (a peer unavailable) at {kept[i].time}, "
        f"before {peer} was seen lost with its node"
        for i, peer in sorted(refunded.items())
    )
    p.event(
        "Normal",
        REASON_NODE_LOST,
        f"{what}: a disruption; {len(refunded)} restart{'s' if len(refunded) > 1 else ''} "
        f"refunded to backoffLimit (restarts {p.st.restarts} of "
        f"{p.job.spec.run_policy.backoff_limit})",
    )


def _failures(p: _Pass, replicas: ReplicaSet) -> list[Failure]:
    restarting = set(p.st.restarting_pods)
    spec = p.job.spec
    job_policy = spec.run_policy.restart_policy
    # A pod of a task the spec no longer has (the job was scaled down) is being removed:
    # its end is no failure.
    desired = set(replicas.tasks())
    return [
        classify(pod, spec.replicas.restart_policy_of(pod.role, job_policy))
        for pod in p.w.pods
        if pod.name not in restarting
        and pod.key in desired
        and (pod.phase == PodPhase.FAILED or (pod.terminating and not pod.finished))
    ]


def _handle_failures(p: _Pass, replicas: ReplicaSet) -> bool:
    """Restart what failed; True when the job itself failed."""
    failures = _failures(p, replicas)
    if not failures:
        return False
    rp = p.job.spec.run_policy
    permanent = [f for f in failures if f.permanent]
    if permanent:
        _storage_full(p, permanent)
        p.finish(Phase.FAILED, REASON_REPLICA_FAILED, permanent[0].why)
        return True
    whys = "; ".join(f.why for f in failures)
    for f in failures:
        if f.pod.node_lost:
            p.event(
                "Warning",
                REASON_NODE_LOST,
                f"{f.pod.name} was lost with its node {f.pod.node_name or '(unknown)'}: a "
                "disruption, replaced without counting against backoffLimit",
            )
    # Disruptions (evicted, preempted, stopped by a queue) are not the job's failures: as
    # batch/v1 Job's podFailurePolicy Ignore on DisruptionTarget, they are not counted.
    # Kueue stops a whole group at once: a replica that crashed beside it (a collective
    # lost its peer before Kueue marked this one) is part of the same disruption.
    evicted = queue_eviction(f.pod for f in failures)
    # One fault, one count: a replica that ended before the last counted restart was
    # decided failed in that fault, only seen later (a ps OOM-killed: its chief lost it and
    # exited first, and was restarted and counted; the ps' own end reached the API server
    # after that). It restarts, and is not counted again.
    before = parse_time(p.st.last_restart_time)
    earlier = [
        f
        for f in failures
        if before is not None and f.pod.finished_at is not None and f.pod.finished_at <= before
    ]
    # A peer lost with its node: the replicas that ended because of it (138) are part of
    # that disruption.
    assert p.w.plan is not None
    by_loss = lost_with_a_peer(failures, p.w.plan.strategy, replicas)
    counted = evicted is None and any(
        not f.pod.disrupted and f not in earlier and f.pod.name not in by_loss for f in failures
    )
    if counted and p.st.restarts >= rp.backoff_limit:
        p.finish(
            Phase.FAILED,
            REASON_BACKOFF_LIMIT_EXCEEDED,
            f"{whys}; backoffLimit {rp.backoff_limit} reached after {p.st.restarts} restarts",
        )
        return True
    group: set[tuple[Role, int]] = set()
    for f in failures:
        group |= restart_group(
            p.w.plan.strategy, replicas, f.pod.role, f.pod.index, f.pod.trainer_reason
        )
        _oom(p, f)
    if counted:
        p.st.restarts += 1
        p.st.last_restart_time = iso(p.w.now)
        # Only 138s counted it: a peer seen lost later may refund it (policies.peerloss).
        entry = remembered([f for f in failures if f not in earlier], p.w.now)
        if entry is not None:
            p.st.retryable_restarts = [*p.st.retryable_restarts, entry]
    names = sorted(pod_name(p.job.name, r, i) for r, i in group)
    _count_role_restarts(p, group, replicas)
    p.st.restarting_pods = sorted(set(p.st.restarting_pods) | set(names))
    p.d.delete_pods = sorted(
        pod.name for key, pod in p.pods.items() if key in group and not pod.terminating
    )
    when = _back_off(p, failures, names)
    if evicted is not None:
        _requeued(p, names, *evicted)
        return False
    p.event(
        "Warning",
        REASON_RESTARTING,
        f"{whys}; restarting {', '.join(names)} {when}"
        + (
            f"(restart {p.st.restarts} of backoffLimit {rp.backoff_limit})"
            if counted
            else _not_counted(p, earlier, by_loss)
        ),
    )
    p.st.phase = Phase.RESTARTING
    p.condition(
        ConditionType.RESTARTING,
        True,
        REASON_REPLICA_FAILED,
        f"{whys}; next restart {when}" if when else whys,
    )
    return False


def _not_counted(p: _Pass, earlier: list[Failure], by_loss: dict[str, str]) -> str:
    if by_loss:
        ended = ", ".join(f"{pod} exited 138 (a peer unavailable) with {peer} lost"
                          for pod, peer in sorted(by_loss.items()))  # fmt: skip
        return f"({ended} with its node: a disruption, not counted against backoffLimit)"
    if earlier:
        return (
            f"(failed in the fault of the restart at {p.st.last_restart_time}: not counted again)"
        )
    return "(a disruption: not counted against backoffLimit)"


def _storage_full(p: _Pass, permanent: list[Failure]) -> None:
    """A checkpoint save found its volume full: the job's CheckpointStorageFull condition
    (the trainer's reason is the condition's too: the same fact, one name), with the
    trainer's message (the volume, its size, what a checkpoint takes). Every
    restart would fail at its next save, so the job fails instead of crash-looping."""
    full = [f.pod for f in permanent if f.pod.trainer_reason == REASON_CHECKPOINT_STORAGE_FULL]
    if full:
        message = (full[0].message or "").split(": ", 1)[-1].strip()
        p.condition(
            ConditionType.CHECKPOINT_STORAGE_FULL,
            True,
            REASON_CHECKPOINT_STORAGE_FULL,
            f"{full[0].name}: {message}",
        )


def _requeued(p: _Pass, names: list[str], reason: str, message: str) -> None:
    """Kueue stopped the job's pod group (a preemption, or another eviction): a disruption.
    The pods are recreated, Kueue's gate holds them until the group's Workload is admitted
    again, and the chief resumes from the last checkpoint."""
    what = "preempted" if reason == REASON_PREEMPTED else "evicted"
    text = (
        f"Kueue {what} the job's pod group ({message}); recreating {', '.join(names)}: "
        "they wait for Kueue to admit the group again and training resumes from the last "
        "checkpoint (a disruption: not counted against backoffLimit)"
    )
    said = next((c for c in p.st.conditions if c.type == ConditionType.RESTARTING), None)
    if said is not None and said.status == "True" and said.reason in QUEUE_REASONS:
        # The same requeue, seen pod by pod (Kueue stops them one at a time): said once.
        reason, text = said.reason, said.message
    else:
        p.event("Warning", reason, text)
    p.st.message = text
    p.st.phase = Phase.RESTARTING
    p.condition(ConditionType.RESTARTING, True, reason, text)


def _back_off(p: _Pass, failures: list[Failure], names: list[str]) -> str:
    """Record when the restarting replicas may come back; '' when at once, else
    'in 20s at <time> (back-off after 2 consecutive failures of <pod>) '."""
    assert p.w.plan is not None
    policy = p.job.spec.run_policy.restart_backoff
    backoff = dict(p.st.restart_backoff)
    longest = (0.0, 0, "")
    for f in failures:
        w = restart_wait(f.pod, backoff.get(f.pod.name), p.w.plan.strategy, policy, p.w.now)
        backoff[f.pod.name] = ReplicaBackoff(failures=w.failures)
        longest = max(longest, (w.seconds, w.failures, f.pod.name))
    seconds, count, failed = longest
    due = iso(due_time(p.w.now, seconds)) if seconds > 0 else None
    # The whole group waits as long as its longest back-off: a ps and the chief come back
    # together, or the chief would hang on the missing ps.
    for name in names:
        entry = backoff.get(name) or ReplicaBackoff()
        backoff[name] = entry.model_copy(update={"next_restart_time": due})
    p.st.restart_backoff = {n: e for n, e in backoff.items() if e.failures or e.next_restart_time}
    if due is None:
        return ""
    return (
        f"in {seconds:g}s, at {due} (back-off after {count} consecutive "
        f"failure{'s' if count > 1 else ''} of {failed}) "
    )


def _count_role_restarts(p: _Pass, group: set[tuple[Role, int]], replicas: ReplicaSet) -> None:
    statuses = replica_statuses(p.w.pods, replicas, p.st.replica_statuses)
    for role in {r for r, _ in group}:
        current = getattr(statuses, role)
        if current is not None:
            current.restarts += sum(1 for r, _ in group if r == role)
    p.st.replica_statuses = statuses


def _oom(p: _Pass, f: Failure) -> None:
    if not f.pod.oom_killed:
        return
    cap_q = p.job.spec.run_policy.max_memory_on_oom
    cap = quantity_bytes(cap_q) if cap_q is not None else p.w.default_max_memory
    current = p.st.memory_limits.get(f.pod.name, f.pod.memory_limit)
    new = raised_limit(current, cap)
    if new is None:
        p.event(
            "Warning",
            REASON_OOM_KILLED,
            f"{f.pod.name} was OOM-killed; its memory limit cannot grow (limit {current}, cap {human_bytes(cap)})",
        )
        return
    p.st.memory_limits = {**p.st.memory_limits, f.pod.name: new}
    p.event(
        "Warning",
        REASON_OOM_KILLED,
        f"{f.pod.name} was OOM-killed; recreating it with memory limit {human_bytes(new)} (was {human_bytes(current or 0)})",
    )
