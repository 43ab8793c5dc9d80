"""policies/oom: the memory limit grows by half, rounded to MiB, up to the cap."""

from etj.core.reconcile.policies.oom import raised_limit

GI = 2**30


def test_grows_by_half():
    assert raised_limit(2 * GI, 8 * GI) == 3 * GI


def test_capped():
    assert raised_limit(6 * GI, 8 * GI) == 8 * GI


def test_at_cap_or_without_limit_cannot_grow():
    assert raised_limit(8 * GI, 8 * GI) is None
    assert raised_limit(None, 8 * GI) is None


def test_rounds_up_to_mib():
    assert raised_limit(1000, GI) == 2**20
