"""The job daemon's loop (etj.controller.handlers.job_loop) as kopf drives it on a deletion:
kopf sets ``stopped`` and cancels the daemon at once, in whatever pass it is."""

from __future__ import annotations

import asyncio
import logging
from types import SimpleNamespace
from typing import Any

import kopf
import pytest
from kopf._cogs.aiokits.aioenums import AsyncFlagWaiter, FlagSetter

from etj.controller.handlers import job_loop
from etj.controller.reconciler import Outcome


class SlowReconciler:
    """The first pass hangs (a slow API); every later pass takes a few awaits and is counted
    as finished only when it got to its end."""

    def __init__(self) -> None:
        self.calls = 0
        self.finished = 0
        self.in_first_pass = asyncio.Event()

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


async def _run(reason: kopf.DaemonStoppingReason) -> tuple[SlowReconciler, Any]:
    reconciler = SlowReconciler()
    memo = _memo(reconciler)
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


def test_an_exiting_operator_makes_no_last_pass() -> None:
    reconciler, memo = asyncio.run(_run(kopf.DaemonStoppingReason.OPERATOR_EXITING))
    assert reconciler.calls == 1 and reconciler.finished == 0
    assert memo.wakeups == {}
