"""etj.core.reconcile.policies.recovery: a restarted replica's back-off entry, and failure
counts forgotten once a replica has run cleanly for resetAfterSeconds."""

from __future__ import annotations

from datetime import timedelta

from etj.api.roles import Role
from etj.core.reconcile.policies.pass_state import _Pass
from etj.core.reconcile.policies.recovery import _forget_recovered, _restarted
from tests.unit.etj.core.reconcile.policies.test_pass_state import _world
from tests.unit.reconcile_helpers import T0, later, make_job, pod

DUE = "2026-11-22T12:00:10Z"
RESET = 600  # runPolicy.restartBackoff.resetAfterSeconds


def _job(backoff: dict):
    return make_job(
        runPolicy={"restartBackoff": {"resetAfterSeconds": RESET}},
        status={"phase": "Running", "restartBackoff": backoff},
    )


def test_a_restarted_replica_keeps_its_count_and_loses_its_due_time():
    p = _Pass(_world(_job({"j-worker-0": {"failures": 2, "nextRestartTime": DUE}})))
    _restarted(p, "j-worker-0")
    _restarted(p, "j-worker-9")  # no entry: nothing to do
    entry = p.done().status.restart_backoff["j-worker-0"]
    assert (entry.failures, entry.next_restart_time) == (2, None)


def test_a_restarted_replica_without_failures_has_no_entry_left():
    p = _Pass(_world(_job({"j-ps-0": {"nextRestartTime": DUE}})))
    _restarted(p, "j-ps-0")
    assert p.done().status.restart_backoff == {}


def test_a_replica_that_ran_cleanly_long_enough_is_forgotten():
    started = T0 - timedelta(seconds=RESET + 1)
    pods = [pod(Role.WORKER, 0, started_at=started)]
    p = _Pass(_world(_job({"j-worker-0": {"failures": 3}}), pods=pods))
    _forget_recovered(p)
    assert p.done().status.restart_backoff == {}


def test_a_replica_still_within_the_reset_time_is_kept_and_the_pass_requeued_for_it():
    pods = [pod(Role.WORKER, 0, started_at=T0 - timedelta(seconds=100))]
    p = _Pass(_world(_job({"j-worker-0": {"failures": 3}}), pods=pods))
    _forget_recovered(p)
    d = p.done()
    assert d.status.restart_backoff["j-worker-0"].failures == 3
    assert d.requeue_after == RESET - 100


def test_waiting_or_absent_replicas_keep_their_entries():
    backoff = {"j-worker-0": {"failures": 1, "nextRestartTime": DUE}, "j-worker-1": {"failures": 1}}
    pods = [pod(Role.WORKER, 0, started_at=T0 - timedelta(seconds=RESET * 2))]
    p = _Pass(_world(_job(backoff), pods=pods, now=later(0)))
    _forget_recovered(p)
    assert set(p.done().status.restart_backoff) == {"j-worker-0", "j-worker-1"}
