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
once, for one status write.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

from etj.api.constants import MANAGED_BY
from etj.api.job import EmbeddingTrainingJob
from etj.api.plan import ShardPlan
from etj.api.quantity import human_bytes, quantity_bytes
from etj.api.roles import ReplicaSet, Role
from etj.api.spec import SuccessPolicy
from etj.api.status import (
    FINISHED_PHASES,
    ConditionType,
    EmbeddingTrainingJobStatus,
    Evaluation,
    Phase,
    Progress,
    ReplicaBackoff,
)
from etj.core.reconcile.conditions import condition_true, set_condition
from etj.core.reconcile.observe import PodState
from etj.core.reconcile.policies.backoff import (
    due_time,
    recovered,
    seconds_to_recovery,
    wait_for,
    waiting_seconds,
)
from etj.core.reconcile.policies.completion import (
    LEADER_EXIT_GRACE_SECONDS,
    job_succeeded,
    leader_exit_overdue,
    pods_to_clean,
    success_message,
)
from etj.core.reconcile.policies.deadline import deadline_exceeded, seconds_to_deadline
from etj.core.reconcile.policies.gang import (
    CONDITION_SCHEDULED,
    REASON_SCHEDULED,
    REASON_UNAVAILABLE,
    REASON_UNSCHEDULABLE,
    gang_state,
)
from etj.core.reconcile.policies.nodeloss import pods_to_force_delete
from etj.core.reconcile.policies.oom import raised_limit
from etj.core.reconcile.policies.queue import (
    ADOPTION_RECHECK_SECONDS,
    QUEUE_REASONS,
    REASON_PREEMPTED,
    pods_to_mark_unretriable,
    pods_to_release,
    queue_eviction,
)
from etj.core.reconcile.policies.restart import Failure, classify, restart_group
from etj.core.reconcile.policies.scale import (
    REASON_SCALED,
    REASON_SCALING,
    scale_done,
    scale_step,
)
from etj.core.reconcile.policies.suspend import pods_to_suspend, start_time_on_resume
from etj.core.reconcile.policies.ttl import seconds_to_expiry, ttl_expired
from etj.core.reconcile.policies.warmstart import (
    REASON_NO_SOURCE,
    REASON_READ,
    REASON_REFUSED,
    REASON_RESOLVED,
    REASON_WAITING,
    RECHECK_SECONDS,
    event_message,
    resolve,
    summary_lines,
)
from etj.core.reconcile.progress import WarmStartReport, parse_completion
from etj.core.reconcile.status import (
    all_running,
    replica_statuses,
    worker_selector,
    workers_column,
)
from etj.core.render.objects import replica_set
from etj.core.render.scheduling import min_available
from etj.core.tfconfig import pod_name


@dataclass(frozen=True)
class Event:
    type: str  # Normal or Warning
    reason: str
    message: str


@dataclass(frozen=True)
class World:
    """What one reconcile observed."""

    job: EmbeddingTrainingJob
    plan: ShardPlan | None
    plan_error: str | None
    pods: list[PodState]
    has_service: bool
    has_config_map: bool
    now: datetime
    progress: Progress | None = None
    # The chief's last held-out evaluation (data.validation), when it has made one.
    evaluation: Evaluation | None = None
    # The operator's cap for memory limits raised after OOM kills (bytes).
    default_max_memory: int = 64 * 2**30
    # The job's gang scheduler (etj.core.render.scheduling.gang_scheduler); None: no gang.
    gang: str | None = None
    # Its gang object exists as the plan wants it (else it is made or remade).
    gang_current: bool = True
    # The Failed condition's reason when the job cannot run (plan is None): InvalidSpec,
    # or StorageNotShared when the pods cannot share the claims the job names.
    refusal_reason: str = "InvalidSpec"
    # The uids of the pods Kueue's Workload for the job's group names as its owners, read
    # when a pass needs them (policies.queue.owners_wanted); None: not read or unknown.
    queue_owners: frozenset[str] | None = None
    # The jobs of the job's namespace, listed while its warm start (spec.warmStart) is not
    # resolved yet; None: not listed.
    jobs: list[EmbeddingTrainingJob] | None = None
    # The leader's warm start as it carried it out (its metrics page or log): the source
    # checkpoint's step and each table's decision; None: not read (or none).
    warm_start_report: WarmStartReport | None = None


