"""controller/leader: one holder of the Lease at a time, takeover after the lease duration
(a clock we control), resourceVersion guards against two winners, a lost Lease ends the
leader. The Lease store is an in-memory stand-in with the API server's optimistic
concurrency (a replace at a stale resourceVersion is a conflict)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest

from etj.controller.leader import LeaderElector, LeaseView, Timing, lease_spec

NOW = datetime(2026, 11, 24, 1, 0, tzinfo=UTC)


class FakeLeases:
    def __init__(self) -> None:
        self.lease: dict[str, Any] | None = None
        self.version = 0
        self.writes = 0

    def _store(self, spec: dict[str, Any]) -> None:
        self.version += 1
        self.writes += 1
        self.lease = {"metadata": {"resourceVersion": str(self.version)}, "spec": dict(spec)}

    async def get_lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        return None if self.lease is None else {k: dict(v) for k, v in self.lease.items()}

    async def create_lease(self, namespace: str, name: str, spec: dict[str, Any]) -> bool:
        if self.lease is not None:
            return False
        self._store(spec)
        return True

    async def replace_lease(
        self, namespace: str, name: str, spec: dict[str, Any], resource_version: str
    ) -> bool:
        assert self.lease is not None
        if self.lease["metadata"]["resourceVersion"] != resource_version:
            return False
        self._store(spec)
        return True


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def elector(store: FakeLeases, clock: Clock, identity: str, lost: list[str]) -> LeaderElector:
    return LeaderElector(
        store,  # type: ignore[arg-type]
        "etj-system",
        "etj",
        identity=identity,
        on_lost=lambda: lost.append(identity),
        clock=clock,
    )


def test_one_holder_and_a_takeover_after_the_lease_duration():
    store, clock, lost = FakeLeases(), Clock(), []
    a, b = elector(store, clock, "a", lost), elector(store, clock, "b", lost)

    async def scenario() -> None:
        assert await a.try_take()
        assert not await b.try_take()
        for _ in range(10):  # a renews every 2 s: b never may take it
            clock.t += 2
            assert await a.try_take()
            assert not await b.try_take()
        # a is SIGKILLed: no more renewals. b counts the lease on its own clock from the
        # last change it saw, so it waits the whole 15 s.
        clock.t += 14
        assert not await b.try_take()
        clock.t += 2
        assert await b.try_take()
        assert store.lease is not None and store.lease["spec"]["holderIdentity"] == "b"
        assert store.lease["spec"]["leaseTransitions"] == 1

    asyncio.run(scenario())


def test_of_two_candidates_seeing_a_free_lease_only_one_wins():
    store, clock, lost = FakeLeases(), Clock(), []
    store._store({"holderIdentity": None, "leaseDurationSeconds": 1})
    a, b = elector(store, clock, "a", lost), elector(store, clock, "b", lost)

    async def both() -> list[bool]:
        # Both read the same resourceVersion before either writes.
        lease = await store.get_lease("etj-system", "etj")
        a.view.observe(lease, clock())
        b.view.observe(lease, clock())
        spec_a = lease_spec(lease["spec"], "a", Timing(), NOW)  # type: ignore[index]
        spec_b = lease_spec(lease["spec"], "b", Timing(), NOW)  # type: ignore[index]
        version = lease["metadata"]["resourceVersion"]  # type: ignore[index]
        return [
            await store.replace_lease("etj-system", "etj", spec_a, version),
            await store.replace_lease("etj-system", "etj", spec_b, version),
        ]

    assert asyncio.run(both()) == [True, False]


def test_a_leader_whose_lease_was_taken_gives_up():
    store, clock, lost = FakeLeases(), Clock(), []
    a = elector(store, clock, "a", lost)

    async def scenario() -> None:
        assert await a.try_take()
        # Someone else holds it now (a was paused past the lease duration).
        store._store({"holderIdentity": "b", "leaseDurationSeconds": 15})
        a.timing = Timing(lease_seconds=0.3, renew_deadline=0.2, retry_seconds=0.01)
        await asyncio.wait_for(a.keep(), 5)

    asyncio.run(scenario())
    assert lost == ["a"]


def test_a_leader_that_cannot_renew_within_the_deadline_gives_up():
    store, clock, lost = FakeLeases(), Clock(), []
    a = elector(store, clock, "a", lost)

    async def failing(*_: Any) -> None:
        clock.t += 1
        raise OSError("API server unreachable")

    async def scenario() -> None:
        assert await a.try_take()
        store.get_lease = failing  # type: ignore[method-assign]
        a.timing = Timing(lease_seconds=15, renew_deadline=10, retry_seconds=0.001)
        await asyncio.wait_for(a.keep(), 5)

    asyncio.run(scenario())
    assert lost == ["a"] and clock.t - 1000.0 > 10


def test_release_frees_the_lease_for_the_standby_at_once():
    store, clock, lost = FakeLeases(), Clock(), []
    a, b = elector(store, clock, "a", lost), elector(store, clock, "b", lost)

    async def scenario() -> None:
        ran = []

        async def operator() -> None:
            ran.append(True)

        await a.run(operator)
        assert ran == [True]
        assert await b.try_take()  # no wait for the lease duration

    asyncio.run(scenario())


def test_lease_spec_keeps_the_acquire_time_while_renewing():
    first = lease_spec(None, "a", Timing(), NOW)
    assert first["renewTime"] == "2026-11-24T01:00:00.000000Z"
    assert first["leaseTransitions"] == 0 and first["leaseDurationSeconds"] == 15
    later = NOW.replace(second=4)
    renewed = lease_spec(
        {**first, "acquireTime": "2026-11-24T01:00:00+00:00"}, "a", Timing(), later
    )
    assert renewed["acquireTime"] == first["acquireTime"]
    assert renewed["renewTime"] == "2026-11-24T01:00:04.000000Z"
    taken = lease_spec(renewed, "b", Timing(), later)
    assert taken["acquireTime"] == taken["renewTime"] and taken["leaseTransitions"] == 1


def test_timing_must_leave_a_margin_before_the_standby_may_take_over():
    with pytest.raises(ValueError, match="renew deadline"):
        Timing(lease_seconds=10, renew_deadline=10, retry_seconds=2)


def test_a_view_counts_from_the_last_change_it_saw():
    view = LeaseView()
    record = {"metadata": {"resourceVersion": "7"}, "spec": {"holderIdentity": "a"}}
    view.observe({**record, "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}}, 0.0)
    view.observe({**record, "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}}, 10.0)
    assert view.observed_at == 0.0  # the same resourceVersion: not a renewal
    assert not view.may_take("b", 15.0) and view.may_take("b", 15.5) and view.may_take("a", 1.0)
