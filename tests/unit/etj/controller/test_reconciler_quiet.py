"""controller/reconciler's quiet passes, with a fake API and a fake clock: a pass that finds
the world as the last pass (which did nothing) left it does not decide again, and what
depends on the time alone still happens when it is due: a replica's back-off, the job's
deadline, a failure count forgotten after resetAfterSeconds, the TTL of a finished job."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest

import etj.controller.reconciler as module
from tests.unit.etj.controller.test_reconciler import NS, Setup, fail_worker_1

START = datetime(2026, 1, 1, 0, 0, 30, tzinfo=UTC)  # the pods' containers started at 00:00


class Clock:
    """The reconciler's wall clock (``datetime.now``) and monotonic clock, moved together."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.wall = START
        self.mono = 1000.0
        clock = self

        class FakeDatetime(datetime):
            @classmethod
            def now(cls, *_: Any) -> Any:  # datetime.now(UTC)
                return clock.wall

        monkeypatch.setattr(module, "datetime", FakeDatetime)
        monkeypatch.setattr(module, "time", SimpleNamespace(monotonic=lambda: clock.mono))

    def advance(self, seconds: float) -> None:
        self.wall += timedelta(seconds=seconds)
        self.mono += seconds


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    return Clock(monkeypatch)


@pytest.fixture
def decided(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The worlds ``decide`` was called with."""
    worlds: list[Any] = []
    real = module.decide

    def counting(world: Any) -> Any:
        worlds.append(world)
        return real(world)

    monkeypatch.setattr(module, "decide", counting)
    return worlds


def status(s: Setup) -> dict[str, Any]:
    return dict(s.api.jobs[(NS, "ctr")]["status"])


def until_quiet(s: Setup) -> None:
    """Passes until one does nothing (the next one then finds an unchanged world)."""
    for _ in range(5):
        before = len(s.api.log)
        s.run()
        if s.api.log[before:] == []:
            return
    raise AssertionError(f"no pass did nothing: {s.api.log[-10:]}")


def running(s: Setup) -> None:
    s.run()
    s.run_all_pods()
    until_quiet(s)


def watch_deleted(s: Setup, name: str) -> None:
    """The watch's DELETED event of a pod the operator deleted."""
    assert s.cache is not None
    pod = next(p for p in s.cache.job_pods(NS, "ctr") if p["metadata"]["name"] == name)
    s.cache.on_pod_event("DELETED", pod)


def test_an_unchanged_world_is_not_decided_again_and_a_change_is(clock, decided):
    s = Setup()
    running(s)
    n = len(decided)
    for _ in range(3):  # the timed pass and the resync's wake-ups
        clock.advance(10)
        outcome = s.run()
        assert outcome.unchanged
        # Still a pass every progress_seconds while the job runs.
        assert outcome.requeue_after == s.reconciler.settings.progress_seconds
    assert len(decided) == n
    fail_worker_1(s)
    outcome = s.run()
    assert not outcome.unchanged and len(decided) == n + 1
    assert status(s)["restarts"] == 1
    assert ("delete", "Pod", "ctr-worker-1") in s.api.log


def test_a_replica_in_back_off_is_recreated_when_due_on_an_unchanged_world(clock, decided):
    s = Setup(restartBackoff={"initialSeconds": 20})
    running(s)
    fail_worker_1(s)
    s.run()  # the restart: status (back-off until now + 20 s), delete
    watch_deleted(s, "ctr-worker-1")
    until_quiet(s)
    assert status(s)["restartBackoff"]["ctr-worker-1"]["nextRestartTime"]
    n = len(decided)
    clock.advance(15)
    outcome = s.run()
    assert outcome.unchanged and len(decided) == n
    assert outcome.requeue_after is not None and outcome.requeue_after <= 5
    clock.advance(6)  # past the back-off: nothing else changed
    before = len(s.api.log)
    outcome = s.run()
    assert not outcome.unchanged
    assert ("create", "Pod", "ctr-worker-1") in s.api.log[before:]


def test_the_deadline_fails_an_unchanged_job_when_it_passes(clock):
    s = Setup(activeDeadlineSeconds=60)
    running(s)
    assert status(s)["phase"] == "Running"
    clock.advance(30)
    assert s.run().unchanged
    clock.advance(31)
    s.run()
    assert status(s)["phase"] == "Failed"
    assert any(c["reason"] == "DeadlineExceeded" for c in status(s)["conditions"])


def test_a_failure_count_is_forgotten_after_reset_after_seconds_on_an_unchanged_world(clock):
    s = Setup(restartBackoff={"initialSeconds": 0, "resetAfterSeconds": 120})
    running(s)
    fail_worker_1(s)  # it ran 30 s: a counted failure, restarted at once
    s.run()
    watch_deleted(s, "ctr-worker-1")
    s.run()  # recreated
    clock.advance(10)  # 00:00:40: the new pod starts
    started = clock.wall.strftime("%Y-%m-%dT%H:%M:%SZ")
    s.api.set_pod_status(
        NS,
        "ctr-worker-1",
        {
            "phase": "Running",
            "containerStatuses": [
                {"name": "trainer", "state": {"running": {"startedAt": started}}}
            ],
        },
    )
    s.watch_pods()
    until_quiet(s)
    assert status(s)["restartBackoff"]["ctr-worker-1"]["failures"] == 1
    clock.advance(100)
    assert s.run().unchanged
    assert "ctr-worker-1" in status(s)["restartBackoff"]
    clock.advance(25)  # it has run 125 s cleanly (resetAfterSeconds 120)
    assert not s.run().unchanged
    assert "ctr-worker-1" not in (status(s).get("restartBackoff") or {})


def test_a_finished_job_is_deleted_when_its_ttl_passes_on_an_unchanged_world(clock):
    s = Setup(ttlSecondsAfterFinished=60)
    running(s)
    s.api.set_pod_status(NS, "ctr-chief-0", {"phase": "Succeeded"})
    s.watch_pods()
    until_quiet(s)
    assert status(s)["phase"] == "Succeeded"
    clock.advance(30)
    outcome = s.run()
    assert outcome.unchanged and outcome.finished
    assert outcome.requeue_after is not None and outcome.requeue_after <= 30
    clock.advance(31)
    s.run()
    assert ("delete", "job", "ctr") in s.api.log


def test_without_a_cache_every_pass_decides(clock, decided):
    s = Setup(cached=False)
    s.run()
    n = len(decided)
    s.run()
    s.run()
    assert len(decided) == n + 2


def test_a_pass_that_only_wrote_the_status_says_so(clock):
    s = Setup()
    assert not s.run().only_status  # pods created, an Event
    s.watch_pods()
    s.api.set_pod_status(NS, "ctr-ps-0", {"phase": "Running"})  # one of them runs
    s.watch_pods()
    before = len(s.api.log)
    outcome = s.run()
    assert s.api.log[before:] == [("patch", "status", "ctr")]
    assert outcome.only_status
    fail_worker_1(s)
    assert not s.run().only_status  # the restart: a delete and an Event besides
