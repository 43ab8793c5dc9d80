"""activeDeadlineSeconds: a job running longer fails. Pure.

``start`` is ``status.startTime``: the job's first start, or its last resume (see
policies/suspend), so suspended time does not count. ``deadline_passed`` and
``requeue_at_deadline`` are the steps of a pass (``decide``) built on the two functions.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from etj.api.reasons import REASON_DEADLINE_EXCEEDED
from etj.api.roles import ReplicaSet
from etj.api.status import Phase
from etj.core.reconcile.decision import parse_time
from etj.core.reconcile.policies.pass_state import _Pass


def deadline_exceeded(start: datetime | None, seconds: int | None, now: datetime) -> bool:
    return start is not None and seconds is not None and now >= start + timedelta(seconds=seconds)


def seconds_to_deadline(start: datetime | None, seconds: int | None, now: datetime) -> float | None:
    if start is None or seconds is None:
        return None
    return max(0.0, (start + timedelta(seconds=seconds) - now).total_seconds())


def deadline_passed(p: _Pass, replicas: ReplicaSet | None = None) -> bool:
    """The step of a pass: True when the job ran past its deadline (it failed)."""
    seconds = p.job.spec.run_policy.active_deadline_seconds
    if not deadline_exceeded(parse_time(p.st.start_time), seconds, p.w.now):
        return False
    p.finish(
        Phase.FAILED,
        REASON_DEADLINE_EXCEEDED,
        f"the job ran longer than activeDeadlineSeconds ({seconds})",
    )
    return True


def requeue_at_deadline(p: _Pass) -> None:
    """The last step of a pass that leaves the job running: come back at its deadline."""
    seconds = p.job.spec.run_policy.active_deadline_seconds
    p.requeue(seconds_to_deadline(parse_time(p.st.start_time), seconds, p.w.now))
