"""One reconcile pass as a pure function: the observed world in, a Decision out.

The order of the rules: not ours → nothing; invalid spec → Failed; finished → clean up and
honour the TTL; suspended → delete pods; deadline → Failed; a warm start not pinned yet
(before the first pod) → resolve its source: wait, refuse (Failed) or pin it
(policies.warmstart), the pods in the next pass; succeeded (the chief, else worker 0, or
every worker: runPolicy.successPolicy) → Succeeded; failed replicas → restart their group
(or fail the job when the policy or backoffLimit says so), after the replica's restart
back-off; then a changed worker count restarts, checkpoint first, what must see the new
cluster (policies.scale); then create whatever is missing (a replica still in back-off
waits: the Decision asks to be requeued when it is due). The whole new status comes out
once, for one status write. The pass's types live in ``etj.core.reconcile.decision``, its state in
``policies.pass_state``; the rules that end a pass early, handle failures and forget
recovered replicas in ``policies`` (``finish``, ``failures``, ``recovery``).
"""

from __future__ import annotations

from etj.api.constants import MANAGED_BY
from etj.api.roles import ReplicaSet
from etj.api.spec import SuccessPolicy
from etj.api.status import FINISHED_PHASES, ConditionType, Phase, Progress
from etj.core.reconcile.conditions import condition_true
from etj.core.reconcile.decision import Decision, World, parse_time
from etj.core.reconcile.policies.backoff import waiting_seconds
from etj.core.reconcile.policies.completion import (
    job_succeeded,
    leader_exit_overdue,
    success_message,
)
from etj.core.reconcile.policies.deadline import deadline_exceeded, seconds_to_deadline
from etj.core.reconcile.policies.failures import _handle_failures
from etj.core.reconcile.policies.finish import _finished, _invalid, _leader_did_not_exit, _suspend
from etj.core.reconcile.policies.gang import (
    CONDITION_SCHEDULED,
    REASON_SCHEDULED,
    REASON_UNSCHEDULABLE,
    gang_state,
)
from etj.core.reconcile.policies.nodeloss import pods_to_force_delete
from etj.core.reconcile.policies.pass_state import _Pass
from etj.core.reconcile.policies.queue import (
    ADOPTION_RECHECK_SECONDS,
    pods_to_mark_unretriable,
    pods_to_release,
)
from etj.core.reconcile.policies.recovery import _forget_recovered, _restarted
from etj.core.reconcile.policies.scale import REASON_SCALED, REASON_SCALING, scale_done, scale_step
from etj.core.reconcile.policies.suspend import start_time_on_resume
from etj.core.reconcile.policies.ttl import seconds_to_expiry
from etj.core.reconcile.policies.warmstart import (
    REASON_NO_SOURCE,
    REASON_REFUSED,
    REASON_RESOLVED,
    REASON_WAITING,
    RECHECK_SECONDS,
    event_message,
    resolve,
)
from etj.core.reconcile.progress import completion_export, parse_completion
from etj.core.reconcile.status import all_running
from etj.core.render.pod import replica_set
from etj.core.render.scheduling import min_available
from etj.core.tfconfig import pod_name


