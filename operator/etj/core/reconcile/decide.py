"""One reconcile pass as a pure function: the observed world in, a Decision out.

``decide`` is the ordered list of the pass's steps, each a function of the pass in
``policies`` (its state: ``policies.pass_state``; the pass's types:
``etj.core.reconcile.decision``): not ours → nothing; being deleted → its pods marked for
Kueue; invalid spec → Failed; finished → clean up and honour the TTL; suspended → delete
pods (``finish``); resumed → Pending again (``resume``); then the steps that may end the
pass: the deadline (``deadline``), a warm start not pinned yet (``warmstart_pin``), success
(``success``), failed replicas restarted with their group or the job failed
(``failures``); else the pods the spec wants are made, a changed worker count applied
first (``create``), the gang kept (``gang``), the phase summed up (``summary``) and the pass
requeued at the deadline. The whole new status comes out once, for one status write.

Must not: do I/O, read the clock, or hold a rule of its own (a rule goes in ``policies``).
"""

from __future__ import annotations

from etj.api.constants import MANAGED_BY
from etj.api.status import FINISHED_PHASES
from etj.core.reconcile.decision import Decision, World
from etj.core.reconcile.policies.create import create
from etj.core.reconcile.policies.deadline import deadline_passed, requeue_at_deadline
from etj.core.reconcile.policies.failures import fail_or_restart
from etj.core.reconcile.policies.finish import _finished, _invalid, _suspend
from etj.core.reconcile.policies.gang import gang_step
from etj.core.reconcile.policies.pass_state import _Pass
from etj.core.reconcile.policies.queue import pods_to_mark_unretriable
from etj.core.reconcile.policies.resume import resume
from etj.core.reconcile.policies.success import succeeded
from etj.core.reconcile.policies.summary import summarise
from etj.core.reconcile.policies.warmstart_pin import pin_warm_start
from etj.core.render.pod import replica_set

# The steps that may end a pass (True: its status is written, nothing more this pass).
ENDING_STEPS = (deadline_passed, pin_warm_start, succeeded, fail_or_restart)


def decide(world: World) -> Decision:
    job, rp = world.job, world.job.spec.run_policy
    if rp.managed_by != MANAGED_BY:
        return Decision(skipped=f"managed by {rp.managed_by}")
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
    if rp.suspend:
        return _suspend(p, replicas)
    resume(p)
    for step in ENDING_STEPS:
        if step(p, replicas):
            return p.done(replicas)
    create(p, replicas)
    gang_step(p, replicas)
    summarise(p, replicas)
    requeue_at_deadline(p)
    return p.done(replicas)
