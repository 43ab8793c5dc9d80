"""policies/suspend."""

from etj.core.reconcile.policies.suspend import pods_to_suspend
from tests.unit.reconcile_helpers import pod


def test_suspend_deletes_every_pod_not_already_going():
    pods = [pod("worker", 0), pod("worker", 1, terminating=True), pod("ps", 0, "Failed")]
    assert pods_to_suspend(pods) == ["j-ps-0", "j-worker-0"]
