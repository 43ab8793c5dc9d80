"""etj.core.reconcile.policies.resume: a suspended job comes back Pending with its
deadline's clock restarted; a first pass sets the start time; a running job is left as it is."""

from __future__ import annotations

from etj.api.reasons import REASON_RESUMED
from etj.api.status import ConditionType, Phase
from etj.core.reconcile.policies.pass_state import _Pass
from etj.core.reconcile.policies.resume import resume
from tests.unit.etj.core.reconcile.policies.test_pass_state import _world
from tests.unit.reconcile_helpers import later, make_job

EARLIER = "2026-11-22T11:00:00Z"


def test_a_suspended_job_resumes_pending_with_a_new_start_time():
    job = make_job(status={"phase": "Suspended", "startTime": EARLIER})
    p = _Pass(_world(job, now=later(30)))
    resume(p)
    assert (p.st.phase, p.st.start_time) == (Phase.PENDING, "2026-11-22T12:00:30Z")
    (c,) = [c for c in p.st.conditions if c.type == ConditionType.SUSPENDED]
    assert (c.status, c.reason) == ("False", REASON_RESUMED)
    assert [e.reason for e in p.d.events] == [REASON_RESUMED]


def test_a_first_pass_starts_the_clock_and_a_running_job_keeps_its_own():
    first = _Pass(_world(make_job()))
    resume(first)
    assert first.st.start_time == "2026-11-22T12:00:00Z" and first.d.events == []
    running = _Pass(_world(make_job(status={"phase": "Running", "startTime": EARLIER})))
    resume(running)
    assert (running.st.phase, running.st.start_time) == (Phase.RUNNING, EARLIER)
    assert running.d.events == [] and running.st.conditions == []
