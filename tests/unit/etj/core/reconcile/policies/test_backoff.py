"""policies/backoff: a crash-looping replica waits 10 s, 20 s, 40 s ... (a clock we control)."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from etj.api.spec import RestartBackoff
from etj.api.status import ReplicaBackoff
from etj.core.reconcile.policies.backoff import (
    Wait,
    delay_seconds,
    due_time,
    replaced_at_once,
    restart_wait,
    seconds_to_recovery,
    waiting_seconds,
)
from tests.unit.reconcile_helpers import T0, all_pods, later, make_job, pod, run, with_status

DEFAULT = RestartBackoff()


def test_delays_double_from_ten_seconds_up_to_the_cap():
    assert [delay_seconds(n, DEFAULT) for n in range(1, 9)] == [
        10,
        20,
        40,
        80,
        160,
        300,
        300,
        300,
    ]
    assert delay_seconds(10_000, DEFAULT) == 300  # no overflow for a long crash loop
    assert delay_seconds(3, RestartBackoff(initialSeconds=0)) == 0
    assert delay_seconds(4, RestartBackoff(initialSeconds=1, maxSeconds=5)) == 5


def test_a_replica_that_ran_cleanly_long_enough_counts_from_one_again():
    crashed = pod("chief", 0, "Failed", exit_code=1, started_at=T0, finished_at=later(599))
    previous = ReplicaBackoff(failures=4)
    assert restart_wait(crashed, previous, "ParameterServer", DEFAULT, later(600)) == Wait(5, 160)
    ran_long = pod("chief", 0, "Failed", exit_code=1, started_at=T0, finished_at=later(600))
    assert restart_wait(ran_long, previous, "ParameterServer", DEFAULT, later(600)).failures == 1
    # Nothing known of how long it ran: the count goes on.
    unknown = pod("chief", 0, "Failed", exit_code=1)
    assert restart_wait(unknown, previous, "ParameterServer", DEFAULT, T0).failures == 5


@pytest.mark.parametrize(
    ("strategy", "role", "kw", "at_once"),
    [
        ("ParameterServer", "worker", {"terminating": True}, True),
        ("ParameterServer", "worker", {"phase": "Failed", "reason": "Evicted"}, True),
        ("ParameterServer", "worker", {"phase": "Failed", "exit_code": 137}, False),
        ("ParameterServer", "chief", {"terminating": True}, False),
        ("ParameterServer", "ps", {"phase": "Failed", "reason": "Evicted"}, False),
        ("MultiWorkerMirrored", "worker", {"terminating": True}, False),
    ],
)
def test_only_a_preempted_parameter_server_worker_is_replaced_at_once(strategy, role, kw, at_once):
    p = pod(role, 0, **{"phase": "Running", **kw})
    assert replaced_at_once(strategy, p) is at_once
    w = restart_wait(p, ReplicaBackoff(failures=2), strategy, DEFAULT, T0)
    assert (w.seconds == 0) is at_once
    assert w.failures == (2 if at_once else 3)  # a preemption is not a failure of the replica


def test_due_time_rounds_up_to_a_whole_second():
    assert due_time(T0 + timedelta(microseconds=300_000), 10) == later(11)
    assert due_time(T0, 10) == later(10)
    entry = ReplicaBackoff(failures=1, next_restart_time="2026-11-22T12:00:10Z")
    assert waiting_seconds(entry, later(4)) == 6
    assert waiting_seconds(entry, later(11)) == 0
    assert waiting_seconds(None, T0) == 0


def test_seconds_to_recovery_counts_down_while_the_replica_runs():
    running = pod("worker", 1, started_at=T0)
    assert seconds_to_recovery(running, DEFAULT, later(100)) == 500
    assert seconds_to_recovery(running, DEFAULT, later(700)) == 0
    assert seconds_to_recovery(pod("worker", 1, "Pending"), DEFAULT, later(100)) is None
    assert seconds_to_recovery(pod("worker", 1), DEFAULT, later(100)) is None  # start unknown


def _crash(t: datetime, started: datetime, job):
    """The worker crashed at ``t`` after running since ``started``; the first pass."""
    pods = [
        p
        if p.key != ("worker", 1)
        else pod("worker", 1, "Failed", exit_code=1, started_at=started, finished_at=t)
        for p in all_pods(job)
    ]
    return run(job, pods, now=t)


def test_a_crash_looping_worker_is_retried_at_10_20_40_seconds_and_the_events_say_so():
    job = make_job(
        status={"phase": "Running", "startTime": "2026-11-22T12:00:00Z"},
        runPolicy={"backoffLimit": 10},
    )
    without = [p for p in all_pods(job) if p.key != ("worker", 1)]
    t, started = later(30), T0
    for expected in (10, 20, 40, 80):
        d = _crash(t, started, job)
        assert d.delete_pods == ["j-worker-1"] and d.create_pods == []
        due = t + timedelta(seconds=expected)
        (event,) = [e for e in d.events if e.reason == "Restarting"]
        assert f"restarting j-worker-1 in {expected}s, at {due:%Y-%m-%dT%H:%M:%SZ}" in event.message
        restarting = next(c for c in d.status.conditions if c.type == "Restarting")
        assert restarting.status == "True" and f"{due:%H:%M:%S}" in restarting.message
        job = with_status(job, d)  # what the API server holds: an operator restart reads it
        # The old pod is gone; before the back-off is over, nothing is created and the pass
        # asks to come back when it is due.
        early = run(job, without, now=due - timedelta(seconds=1))
        assert early.create_pods == [] and early.requeue_after == 1
        assert early.status.phase == "Restarting"
        job = with_status(job, early)
        on_time = run(job, without, now=due)
        assert on_time.create_pods == [("worker", 1)]
        assert on_time.status.restart_backoff["j-worker-1"].next_restart_time is None
        job = with_status(job, on_time)
        # The new pod runs for 5 s, then crashes again.
        started, t = due + timedelta(seconds=1), due + timedelta(seconds=6)
    assert job.status.restarts == 4
    assert job.status.restart_backoff["j-worker-1"].failures == 4


def test_a_replica_that_then_runs_cleanly_is_forgotten_and_restarts_after_10_seconds_again():
    job = make_job(
        status={
            "phase": "Running",
            "startTime": "2026-11-22T12:00:00Z",
            "restartBackoff": {"j-worker-1": {"failures": 3}},
        }
    )
    running = [
        p if p.key != ("worker", 1) else pod("worker", 1, started_at=T0) for p in all_pods(job)
    ]
    assert "j-worker-1" in run(job, running, now=later(599)).status.restart_backoff
    assert run(job, running, now=later(600)).status.restart_backoff == {}
    # Only the time changes it: the decision asks to come back when the count goes (the
    # operator decides again on an unchanged world only when a requeue is due).
    assert run(job, running, now=later(590)).requeue_after == 10
    # Not while the replica is not running: no time alone can make it recover.
    pending = [p if p.key != ("worker", 1) else pod("worker", 1, "Pending") for p in running]
    assert run(job, pending, now=later(590)).requeue_after is None
    d = _crash(later(700), T0, job)
    assert "in 10s" in next(e.message for e in d.events if e.reason == "Restarting")


def test_a_preempted_ps_worker_comes_back_in_the_same_pass_as_its_deletion_is_seen():
    job = make_job(status={"phase": "Running", "startTime": "2026-11-22T12:00:00Z"})
    deleted = [
        p if p.key != ("worker", 0) else pod("worker", 0, terminating=True) for p in all_pods(job)
    ]
    d = run(job, deleted, now=T0)
    assert d.status.restarts == 1 and d.status.restart_backoff == {}
    (event,) = [e for e in d.events if e.reason == "Restarting"]
    assert "j-worker-0 was deleted; restarting j-worker-0 (restart 1" in event.message
    gone = [p for p in all_pods(job) if p.key != ("worker", 0)]
    assert run(with_status(job, d), gone, now=T0).create_pods == [("worker", 0)]


def test_a_ps_and_the_chief_wait_together():
    job = make_job(status={"phase": "Running", "startTime": "2026-11-22T12:00:00Z"})
    failed = [
        p if p.key != ("ps", 1) else pod("ps", 1, "Failed", exit_code=137) for p in all_pods(job)
    ]
    d = run(job, failed, now=T0)
    assert {n: e.next_restart_time for n, e in d.status.restart_backoff.items()} == {
        "j-chief-0": "2026-11-22T12:00:10Z",
        "j-ps-1": "2026-11-22T12:00:10Z",
        "j-worker-0": "2026-11-22T12:00:10Z",
        "j-worker-1": "2026-11-22T12:00:10Z",
    }
    assert d.status.restart_backoff["j-chief-0"].failures == 0  # it did not fail
    group = (("ps", 1), ("chief", 0), ("worker", 0), ("worker", 1))
    rest = [p for p in all_pods(job) if p.key not in group]
    assert run(with_status(job, d), rest, now=later(9)).create_pods == []
    assert sorted(run(with_status(job, d), rest, now=later(10)).create_pods) == sorted(group)
