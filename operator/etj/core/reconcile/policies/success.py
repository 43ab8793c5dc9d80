"""The success step of a pass: the job succeeded (``runPolicy.successPolicy``:
policies.completion) → its final progress, evaluation and export from the leader's
termination message, Succeeded, the TTL's requeue; a leader that reported its last step and
did not exit within the grace → Succeeded, its pod stopped (policies.finish).

Pure: no I/O; the step changes the pass it is given.
"""

from __future__ import annotations

from etj.api.reasons import REASON_SUCCEEDED
from etj.api.roles import ReplicaSet
from etj.api.spec import SuccessPolicy, step_limit
from etj.api.status import Phase, Progress
from etj.core.reconcile.decision import parse_time
from etj.core.reconcile.policies.completion import (
    job_succeeded,
    leader_exit_overdue,
    success_message,
)
from etj.core.reconcile.policies.finish import _leader_did_not_exit
from etj.core.reconcile.policies.pass_state import _Pass
from etj.core.reconcile.policies.ttl import seconds_to_expiry
from etj.core.reconcile.progress import completion_export, parse_completion


def succeeded(p: _Pass, replicas: ReplicaSet) -> bool:
    """True when the job succeeded in this pass."""
    world, rp = p.w, p.job.spec.run_policy
    if rp.success_policy == SuccessPolicy.CHIEF:
        reported = world.progress or p.st.progress
        finished = parse_time(reported.finished_time if reported else None)
        overdue = leader_exit_overdue(p.pods, replicas, finished, world.now)
        if overdue == 0:
            _leader_did_not_exit(p, replicas)
            return True
        p.requeue(overdue)
    if not job_succeeded(p.pods, replicas, rp.success_policy):
        return False
    # The chief exits 0 only once it has trained every step; its last metrics page may not
    # have been read before it exited, but its termination message has the final step and
    # the evaluation of the end.
    message = p.pods[replicas.leader()].message
    final, final_evaluation = parse_completion(message, p.now)
    p.st.evaluation = final_evaluation or world.evaluation or p.st.evaluation
    # The version written at the end (spec.export), which no scrape may have seen.
    version = completion_export(message, p.now) or world.export
    p.st.export = p.export_status(version) or p.st.export
    earlier = world.progress or p.st.progress
    last = final or earlier or Progress()
    if earlier is not None:
        # The termination message (4 KiB at most) leaves the tables' stats out: the last
        # read stand.
        kept = {
            field: getattr(earlier, field)
            for field in ("dynamic_tables", "disk_tables")
            if getattr(last, field) is None
        }
        last = last.model_copy(update=kept)
    # (With training.epochs the steps are counted by the trainer, and a job's own program
    # counts its own: keep its last step.)
    own = any(
        spec is not None and spec.template is not None and spec.template.runs_own_program
        for spec in (p.job.spec.replicas.chief, p.job.spec.replicas.worker)
    )
    # A job that follows its files without steps: the trainer's count too.
    limit = step_limit(p.job.spec.training, p.job.spec.data)
    steps = 0 if p.job.spec.training.epochs or own or limit is None else limit
    p.st.progress = last.model_copy(update={"step": max(last.step, steps)})
    p.finish(Phase.SUCCEEDED, REASON_SUCCEEDED, success_message(replicas, rp.success_policy))
    p.d.requeue_after = seconds_to_expiry(world.now, rp.ttl_seconds_after_finished, world.now)
    return True
