"""policies/deadline."""

from datetime import timedelta

from etj.core.reconcile.policies.deadline import deadline_exceeded, seconds_to_deadline
from tests.unit.reconcile_helpers import T0


def test_deadline():
    assert not deadline_exceeded(T0, 60, T0 + timedelta(seconds=59))
    assert deadline_exceeded(T0, 60, T0 + timedelta(seconds=60))
    assert not deadline_exceeded(None, 60, T0) and not deadline_exceeded(T0, None, T0)
    assert seconds_to_deadline(T0, 60, T0 + timedelta(seconds=15)) == 45