def decide(world: World) -> Decision:
    job = world.job
    if job.spec.run_policy.managed_by != MANAGED_BY:
        return Decision(skipped=f"managed by {job.spec.run_policy.managed_by}")
    if job.metadata.deletionTimestamp:
        # Its pods go with it: Kueue must count their group finished, not wait for them.
        marks = pods_to_mark_unretriable(world.pods)
        return Decision(skipped="being deleted", mark_unretriable=marks)
    p = _Pass(world)
    if world.plan is None:
        return _invalid(p, world.plan_error or "the job cannot be planned", world.refusal_reason)
    p.st.strategy = world.plan.strategy
    p.st.shard_plan = world.plan
    replicas = replica_set(job, world.plan)
    if p.st.phase in FINISHED_PHASES:
        return _finished(p, replicas)
    if job.spec.run_policy.suspend:
        return _suspend(p, replicas)
    if p.st.phase == Phase.SUSPENDED:
        p.condition(
            ConditionType.SUSPENDED,
            False,
            "Resumed",
            "pods recreated; training resumes from the last checkpoint",
        )
        p.event(
            "Normal",
            "Resumed",
            "job resumed: recreating pods; training resumes from the last checkpoint",
        )
        p.st.phase = Phase.PENDING
        p.st.start_time = start_time_on_resume(p.now)
    p.st.start_time = p.st.start_time or p.now
    rp = job.spec.run_policy
    if deadline_exceeded(parse_time(p.st.start_time), rp.active_deadline_seconds, world.now):
        p.finish(
            Phase.FAILED,
            "DeadlineExceeded",
            f"the job ran longer than activeDeadlineSeconds ({rp.active_deadline_seconds})",
        )
        return p.done(replicas)
    if _warm_start_pending(p) and _warm_start(p):
        return p.done(replicas)
    success = rp.success_policy
    if success == SuccessPolicy.CHIEF:
        reported = world.progress or p.st.progress
        finished = parse_time(reported.finished_time if reported else None)
        overdue = leader_exit_overdue(p.pods, replicas, finished, world.now)
        if overdue == 0:
            _leader_did_not_exit(p, replicas)
            return p.done(replicas)
        p.requeue(overdue)
    if job_succeeded(p.pods, replicas, success):
        # The chief exits 0 only once it has trained every step; its last metrics page
        # may not have been read before it exited, but its termination message has the
        # final step and the evaluation of the end.
        message = p.pods[replicas.leader()].message
        final, final_evaluation = parse_completion(message, p.now)
        p.st.evaluation = final_evaluation or world.evaluation or p.st.evaluation
        # The version written at the end (spec.export), which no scrape may have seen.
        version = completion_export(message, p.now) or world.export
        p.st.export = p.export_status(version) or p.st.export
        earlier = world.progress or p.st.progress
        last = final or earlier or Progress()
        if last.dynamic_tables is None and earlier is not None:
            # The termination message (4 KiB at most) leaves them out: the last read stand.
            last = last.model_copy(update={"dynamic_tables": earlier.dynamic_tables})
        # (With training.epochs the steps are counted by the trainer, and a job's own
        # program counts its own: keep its last step.)
        own = any(
            spec is not None and spec.template is not None and spec.template.runs_own_program
            for spec in (job.spec.replicas.chief, job.spec.replicas.worker)
        )
        steps = 0 if job.spec.training.epochs or own else job.spec.training.steps
        p.st.progress = last.model_copy(update={"step": max(last.step, steps)})
        p.finish(Phase.SUCCEEDED, "JobSucceeded", success_message(replicas, success))
        p.d.requeue_after = seconds_to_expiry(world.now, rp.ttl_seconds_after_finished, world.now)
        return p.done(replicas)
    p.d.force_delete_pods = pods_to_force_delete(world.pods)
    if _handle_failures(p, replicas):
        return p.done(replicas)
    release = pods_to_release(world.pods, len(replicas.tasks()), world.queue_owners)
    p.d.release_pods = release.pods
    if release.awaiting_adoption:
        p.requeue(ADOPTION_RECHECK_SECONDS)
    _create_missing(p, replicas, _scale(p, replicas))
    _gang(p, replicas)
    _summarise(p, replicas)
    p.requeue(
        seconds_to_deadline(parse_time(p.st.start_time), rp.active_deadline_seconds, world.now)
    )
    return p.done(replicas)


def _warm_start_pending(p: _Pass) -> bool:
    """spec.warmStart is not pinned yet, and no pod was made (a warm start added to a job
    that already runs changes nothing: its pods train from their own checkpoints)."""
    return (
        p.job.spec.warm_start is not None
        and p.st.warm_start is None
        and not p.w.pods
        and not condition_true(p.st.conditions, ConditionType.CREATED)
    )


def _warm_start(p: _Pass) -> bool:
    """Resolve the warm start's source (policies.warmstart); True when this pass makes no
    pod: it waits for the source, refused it (the job failed), or pinned it (the status
    write; the pods come in the next pass, from the pinned source)."""
    r = resolve(p.job, p.w.jobs, p.now)
    if r.refusal is not None:
        p.finish(Phase.FAILED, REASON_REFUSED, r.refusal)
        return True
    if r.wait is not None:
        old = next((c for c in p.st.conditions if c.type == ConditionType.WARM_STARTED), None)
        if old is None or old.message != r.wait:
            p.event("Normal", REASON_WAITING, r.wait)
        p.condition(ConditionType.WARM_STARTED, False, REASON_WAITING, r.wait)
        p.st.phase = Phase.PENDING
        p.requeue(RECHECK_SECONDS)
        return True
    assert r.status is not None
    p.st.warm_start = r.status
    reason = REASON_RESOLVED if r.status.location else REASON_NO_SOURCE
    p.condition(ConditionType.WARM_STARTED, r.status.location is not None, reason, r.lines[0])
    # One Event, a line per decision (the status has them all).
    p.event("Normal", reason, event_message(r.lines))
    p.st.message = r.lines[0]
    p.st.phase = p.st.phase or Phase.PENDING
    p.requeue(0.5)
    return True