@dataclass
class Decision:
    """What to do: apply in order — create Service/ConfigMap and the gang, write status,
    mark pods unretriable, delete pods, release pods, create pods, post events, delete the
    job (the status first: it records a failure before the failed pod, the only other
    evidence of it, is deleted)."""

    status: EmbeddingTrainingJobStatus | None = None
    create_service: bool = False
    create_config_map: bool = False
    # Make (or remake, sized from the plan) the job's gang object, before any pod.
    apply_gang: bool = False
    delete_pods: list[str] = field(default_factory=list)
    # Pods of lost nodes, deleted at once (grace 0): no kubelet will finish their deletion.
    force_delete_pods: list[str] = field(default_factory=list)
    create_pods: list[tuple[str, int]] = field(default_factory=list)
    # Kueue's plain-Pod group (policies.queue): pods to mark unretriable (before any pod
    # is deleted) and pods whose Kueue finalizer etj removes (after the deletions).
    mark_unretriable: list[str] = field(default_factory=list)
    release_pods: list[str] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    delete_job: bool = False
    requeue_after: float | None = None
    skipped: str | None = None  # why nothing was done


def iso(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str | None) -> datetime | None:
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


class _Pass:
    """The mutable state of one decision, so each rule is a short method."""

    def __init__(self, world: World):
        self.w = world
        self.job = world.job
        status = world.job.status or EmbeddingTrainingJobStatus()
        # A shallow copy (a deep one of the whole status, shard plan and conditions
        # included, was a tenth of every pass): the rules give the status new values (new
        # lists, conditions, counts, back-off entries) and change in place only the
        # back-off map, copied here; the world's status is never changed (the unit tests
        # check it after every decision).
        self.st = status.model_copy(update={"restart_backoff": dict(status.restart_backoff)})
        self.d = Decision()
        self.now = iso(world.now)
        self.gen = world.job.metadata.generation
        self.pods = {p.key: p for p in world.pods}

    def event(self, type_: str, reason: str, message: str) -> None:
        self.d.events.append(Event(type_, reason, message))
        self.st.message = message

    def condition(self, type_: ConditionType, status: bool, reason: str, message: str = "") -> None:
        self.st.conditions = set_condition(
            self.st.conditions, type_, status, reason, message, self.now, self.gen
        )

    def finish(self, phase: Phase, reason: str, message: str) -> None:
        self.st.phase = phase
        self.st.completion_time = self.st.completion_time or self.now
        self.st.restarting_pods = []
        self.stop_waiting()
        self.condition(ConditionType(phase), True, reason, message)
        self.condition(ConditionType.RUNNING, False, reason, message)
        self.condition(ConditionType.RESTARTING, False, reason, "")
        self.event("Normal" if phase == Phase.SUCCEEDED else "Warning", reason, message)
        self.d.delete_pods = pods_to_clean(self.w.pods, self.job.spec.run_policy.clean_pod_policy)
        self.d.mark_unretriable = pods_to_mark_unretriable(self.w.pods)

    def stop_waiting(self) -> None:
        """No restart is pending any more: back-off times go, failure counts stay."""
        self.st.restart_backoff = {
            n: e.model_copy(update={"next_restart_time": None})
            for n, e in self.st.restart_backoff.items()
            if e.failures
        }

    def _trainer_warm_start(self) -> None:
        """A location's warm start is decided table by table by the trainer, which alone
        reads the checkpoint: its report fills status.warmStart once (one Event, a line per
        decision)."""
        pinned, report = self.st.warm_start, self.w.warm_start_report
        if pinned is None or pinned.tables or pinned.location is None or report is None:
            return
        step, tables = report
        self.st.warm_start = pinned.model_copy(
            update={"tables": tables, "step": pinned.step if step is None else step}
        )
        message = event_message(summary_lines(self.st.warm_start))
        self.d.events.append(Event("Normal", REASON_READ, message))

    def requeue(self, seconds: float | None) -> None:
        if seconds is not None:
            current = self.d.requeue_after
            self.d.requeue_after = seconds if current is None else min(current, seconds)

    def done(self, replicas: ReplicaSet | None = None) -> Decision:
        if replicas is not None:
            self.st.replica_statuses = replica_statuses(
                self.w.pods, replicas, self.st.replica_statuses
            )
            self.st.workers = workers_column(self.st.replica_statuses, replicas)
            # The scale subresource's status (kubectl scale, autoscalers).
            self.st.worker_replicas = sum(
                1 for pod in self.w.pods if pod.role == Role.WORKER and pod.active
            )
            self.st.worker_selector = worker_selector(self.job.name)
        if self.w.progress is not None and self.st.phase != Phase.SUCCEEDED:
            self.st.progress = self.w.progress
        if self.w.evaluation is not None and self.st.phase != Phase.SUCCEEDED:
            self.st.evaluation = self.w.evaluation
        self._trainer_warm_start()
        self.st.observed_generation = self.gen
        self.d.status = self.st
        return self.d


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
        final, final_evaluation = parse_completion(p.pods[replicas.leader()].message, p.now)
        p.st.evaluation = final_evaluation or world.evaluation or p.st.evaluation
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


