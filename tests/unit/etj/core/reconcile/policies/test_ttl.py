"""policies/ttl."""

from datetime import timedelta

from etj.core.reconcile.policies.ttl import seconds_to_expiry, ttl_expired
from tests.unit.reconcile_helpers import T0


def test_ttl():
    assert not ttl_expired(T0, 10, T0 + timedelta(seconds=9))
    assert ttl_expired(T0, 0, T0)
    assert seconds_to_expiry(T0, 10, T0 + timedelta(seconds=4)) == 6
    assert seconds_to_expiry(None, 10, T0) is None
