"""controller/reconciler forgets a job when its loop ends: with a fake API and the job's loop
(etj.controller.handlers.job_loop) as kopf drives it, what the passes remembered of a job
(validation and plan, pods as observed, status as parsed, quiet world) is dropped when the
job finishes, and when it is deleted once its last pass ran; another job's is kept."""

from __future__ import annotations

import asyncio
import copy
import logging
from types import SimpleNamespace

import kopf
import pytest
from kopf._cogs.aiokits.aioenums import AsyncFlagWaiter, FlagSetter

from etj.controller.handlers import job_loop
from tests.unit.etj.controller.test_reconciler import NS, Setup, manifest


def _other(s: Setup) -> None:
    """A second job, ``other``, running beside ``ctr``."""
    assert s.cache is not None
    obj = copy.deepcopy(manifest())
    obj["metadata"].update(name="other", uid="u-2")
    s.cache.on_job_event(None, s.api.add_job(obj))
    asyncio.run(s.reconciler.reconcile(NS, "other"))


def _running(s: Setup) -> int:
    s.run()
    s.run_all_pods()
    s.run()
    return s.reconciler.remembered()


async def _loop(s: Setup, stop: kopf.DaemonStoppingReason | None) -> SimpleNamespace:
    """ctr's loop until it ends by itself (``stop`` None) or kopf stops it for ``stop``."""
    memo = SimpleNamespace(
        reconciler=s.reconciler,
        settings=SimpleNamespace(resync_seconds=30),
        wakeups={},
        last_passes=set(),
    )
    setter: FlagSetter[kopf.DaemonStoppingReason] = FlagSetter()
    daemon = asyncio.create_task(
        job_loop(  # type: ignore[call-arg]
            namespace=NS,
            name="ctr",
            stopped=AsyncFlagWaiter(setter),
            memo=memo,
            logger=logging.getLogger("test"),
        )
    )
    if stop is None:
        await asyncio.wait_for(daemon, 10)
        return memo
    while (NS, "ctr") not in memo.wakeups:  # the loop is waiting after its first pass
        await asyncio.sleep(0)
    setter.set(reason=stop)
    daemon.cancel()
    with pytest.raises(asyncio.CancelledError):
        await daemon
    await asyncio.wait_for(asyncio.gather(*memo.last_passes), 10)
    return memo


def test_a_finished_jobs_loop_ends_and_its_memories_are_dropped():
    s = Setup()
    _other(s)
    alone = s.reconciler.remembered()
    assert _running(s) > alone
    s.api.set_pod_status(NS, "ctr-chief-0", {"phase": "Succeeded"})
    s.watch_pods()
    asyncio.run(_loop(s, None))
    assert s.api.jobs[(NS, "ctr")]["status"]["phase"] == "Succeeded"
    # Back to the other job's alone; the finished job itself stays in the cache (a warm
    # start's source).
    assert s.reconciler.remembered() == alone
    assert s.cache is not None and s.cache.job(NS, "ctr") is not None


def test_a_deleted_jobs_memories_are_dropped_after_its_last_pass():
    s = Setup()
    _other(s)
    alone = s.reconciler.remembered()
    assert _running(s) > alone
    asyncio.run(_loop(s, kopf.DaemonStoppingReason.RESOURCE_DELETED))
    assert s.reconciler.remembered() == alone


def test_a_forgotten_job_is_reconciled_as_before():
    s = Setup()
    _running(s)
    before = len(s.api.log)
    s.reconciler.forget(NS, "ctr")
    outcome = s.run()  # everything is built again from the cache: nothing to write
    assert s.api.log[before:] == [] and not outcome.finished