def failed_status(
    status: EmbeddingTrainingJobStatus, reason: str, message: str, now: str, generation: int | None
) -> EmbeddingTrainingJobStatus:
    """The status of a job that cannot even be parsed: Failed with the reason, nothing else."""
    if status.phase == Phase.FAILED:
        return status
    st = status.model_copy(deep=True)
    st.phase = Phase.FAILED
    st.completion_time = st.completion_time or now
    st.message = message
    st.observed_generation = generation
    st.conditions = set_condition(
        st.conditions, ConditionType.FAILED, True, reason, message, now, generation
    )
    return st


def gang_unavailable(
    status: EmbeddingTrainingJobStatus, message: str, now: str, generation: int | None
) -> EmbeddingTrainingJobStatus:
    """The status of a job whose gang object could not be made (no pod is created without
    it): Scheduled False with the API server's reason; the next pass tries again."""
    st = status.model_copy(deep=True)
    st.message = message
    st.conditions = set_condition(
        st.conditions, CONDITION_SCHEDULED, False, REASON_UNAVAILABLE, message, now, generation
    )
    return st


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


def _invalid(p: _Pass, error: str, reason: str = "InvalidSpec") -> Decision:
    if p.st.phase != Phase.FAILED:
        p.finish(Phase.FAILED, reason, error)
        p.d.delete_pods = pods_to_suspend(p.w.pods)  # nothing may run for an invalid job
    return p.done()


def _leader_did_not_exit(p: _Pass, replicas: ReplicaSet) -> None:
    """The leader reported it trained every step (its checkpoint, export and completion
    record written) and its process has not exited within the grace: the job succeeded
    with the progress it reported; its pod is stopped with the others."""
    leader = p.pods[replicas.leader()]
    if p.w.progress is not None:
        p.st.progress = p.w.progress
    p.finish(
        Phase.SUCCEEDED,
        "JobSucceeded",
        f"{success_message(replicas)}; its process had not exited "
        f"{LEADER_EXIT_GRACE_SECONDS:.0f}s after it reported its last step, so it was stopped",
    )
    if leader.name not in p.d.delete_pods:
        p.d.delete_pods = sorted([*p.d.delete_pods, leader.name])


def _finished(p: _Pass, replicas: ReplicaSet) -> Decision:
    rp = p.job.spec.run_policy
    p.d.delete_pods = pods_to_clean(p.w.pods, rp.clean_pod_policy)
    p.d.mark_unretriable = pods_to_mark_unretriable(p.w.pods)
    finished = parse_time(p.st.completion_time)
    if ttl_expired(finished, rp.ttl_seconds_after_finished, p.w.now):
        p.d.delete_job = True
        p.event(
            "Normal",
            "TTLExpired",
            f"deleting the job {rp.ttl_seconds_after_finished}s after it finished",
        )
    else:
        p.d.requeue_after = seconds_to_expiry(finished, rp.ttl_seconds_after_finished, p.w.now)
    return p.done(replicas)


def _suspend(p: _Pass, replicas: ReplicaSet) -> Decision:
    p.d.delete_pods = pods_to_suspend(p.w.pods)
    # A suspended job holds no queue quota: Kueue counts its group finished.
    p.d.mark_unretriable = pods_to_mark_unretriable(p.w.pods)
    p.st.restarting_pods = []
    p.stop_waiting()
    if p.st.phase != Phase.SUSPENDED:
        p.st.phase = Phase.SUSPENDED
        p.condition(
            ConditionType.SUSPENDED, True, "Suspended", "pods deleted; status and checkpoints kept"
        )
        p.condition(ConditionType.RUNNING, False, "Suspended", "")
        p.event("Normal", "Suspended", "job suspended: pods deleted; status and checkpoints kept")
    return p.done(replicas)


