"""The job daemon's loop (etj.controller.handlers.job_loop) as kopf drives it on a deletion:
kopf sets ``stopped`` and cancels the daemon at once, in whatever pass it is."""

from __future__ import annotations

import asyncio
import logging
import time
from types import SimpleNamespace
from typing import Any

import kopf
import pytest
from kopf._cogs.aiokits.aioenums import AsyncFlagWaiter, FlagSetter

from etj.controller import handlers
from etj.controller.cache import WatchCache
from etj.controller.handlers import (
    RELIST_PERIODS,
    _resync_forever,
    job_loop,
    resync,
    watch_pods,
)
from etj.controller.kube import WatchExpired
from etj.controller.reconciler import Outcome
from etj_testcluster.waiting import wait_for


class SlowReconciler:
    """The first pass hangs (a slow API); every later pass takes a few awaits and is counted
    as finished only when it got to its end."""

    def __init__(self) -> None:
        self.calls = 0
        self.finished = 0
        self.in_first_pass = asyncio.Event()
        self.forgotten: list[tuple[str, str]] = []

    def forget(self, namespace: str, name: str) -> None:
        self.forgotten.append((namespace, name))

    async def reconcile(self, namespace: str, name: str) -> Outcome:
        self.calls += 1
        if self.calls == 1:
            self.in_first_pass.set()
            await asyncio.Event().wait()  # never set: kopf's cancel ends it
        for _ in range(5):
            await asyncio.sleep(0)
        self.finished += 1
        return Outcome()


def _memo(reconciler: SlowReconciler) -> Any:
    return SimpleNamespace(
        reconciler=reconciler,
        settings=SimpleNamespace(resync_seconds=30),
        wakeups={},
        last_passes=set(),
    )


def _start_loop(memo: Any) -> tuple[FlagSetter[kopf.DaemonStoppingReason], Any]:
    """A job's loop as kopf runs it (in a task, with a stop flag its setter raises)."""
    setter: FlagSetter[kopf.DaemonStoppingReason] = FlagSetter()
    daemon = asyncio.create_task(
        job_loop(  # type: ignore[call-arg]
            namespace="ns",
            name="job",
            stopped=AsyncFlagWaiter(setter),
            memo=memo,
            logger=logging.getLogger("test"),
        )
    )
    return setter, daemon


async def _run(reason: kopf.DaemonStoppingReason) -> tuple[SlowReconciler, Any]:
    reconciler = SlowReconciler()
    memo = _memo(reconciler)
    setter, daemon = _start_loop(memo)
    await asyncio.wait_for(reconciler.in_first_pass.wait(), 5)
    # What kopf's stop_daemons does for a daemon without cancellation_backoff.
    setter.set(reason=reason)
    daemon.cancel()
    with pytest.raises(asyncio.CancelledError):
        await daemon
    if memo.last_passes:
        await asyncio.wait_for(asyncio.gather(*memo.last_passes), 5)
    return reconciler, memo


def test_a_deleted_jobs_last_pass_runs_to_its_end_though_kopf_cancels_the_daemon() -> None:
    reconciler, memo = asyncio.run(_run(kopf.DaemonStoppingReason.RESOURCE_DELETED))
    assert reconciler.calls == 2
    assert reconciler.finished == 1  # the last pass, not the cancelled first one
    assert memo.wakeups == {} and memo.last_passes == set()
    assert reconciler.forgotten == [("ns", "job")]  # once, after the last pass


def test_an_exiting_operator_makes_no_last_pass() -> None:
    reconciler, memo = asyncio.run(_run(kopf.DaemonStoppingReason.OPERATOR_EXITING))
    assert reconciler.calls == 1 and reconciler.finished == 0
    assert memo.wakeups == {}


class TimedReconciler:
    """Each pass is timed (start, end) and ends with the given outcome."""

    def __init__(self, outcome: Outcome) -> None:
        self.outcome = outcome
        self.passes: list[tuple[float, float]] = []

    def forget(self, namespace: str, name: str) -> None:
        pass

    async def reconcile(self, namespace: str, name: str) -> Outcome:
        started = time.monotonic()
        await asyncio.sleep(0)
        self.passes.append((started, time.monotonic()))
        return self.outcome


async def _woken_three_times(outcome: Outcome) -> TimedReconciler:
    """A job's loop woken three times, 20 ms apart, right after its first pass; the loop
    is stopped once a second pass ran. The waits poll from a thread (``wait_for``) while
    the loop runs here."""
    reconciler = TimedReconciler(outcome)
    memo = _memo(reconciler)  # type: ignore[arg-type]
    setter, daemon = _start_loop(memo)
    await asyncio.to_thread(wait_for, lambda: reconciler.passes, 120, "the first pass", 0.001)
    for _ in range(3):  # the job's pods change one after another
        memo.wakeups[("ns", "job")].set()
        await asyncio.sleep(0.02)
    await asyncio.to_thread(
        wait_for, lambda: len(reconciler.passes) >= 2, 120, "a second pass", 0.001
    )
    await asyncio.sleep(0.05)  # a third pass would start at once
    setter.set(reason=kopf.DaemonStoppingReason.OPERATOR_EXITING)
    daemon.cancel()
    with pytest.raises(asyncio.CancelledError):
        await daemon
    return reconciler


