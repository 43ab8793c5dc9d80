"""policies/deadline: the arithmetic, and the two steps of a pass built on it."""

from datetime import timedelta

from etj.api.reasons import REASON_DEADLINE_EXCEEDED
from etj.api.status import Phase
from etj.core.reconcile.policies.deadline import (
    deadline_exceeded,
    deadline_passed,
    requeue_at_deadline,
    seconds_to_deadline,
)
from etj.core.reconcile.policies.pass_state import _Pass
from tests.unit.etj.core.reconcile.policies.test_pass_state import _world
from tests.unit.reconcile_helpers import T0, later, make_job


def test_deadline():
    assert not deadline_exceeded(T0, 60, T0 + timedelta(seconds=59))
    assert deadline_exceeded(T0, 60, T0 + timedelta(seconds=60))
    assert not deadline_exceeded(None, 60, T0) and not deadline_exceeded(T0, None, T0)
    assert seconds_to_deadline(T0, 60, T0 + timedelta(seconds=15)) == 45


def test_the_deadline_step_fails_a_job_past_its_deadline_and_requeues_one_before():
    job = make_job(
        runPolicy={"activeDeadlineSeconds": 60},
        status={"phase": "Running", "startTime": "2026-11-22T12:00:00Z"},
    )
    early = _Pass(_world(job, now=later(15)))
    assert not deadline_passed(early)
    requeue_at_deadline(early)
    assert early.d.requeue_after == 45 and early.st.phase == Phase.RUNNING
    late = _Pass(_world(job, now=later(60)))
    assert deadline_passed(late)
    assert late.st.phase == Phase.FAILED
    assert [e.reason for e in late.d.events] == [REASON_DEADLINE_EXCEEDED]