def _failures(p: _Pass, replicas: ReplicaSet) -> list[Failure]:
    restarting = set(p.st.restarting_pods)
    policy = p.job.spec.run_policy.restart_policy
    # A pod of a task the spec no longer has (the job was scaled down) is being removed:
    # its end is no failure.
    desired = set(replicas.tasks())
    return [
        classify(pod, policy)
        for pod in p.w.pods
        if pod.name not in restarting
        and pod.key in desired
        and (pod.phase == "Failed" or (pod.terminating and not pod.finished))
    ]


def _handle_failures(p: _Pass, replicas: ReplicaSet) -> bool:
    """Restart what failed; True when the job itself failed."""
    failures = _failures(p, replicas)
    if not failures:
        return False
    rp = p.job.spec.run_policy
    permanent = [f for f in failures if f.permanent]
    if permanent:
        p.finish(Phase.FAILED, "ReplicaFailed", permanent[0].why)
        return True
    whys = "; ".join(f.why for f in failures)
    for f in failures:
        if f.pod.node_lost:
            p.event(
                "Warning",
                "NodeLost",
                f"{f.pod.name} was lost with its node {f.pod.node_name or '(unknown)'}: a "
                "disruption, replaced without counting against backoffLimit",
            )
    # Disruptions (evicted, preempted, stopped by a queue) are not the job's failures: as
    # batch/v1 Job's podFailurePolicy Ignore on DisruptionTarget, they are not counted.
    # Kueue stops a whole group at once: a replica that crashed beside it (a collective
    # lost its peer before Kueue marked this one) is part of the same disruption.
    evicted = queue_eviction(f.pod for f in failures)
    counted = evicted is None and any(not f.pod.disrupted for f in failures)
    if counted and p.st.restarts >= rp.backoff_limit:
        p.finish(
            Phase.FAILED,
            "BackoffLimitExceeded",
            f"{whys}; backoffLimit {rp.backoff_limit} reached after {p.st.restarts} restarts",
        )
        return True
    assert p.w.plan is not None
    group: set[tuple[str, int]] = set()
    for f in failures:
        group |= restart_group(
            p.w.plan.strategy, replicas, f.pod.role, f.pod.index, f.pod.trainer_reason
        )
        _oom(p, f)
    if counted:
        p.st.restarts += 1
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
        "Restarting",
        f"{whys}; restarting {', '.join(names)} {when}"
        + (
            f"(restart {p.st.restarts} of backoffLimit {rp.backoff_limit})"
            if counted
            else "(a disruption: not counted against backoffLimit)"
        ),
    )
    p.st.phase = Phase.RESTARTING
    p.condition(
        ConditionType.RESTARTING,
        True,
        "ReplicaFailed",
        f"{whys}; next restart {when}" if when else whys,
    )
    return False


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
        w = wait_for(f.pod, backoff.get(f.pod.name), p.w.plan.strategy, policy, p.w.now)
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


def _count_role_restarts(p: _Pass, group: set[tuple[str, int]], replicas: ReplicaSet) -> None:
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
            "OOMKilled",
            f"{f.pod.name} was OOM-killed; its memory limit cannot grow (limit {current}, cap {human_bytes(cap)})",
        )
        return
    p.st.memory_limits = {**p.st.memory_limits, f.pod.name: new}
    p.event(
        "Warning",
        "OOMKilled",
        f"{f.pod.name} was OOM-killed; recreating it with memory limit {human_bytes(new)} (was {human_bytes(current or 0)})",
    )


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


def _restarted(p: _Pass, name: str) -> None:
    entry = p.st.restart_backoff.get(name)
    if entry is None:
        return
    if entry.failures:
        p.st.restart_backoff[name] = entry.model_copy(update={"next_restart_time": None})
    else:
        del p.st.restart_backoff[name]


def _forget_recovered(p: _Pass) -> None:
    """A replica that has run cleanly for resetAfterSeconds loses its failure count; the
    decision asks to be requeued when the next one will have (a change of the time alone:
    the operator does not decide again on an unchanged world before its requeue)."""
    policy = p.job.spec.run_policy.restart_backoff
    running = {pod.name: pod for pod in p.w.pods}
    kept = {}
    for n, e in p.st.restart_backoff.items():
        pod = running.get(n)
        if e.next_restart_time is not None or pod is None:
            kept[n] = e
        elif not recovered(pod, policy, p.w.now):
            kept[n] = e
            p.requeue(seconds_to_recovery(pod, policy, p.w.now))
    p.st.restart_backoff = kept


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
