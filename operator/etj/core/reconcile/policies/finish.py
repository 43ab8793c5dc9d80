"""Passes that end early: an invalid spec (Failed), a leader that reported its last step
and did not exit (Succeeded), a finished job (clean-up and TTL), a suspended one (pods
deleted, status and checkpoints kept); and the status of a job that cannot even be parsed
(``failed_status``).

Pure: no I/O; each rule changes the pass it is given.
"""

from __future__ import annotations

from etj.api.reasons import (
    REASON_INVALID_SPEC,
    REASON_SUCCEEDED,
    REASON_SUSPENDED,
    REASON_TTL_EXPIRED,
)
from etj.api.roles import ReplicaSet
from etj.api.status import ConditionType, EmbeddingTrainingJobStatus, Phase
from etj.core.reconcile.conditions import set_condition
from etj.core.reconcile.decision import Decision, parse_time
from etj.core.reconcile.policies.completion import (
    LEADER_EXIT_GRACE_SECONDS,
    pods_to_clean,
    success_message,
)
from etj.core.reconcile.policies.pass_state import _Pass
from etj.core.reconcile.policies.queue import pods_to_mark_unretriable
from etj.core.reconcile.policies.suspend import pods_to_suspend
from etj.core.reconcile.policies.ttl import seconds_to_expiry, ttl_expired


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


def _invalid(p: _Pass, error: str, reason: str = REASON_INVALID_SPEC) -> Decision:
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
    p.st.export = p.export_status(p.w.export) or p.st.export
    p.finish(
        Phase.SUCCEEDED,
        REASON_SUCCEEDED,
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
            REASON_TTL_EXPIRED,
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
            ConditionType.SUSPENDED,
            True,
            REASON_SUSPENDED,
            "pods deleted; status and checkpoints kept",
        )
        p.condition(ConditionType.RUNNING, False, REASON_SUSPENDED, "")
        p.event(
            "Normal", REASON_SUSPENDED, "job suspended: pods deleted; status and checkpoints kept"
        )
    return p.done(replicas)
