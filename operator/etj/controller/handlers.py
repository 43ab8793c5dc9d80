"""kopf registrations: watches that feed the cache, and a loop per job woken by them.

kopf's watches on the jobs and on the operator's pods put every object into the
``WatchCache`` a reconcile reads, and wake the job's loop. Each unfinished job gets a kopf
daemon that runs ``Reconciler.reconcile`` whenever the job or one of its pods changes,
when a decision asks to be requeued (back-off, TTL, deadline, progress), and at least
every ``resync_seconds``; all from the cache, so an idle job costs the API server
nothing. A finished job's loop ends (after its TTL if it has one). The cache is filled
from the API before the first reconcile, again every ``resync_seconds`` (one LIST of jobs,
one of pods), and soon after kopf re-lists following an expired watch (a re-listing cannot
show what was deleted meanwhile). kopf provides the watches, the daemon lifecycle, retries
of failed passes and the liveness endpoint. Daemons put a finalizer on the job, so
deleting a job needs the operator running.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import kopf

from etj.api.constants import (
    FINALIZER,
    GROUP,
    LABEL_JOB_NAME,
    LABEL_MANAGED_BY,
    MANAGED_BY_VALUE,
    PLURAL,
    VERSION,
)
from etj.controller.cache import WatchCache
from etj.controller.reconciler import Reconciler
from etj.core.reconcile.decide import Event

log = logging.getLogger("etj.controller")


# The metadata kopf's essence of an object keeps (labels, annotations) or reads while taking
# it (ownerReferences, for its storage keys).
_ESSENCE_METADATA = ("name", "namespace", "labels", "annotations", "ownerReferences")


class EssenceStorage(kopf.AnnotationsDiffBaseStorage):
    """kopf's annotation diff-base storage, cheaper to feed: on every watch event kopf takes
    an object's "essence" (its spec, labels and annotations) from a deep copy of the whole
    object, status and managedFields included, only to delete them; on a burst of pods that
    copy was the operator's largest single cost. The essence is the same: only what it
    keeps is given to kopf."""

    def build(self, *, body: Any, extra_fields: Any = None) -> kopf.BodyEssence:
        if extra_fields:  # a handler that watches status fields needs the whole object
            return super().build(body=body, extra_fields=extra_fields)
        meta = body.get("metadata") or {}
        slim: Any = {k: v for k, v in body.items() if k not in ("status", "metadata")}
        slim["metadata"] = {k: meta[k] for k in _ESSENCE_METADATA if k in meta}
        return super().build(body=kopf.Body(slim), extra_fields=extra_fields)


def post_event(obj: dict[str, Any], event: Event) -> None:
    body: Any = obj  # kopf accepts any mapping with apiVersion/kind/metadata
    kopf.event(body, type=event.type, reason=event.reason, message=event.message[:1000])


def _wakeup(memo: kopf.Memo, namespace: str | None, name: str | None) -> asyncio.Event:
    return memo.wakeups.setdefault((namespace, name), asyncio.Event())


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    # etj.controller.kube runs the blocking client in threads; asyncio's default pool has cpu+4 of
    # them (6 on 2 cores), which throttles a burst of jobs to 6 API calls in flight.
    asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(max_workers=32))
    settings.persistence.finalizer = FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = EssenceStorage(
        prefix=GROUP, key="last-handled-configuration"
    )
    # Only our own decisions become Events; kopf's per-handler chatter stays in the logs.
    settings.posting.level = logging.ERROR
    settings.watching.server_timeout = 300
    # The resources are known up front (the CRD is installed before the operator), so no
    # CRD or namespace scanning: the operator needs no permission on either.
    settings.scanning.disabled = True
    settings.execution.max_workers = 32
    # The cache is full before the first reconcile; then kept fresh in the background.
    memo.resync_due = asyncio.Event()
    await resync(memo)
    memo.resync_task = asyncio.create_task(_resync_forever(memo))


@kopf.on.cleanup()
async def stop_resync(memo: kopf.Memo, **_: Any) -> None:
    task = getattr(memo, "resync_task", None)
    if task is not None:
        task.cancel()


async def resync(memo: kopf.Memo) -> None:
    """Refill the cache from the API: one LIST of jobs and one of pods per namespace."""
    cache: WatchCache = memo.cache
    kube = memo.reconciler.kube
    for ns in memo.namespaces or [None]:
        jobs, jobs_version = await kube.list_jobs(ns)
        pods, pods_version = await kube.list_managed_pods(ns)
        cache.replace(jobs, jobs_version, pods, pods_version, namespace=ns)


async def _resync_forever(memo: kopf.Memo) -> None:
    due: asyncio.Event = memo.resync_due
    while True:
        try:
            await asyncio.wait_for(due.wait(), memo.settings.resync_seconds)
            await asyncio.sleep(1.0)  # a re-listing arrives as many events: resync once
        except TimeoutError:
            pass
        due.clear()
        try:
            await resync(memo)
        except Exception as exc:  # the API may be briefly away; the next round retries
            log.warning("resync from the API failed: %s", exc)
            continue
        for wake in list(memo.wakeups.values()):
            wake.set()


# kopf cancels a deleted job's daemon at once (no ``cancellation_backoff``: with one, kopf
# re-checks the daemon only when the backoff has passed, and every deletion took that long),
# in whatever pass it is. The last pass of a deleted job — marking a Kueue group's pods
# unretriable, so Kueue lets them go — therefore runs as a task of its own, started in the
# loop's ``finally`` and not cancelled with it. It was an await after the loop: kopf's
# cancel reached it at its first await whenever the loop was slower than kopf's "instant
# exit" wait, and Kueue kept the unmarked pods forever (test_kueue_admission's deleted-job
# test, failing about every other run).
@kopf.daemon(GROUP, VERSION, PLURAL, cancellation_timeout=10.0)  # type: ignore[arg-type]
async def job_loop(
    namespace: str, name: str, stopped: kopf.DaemonStopped, memo: kopf.Memo, logger: Any, **_: Any
) -> None:
    reconciler: Reconciler = memo.reconciler
    wake = _wakeup(memo, namespace, name)
    try:
        while not stopped:
            wake.clear()
            try:
                outcome = await reconciler.reconcile(namespace, name)
            except Exception as exc:  # a failed pass is retried; the loop must not die
                logger.exception(f"reconcile failed: {exc}")
                outcome = None
            if outcome is not None and (
                outcome.gone or (outcome.finished and outcome.requeue_after is None)
            ):
                break  # a finished job needs no loop (kopf does not restart a daemon that ended)
            delay = memo.settings.resync_seconds
            if outcome is not None and outcome.requeue_after is not None:
                delay = max(0.5, min(delay, outcome.requeue_after))
            elif outcome is None:
                delay = min(delay, 5.0)
            waiter = asyncio.ensure_future(wake.wait())
            try:
                await asyncio.wait(
                    [waiter, asyncio.ensure_future(stopped.wait())],
                    timeout=delay,
                    return_when=asyncio.FIRST_COMPLETED,
                )
            finally:
                waiter.cancel()
    finally:
        memo.wakeups.pop((namespace, name), None)
        if (
            stopped.reason is not None
            and kopf.DaemonStoppingReason.RESOURCE_DELETED in stopped.reason
        ):
            last_pass(memo, namespace, name, logger)


def last_pass(memo: kopf.Memo, namespace: str, name: str, logger: Any) -> asyncio.Task[Any]:
    """One more pass of a deleted job, as a task of its own (kept in ``memo.last_passes``
    until it ends, so it is neither collected nor cancelled with the daemon)."""

    async def run() -> None:
        try:
            await memo.reconciler.reconcile(namespace, name)
        except Exception as exc:  # the pods stay until the garbage collector takes them
            logger.warning(f"the last pass of the deleted job failed: {exc}")

    task = asyncio.create_task(run())
    passes: set[asyncio.Task[Any]] = memo.last_passes
    passes.add(task)
    task.add_done_callback(passes.discard)
    return task


# Async, so kopf runs them on the event loop: a plain function would be handed to a worker
# thread on every watch event (and asyncio.Event is not thread-safe).
@kopf.on.event(GROUP, VERSION, PLURAL)  # type: ignore[arg-type]
async def job_changed(
    event: dict[str, Any], namespace: str, name: str, memo: kopf.Memo, **_: Any
) -> None:
    if memo.cache.on_job_event(event.get("type"), event["object"]):
        memo.resync_due.set()
    if (wake := memo.wakeups.get((namespace, name))) is not None:
        wake.set()


@kopf.on.event("", "v1", "pods", labels={LABEL_MANAGED_BY: MANAGED_BY_VALUE})  # type: ignore[arg-type]
async def pod_changed(
    event: dict[str, Any], namespace: str, labels: dict[str, str], memo: kopf.Memo, **_: Any
) -> None:
    if memo.cache.on_pod_event(event.get("type"), event["object"]):
        memo.resync_due.set()
    job = labels.get(LABEL_JOB_NAME)
    if job and (wake := memo.wakeups.get((namespace, job))) is not None:
        wake.set()