def _gang(p: _Pass, replicas: ReplicaSet) -> None:
    """Keep the gang object as the plan wants it; say whether the gang is placed."""
    if p.w.gang is None:
        return
    p.d.apply_gang = not p.w.gang_current
    state = gang_state(p.w.pods, min_available(p.job, replicas), p.w.gang)
    old = next((c for c in p.st.conditions if c.type == CONDITION_SCHEDULED), None)
    if old is None or old.reason != state.reason:
        if state.reason == REASON_UNSCHEDULABLE:
            p.event("Warning", state.reason, state.message)
        elif state.reason == REASON_SCHEDULED:
            p.event("Normal", state.reason, state.message)
    p.condition(CONDITION_SCHEDULED, state.scheduled, state.reason, state.message)


def _scale(p: _Pass, replicas: ReplicaSet) -> frozenset[tuple[str, int]]:
    """Apply a change of the worker count (policies.scale); the tasks to leave alone."""
    assert p.w.plan is not None
    step = scale_step(p.w.plan.strategy, replicas, p.w.pods, p.st.restarting_pods)
    p.st.restarting_pods = sorted(set(p.st.restarting_pods) | set(step.replacing))
    p.d.delete_pods += [n for n in step.stop if n not in p.d.delete_pods]
    if step.message is not None:
        p.event("Normal", "Scaled", step.message)
        p.condition(ConditionType.SCALING, True, REASON_SCALING, step.message)
    return step.hold


def _create_missing(
    p: _Pass, replicas: ReplicaSet, hold: frozenset[tuple[str, int]] = frozenset()
) -> None:
    """Make the pods the spec wants and no pod has, delete those of tasks it no longer
    has; ``hold``: tasks left as they are in this pass (a change of the worker count)."""
    p.d.create_service = not p.w.has_service
    p.d.create_config_map = not p.w.has_config_map
    restarting = set(p.st.restarting_pods)
    deleting = set(p.d.delete_pods)
    desired = set(replicas.tasks())
    # Said once per job, even when the status write of the pass that created the pods
    # failed (the next pass then finds them there).
    first_time = not condition_true(p.st.conditions, ConditionType.CREATED)
    for key in replicas.tasks():
        pod = p.pods.get(key)
        name = pod_name(p.job.name, *key)
        if key in hold:
            continue
        if pod is None and name not in deleting:
            wait = waiting_seconds(p.st.restart_backoff.get(name), p.w.now)
            if name in restarting and wait > 0:
                p.requeue(wait)  # in back-off: come back when it is due
                continue
            p.d.create_pods.append(key)
            restarting.discard(name)
            _restarted(p, name)
        elif (
            pod is not None and name in restarting and not pod.terminating and name not in deleting
        ):
            # Still the old pod: its deletion did not go through; ask again.
            p.d.delete_pods.append(name)
    # Pods of tasks the spec no longer has (the job was scaled down).
    p.d.delete_pods += sorted(
        pod.name
        for key, pod in p.pods.items()
        if key not in desired and key not in hold and not pod.terminating
    )
    # A replica of a task the spec no longer has is not made again: once its pod is gone,
    # it is no longer restarting.
    wanted = {pod_name(p.job.name, *key) for key in desired} | {pod.name for pod in p.w.pods}
    p.st.restarting_pods = sorted(restarting & wanted)
    if first_time and (p.d.create_pods or p.w.pods):
        p.condition(ConditionType.CREATED, True, "PodsCreated", f"{len(desired)} pods created")
        p.event(
            "Normal",
            "Created",
            f"created {len(desired)} pods ({p.w.plan.strategy if p.w.plan else ''}, {replicas.ps} ps)",
        )


def _summarise(p: _Pass, replicas: ReplicaSet) -> None:
    _forget_recovered(p)
    if p.st.restarting_pods:
        p.st.phase = Phase.RESTARTING
        return
    if all_running(p.pods, replicas) and not p.d.create_pods:
        if p.st.phase != Phase.RUNNING:
            p.event("Normal", "Running", "all replicas are running")
        p.st.phase = Phase.RUNNING
        p.condition(ConditionType.RUNNING, True, "AllReplicasRunning", "")
        p.condition(ConditionType.RESTARTING, False, "AllReplicasRunning", "")
        strategy = p.w.plan.strategy if p.w.plan else ""
        if condition_true(p.st.conditions, ConditionType.SCALING) and scale_done(
            strategy, p.w.pods, replicas
        ):
            p.condition(
                ConditionType.SCALING,
                False,
                REASON_SCALED,
                f"{replicas.worker} workers running; training resumed from the checkpoint "
                "taken before the change",
            )
    elif p.st.phase not in (Phase.RUNNING, Phase.RESTARTING):
        p.st.phase = Phase.PENDING