def test_changes_right_after_a_status_only_pass_gather_into_one_pass(monkeypatch) -> None:
    monkeypatch.setattr(handlers, "PASS_GAP_SECONDS", 0.3)
    reconciler = asyncio.run(_woken_three_times(Outcome(only_status=True)))
    assert len(reconciler.passes) == 2
    (_, first_end), (second_start, _) = reconciler.passes
    assert second_start - first_end >= 0.3


def test_a_change_right_after_a_pass_that_acted_is_handled_at_once(monkeypatch) -> None:
    # A gap the test would notice: a pod deleted by the pass is replaced as soon as its
    # deletion is seen.
    monkeypatch.setattr(handlers, "PASS_GAP_SECONDS", 5.0)
    reconciler = asyncio.run(_woken_three_times(Outcome(only_status=False)))
    assert len(reconciler.passes) >= 2
    (_, first_end), (second_start, _) = reconciler.passes[:2]
    assert second_start - first_end < 2.0


def _pod(name: str, rv: str, job: str = "j") -> dict[str, Any]:
    labels = {"training.etj.dev/job-name": job}
    return {"metadata": {"namespace": "ns", "name": name, "resourceVersion": rv, "labels": labels}}


class WatchingKube:
    """Each watch opened gets the next script: events, then an exception or the end; the
    versions the watches started from, and the lists of the resyncs, are recorded."""

    def __init__(self, scripts: list[tuple[list[tuple[str, Any]], Exception | None]]) -> None:
        self.scripts = scripts
        self.since: list[str] = []
        self.lists = 0
        self.pods: list[dict[str, Any]] = []

    async def watch_managed_pods(self, namespace: str | None, since: str) -> Any:
        self.since.append(since)
        if not self.scripts:
            await asyncio.Event().wait()  # an open watch with nothing to say
        events, end = self.scripts.pop(0)
        for event in events:
            yield event
        if end is not None:
            raise end

    async def list_jobs(self, namespace: str | None, keep: Any = None) -> Any:
        return [], "100"

    async def list_managed_pods(self, namespace: str | None, keep: Any = None) -> Any:
        self.lists += 1
        return list(self.pods), str(100 * self.lists)


def test_the_pod_watch_feeds_the_cache_wakes_its_job_and_takes_up_where_it_ended() -> None:
    kube = WatchingKube(
        [
            (
                [
                    ("ADDED", _pod("j-chief-0", "101")),
                    ("BOOKMARK", {"metadata": {"resourceVersion": "103"}}),
                ],
                None,
            ),
            ([("MODIFIED", _pod("j-chief-0", "104"))], ConnectionError("the API is away")),
            ([("ADDED", _pod("k-chief-0", "105", job="k"))], WatchExpired("105")),
        ]
    )
    kube.pods = [_pod("j-chief-0", "104")]  # k-chief-0 was deleted while the watch was away

    async def scenario() -> Any:
        memo = SimpleNamespace(
            reconciler=SimpleNamespace(kube=kube),
            cache=WatchCache(),
            namespaces=["ns"],
            wakeups={("ns", "j"): asyncio.Event()},
            resync_due=asyncio.Event(),
            resynced=asyncio.Event(),
            pods_versions={},
            settings=SimpleNamespace(resync_seconds=30),
        )
        await resync(memo)
        resyncs = asyncio.create_task(_resync_forever(memo))
        watch = asyncio.create_task(watch_pods(memo, "ns"))
        await asyncio.wait_for(memo.wakeups[("ns", "j")].wait(), 120)
        # The fourth watch, after the resync its expiry asked.
        await asyncio.to_thread(wait_for, lambda: len(kube.since) >= 4, 120, "a fourth watch", 0.01)
        watch.cancel()
        resyncs.cancel()
        return memo

    memo = asyncio.run(asyncio.wait_for(scenario(), 300))
    # From the first resync's version; after the API went away, from the last version
    # seen (a bookmark's included); after the expiry, from the new resync's.
    assert kube.since == ["100", "103", "104", "200"]
    assert kube.lists == 2
    assert [p["metadata"]["name"] for p in memo.cache.job_pods("ns", "j")] == ["j-chief-0"]
    assert memo.cache.job_pods("ns", "k") == []  # dropped by the resync


class FlakyLists(WatchingKube):
    """Lists the pods; the lists it is told to fail raise (the API is away)."""

    def __init__(self, failing: set[int]) -> None:
        super().__init__([])
        self.failing = failing

    async def list_managed_pods(self, namespace: str | None, keep: Any = None) -> Any:
        if self.lists + 1 in self.failing:
            self.failing.discard(self.lists + 1)
            raise ConnectionError("the API is away")
        return await super().list_managed_pods(namespace)


