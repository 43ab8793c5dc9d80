"""The warm-start step of a pass: before the job's first pod, resolve ``spec.warmStart``'s
source (``policies.warmstart``) and wait for it, refuse it (the job fails) or pin it in
``status.warmStart`` (the pods come in the next pass, from the pinned source).

Apart from ``policies.warmstart`` because the pass state (``policies.pass_state``) imports
that module's reasons: a step of the pass there would make a cycle.

Pure: no I/O; the step changes the pass it is given.
"""

from __future__ import annotations

from etj.api.reasons import (
    REASON_NO_SOURCE,
    REASON_SOURCE_RESOLVED,
    REASON_WAITING_FOR_SOURCE,
    REASON_WARM_START_REFUSED,
)
from etj.api.roles import ReplicaSet
from etj.api.status import ConditionType, Phase
from etj.core.reconcile.conditions import condition_true
from etj.core.reconcile.policies.pass_state import _Pass
from etj.core.reconcile.policies.warmstart import RECHECK_SECONDS, event_message, resolve

# How soon the pass after a pin comes (it makes the pods).
AFTER_PIN_SECONDS = 0.5


def warm_start_pending(p: _Pass) -> bool:
    """spec.warmStart is not pinned yet, and no pod was made (a warm start added to a job
    that already runs changes nothing: its pods train from their own checkpoints)."""
    return (
        p.job.spec.warm_start is not None
        and p.st.warm_start is None
        and not p.w.pods
        and not condition_true(p.st.conditions, ConditionType.CREATED)
    )


def pin_warm_start(p: _Pass, replicas: ReplicaSet | None = None) -> bool:
    """True when this pass makes no pod: it waits for the source, refused it (the job
    failed), or pinned it (the status write; the pods come in the next pass)."""
    if not warm_start_pending(p):
        return False
    r = resolve(p.job, p.w.jobs, p.now)
    if r.refusal is not None:
        p.finish(Phase.FAILED, REASON_WARM_START_REFUSED, r.refusal)
        return True
    if r.wait is not None:
        old = next((c for c in p.st.conditions if c.type == ConditionType.WARM_STARTED), None)
        if old is None or old.message != r.wait:
            p.event("Normal", REASON_WAITING_FOR_SOURCE, r.wait)
        p.condition(ConditionType.WARM_STARTED, False, REASON_WAITING_FOR_SOURCE, r.wait)
        p.st.phase = Phase.PENDING
        p.requeue(RECHECK_SECONDS)
        return True
    assert r.status is not None
    p.st.warm_start = r.status
    reason = REASON_SOURCE_RESOLVED if r.status.location else REASON_NO_SOURCE
    p.condition(ConditionType.WARM_STARTED, r.status.location is not None, reason, r.lines[0])
    # One Event, a line per decision (the status has them all).
    p.event("Normal", reason, event_message(r.lines))
    p.st.message = r.lines[0]
    p.st.phase = p.st.phase or Phase.PENDING
    p.requeue(AFTER_PIN_SECONDS)
    return True
