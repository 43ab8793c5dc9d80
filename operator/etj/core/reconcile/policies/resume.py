"""The resume step of a pass: a job suspended until now (``runPolicy.suspend`` back to
false) is Pending again, its Suspended condition false, its start time the moment of the
resume (policies.suspend: the deadline's clock restarts); a job's first pass sets its
start time.

Pure: no I/O; the step changes the pass it is given. Must not: delete or create pods (the
later steps of ``decide`` do).
"""

from __future__ import annotations

from etj.api.reasons import REASON_RESUMED
from etj.api.status import ConditionType, Phase
from etj.core.reconcile.policies.pass_state import _Pass
from etj.core.reconcile.policies.suspend import start_time_on_resume


def resume(p: _Pass) -> None:
    if p.st.phase == Phase.SUSPENDED:
        p.condition(
            ConditionType.SUSPENDED,
            False,
            REASON_RESUMED,
            "pods recreated; training resumes from the last checkpoint",
        )
        p.event(
            "Normal",
            REASON_RESUMED,
            "job resumed: recreating pods; training resumes from the last checkpoint",
        )
        p.st.phase = Phase.PENDING
        p.st.start_time = start_time_on_resume(p.now)
    p.st.start_time = p.st.start_time or p.now