def _resync_memo(kube: Any, wake: asyncio.Event, period: float) -> SimpleNamespace:
    """What _resync_forever reads of kopf's memo: one job ("ns", "j") woken by ``wake``."""
    return SimpleNamespace(
        reconciler=SimpleNamespace(kube=kube),
        cache=WatchCache(),
        namespaces=["ns"],
        wakeups={("ns", "j"): wake},
        resync_due=asyncio.Event(),
        resynced=asyncio.Event(),
        pods_versions={},
        settings=SimpleNamespace(resync_seconds=period),
    )


def test_every_period_wakes_every_job_and_a_full_list_is_made_when_asked_or_as_a_backstop():
    kube = FlakyLists(failing={2})
    period = 0.02

    async def scenario() -> tuple[int, int, int]:
        wake = asyncio.Event()
        memo = _resync_memo(kube, wake, period)
        task = asyncio.create_task(_resync_forever(memo))
        wakes = 0
        for _ in range(RELIST_PERIODS - 1):  # periods without a list
            await asyncio.wait_for(wake.wait(), 5)
            wake.clear()
            wakes += 1
        lists_before = kube.lists
        await asyncio.wait_for(wake.wait(), 5)  # the backstop's period
        backstop = kube.lists - lists_before
        wake.clear()
        memo.resync_due.set()  # a watch asks; the list fails once...
        waits = 0
        while kube.lists < 2:
            await asyncio.wait_for(wake.wait(), 5)
            wake.clear()
            waits += 1
        task.cancel()
        return wakes, lists_before, backstop, waits

    wakes, lists_before, backstop, waits = asyncio.run(asyncio.wait_for(scenario(), 20))
    assert (wakes, lists_before, backstop) == (RELIST_PERIODS - 1, 0, 1)
    # ...and the very next period lists again (not the backstop's, periods later).
    assert kube.failing == set() and waits == 1


def test_an_ask_for_a_list_as_the_period_ends_is_not_lost() -> None:
    # The limit of a race a busy machine meets: a watch asks for a list (resync_due) in the
    # instant the period's wait times out. With a period of 0 the wait always times out,
    # whether or not the ask is already there; the ask must still be a list in this
    # period, not be cleared with the timeout and left to the backstop, periods later.
    kube = FlakyLists(failing=set())

    async def scenario() -> int:
        wake = asyncio.Event()
        memo = _resync_memo(kube, wake, 0.0)
        memo.resync_due.set()
        task = asyncio.create_task(_resync_forever(memo))
        await asyncio.wait_for(wake.wait(), 30)  # the first period's end
        task.cancel()
        return kube.lists

    assert asyncio.run(scenario()) == 1


def test_a_watch_that_ends_as_soon_as_it_begins_is_not_opened_again_in_a_spin() -> None:
    kube = WatchingKube([([], None)] * 1000)

    async def scenario() -> None:
        memo = SimpleNamespace(
            reconciler=SimpleNamespace(kube=kube), pods_versions={"ns": "1"}, wakeups={}
        )
        watch = asyncio.create_task(watch_pods(memo, "ns"))
        await asyncio.sleep(1.5)  # the span over which the openings are counted
        watch.cancel()

    asyncio.run(scenario())
    assert 1 <= len(kube.since) <= 3  # 1 s, then 2 s apart


def test_a_jobs_managed_fields_are_dropped_from_the_body_kopf_keeps_and_the_cache_shares_it():
    obj = {
        "metadata": {
            "namespace": "ns",
            "name": "job",
            "resourceVersion": "7",
            "managedFields": [{"manager": "etj", "fieldsV1": {"f:status": {"f:phase": {}}}}],
        },
        "status": {"phase": "Running"},
    }
    event = {"type": "MODIFIED", "object": obj}  # kopf's raw event: its body is this dict
    memo = SimpleNamespace(cache=WatchCache(), wakeups={}, resync_due=asyncio.Event())
    asyncio.run(handlers.job_changed(event=event, namespace="ns", name="job", memo=memo))
    assert "managedFields" not in obj["metadata"]
    assert memo.cache.job("ns", "job") is obj  # one copy, not two


def test_a_resync_gives_the_heaps_free_pages_back(monkeypatch) -> None:
    trims: list[int] = []
    monkeypatch.setattr(handlers, "MALLOC_TRIM", lambda pad: trims.append(pad) or 1)
    kube = WatchingKube([])
    kube.pods = [_pod("j-chief-0", "101")]
    memo = SimpleNamespace(
        reconciler=SimpleNamespace(kube=kube),
        cache=WatchCache(),
        namespaces=["ns"],
        resynced=asyncio.Event(),
        pods_versions={},
    )
    asyncio.run(resync(memo))  # type: ignore[arg-type]
    assert trims == [0] and memo.cache.job_pods("ns", "j")


def test_the_c_librarys_malloc_trim_is_found_here() -> None:
    assert handlers.MALLOC_TRIM is not None  # glibc: the operator's image and this machine
    handlers.trim_heap()
