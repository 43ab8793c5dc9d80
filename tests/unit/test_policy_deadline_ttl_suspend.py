"""policies/deadline, policies/ttl, policies/suspend."""

from datetime import timedelta

from etj.core.reconcile.policies.deadline import deadline_exceeded, seconds_to_deadline
from etj.core.reconcile.policies.suspend import pods_to_suspend
from etj.core.reconcile.policies.ttl import seconds_to_expiry, ttl_expired

from .reconcile_helpers import T0, pod


def test_deadline():
    assert not deadline_exceeded(T0, 60, T0 + timedelta(seconds=59))
    assert deadline_exceeded(T0, 60, T0 + timedelta(seconds=60))
    assert not deadline_exceeded(None, 60, T0) and not deadline_exceeded(T0, None, T0)
    assert seconds_to_deadline(T0, 60, T0 + timedelta(seconds=15)) == 45


def test_ttl():
    assert not ttl_expired(T0, 10, T0 + timedelta(seconds=9))
    assert ttl_expired(T0, 0, T0)
    assert seconds_to_expiry(T0, 10, T0 + timedelta(seconds=4)) == 6
    assert seconds_to_expiry(None, 10, T0) is None


def test_suspend_deletes_every_pod_not_already_going():
    pods = [pod("worker", 0), pod("worker", 1, terminating=True), pod("ps", 0, "Failed")]
    assert pods_to_suspend(pods) == ["j-ps-0", "j-worker-0"]
