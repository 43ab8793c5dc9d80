"""kopf registrations: a watch of the jobs and a loop per job, woken by what changes.

kopf's watch on the jobs, and the operator's own watch on its pods (``watch_pods``: kopf's
processing of every pod event cost more than everything it fed), put every object into the
``WatchCache`` a reconcile reads, and wake the job's loop when they bring news. Each
unfinished job gets a kopf daemon that runs ``Reconciler.reconcile`` whenever the job or
one of its pods changes, when a decision asks to be requeued (back-off, TTL, deadline,
progress), and at least every ``resync_seconds``; all from the cache, so an idle job costs
the API server nothing. A finished job's loop ends (after its TTL if it has one) and the
reconciler forgets what its passes remembered. The
cache is filled from the API (one LIST of jobs, one of pods) before the first reconcile,
soon after kopf re-lists the jobs following an expired watch, before the pod watch starts
again after its version expired (a re-listing cannot show what was deleted meanwhile),
and, as a backstop, every ``RELIST_PERIODS`` resync periods. kopf provides the job watch,
the daemon lifecycle, retries of failed passes and the liveness endpoint. Daemons put a
finalizer on the job, so deleting a job needs the operator running.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import gc
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import kopf

from etj.api.constants import (
    FINALIZER,
    GROUP,
    LABEL_JOB_NAME,
    PLURAL,
    VERSION,
)
from etj.controller import metrics
from etj.controller.cache import WatchCache, slim_job, slim_pod
from etj.controller.kube import WatchExpired
from etj.controller.reconciler import Reconciler
from etj.core.reconcile.decision import Event

log = logging.getLogger(__name__)


class NoEssenceStorage(kopf.DiffBaseStorage):
    """kopf's diff base, kept empty. On every watch event kopf builds an object's "essence"
    (a deep copy of the whole object, then trimmed) and diffs it with the last handled one;
    only changing handlers (on.create/update/delete/resume/field) and idle timers read that
    diff, and etj has neither (a unit test keeps it so): its watches feed a cache and wake
    a daemon. Copying a burst's pods would be the largest single cost of kopf's event
    processing, so no essence is built, stored or fetched: every object looks unchanged."""

    def build(self, **_: Any) -> kopf.BodyEssence:
        return kopf.BodyEssence()

    def fetch(self, **_: Any) -> kopf.BodyEssence | None:
        return kopf.BodyEssence()

    def store(self, **_: Any) -> None:
        return None


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
    settings.persistence.diffbase_storage = NoEssenceStorage()
    # Only our own decisions become Events; kopf's per-handler chatter stays in the logs.
    settings.posting.level = logging.ERROR
    settings.watching.server_timeout = 300
    # The resources are known up front (the CRD is installed before the operator), so no
    # CRD or namespace scanning: the operator needs no permission on either.
    settings.scanning.disabled = True
    settings.execution.max_workers = 32
    # The cache is full before the first reconcile; then kept fresh in the background.
    memo.resync_due = asyncio.Event()
    memo.resynced = asyncio.Event()
    memo.pods_versions = {}
    await resync(memo)
    # What exists now (modules, kopf's machinery, the first cache) lives as long as the
    # process: the collector's full passes over it take a tenth of a second each, several
    # times a burst; garbage is still freed by reference counting.
    gc.freeze()
    memo.tasks = [
        asyncio.create_task(_resync_forever(memo)),
        *(asyncio.create_task(watch_pods(memo, ns)) for ns in memo.namespaces or [None]),
    ]


@kopf.on.cleanup()
async def stop_resync(memo: kopf.Memo, **_: Any) -> None:
    for task in getattr(memo, "tasks", []):
        task.cancel()
    await memo.reconciler.kube.close()


def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None where the C library has none (musl, macOS)."""
    try:
        fn: Callable[[int], int] = ctypes.CDLL(
            ctypes.util.find_library("c") or "libc.so.6"
        ).malloc_trim
    except (OSError, AttributeError):
        return None
    return fn


# After a resync, the heap's free pages go back to the system: a resync's pages of decoded
# objects are freed once slimmed, but glibc keeps the pages they lived on (the operator's
# RSS was several times its live Python objects).
MALLOC_TRIM = _malloc_trim()


def trim_heap() -> None:
    if MALLOC_TRIM is not None:
        MALLOC_TRIM(0)


async def resync(memo: kopf.Memo) -> None:
    """Refill the cache from the API: one (paged) LIST of jobs and one of pods per namespace."""
    cache: WatchCache = memo.cache
    kube = memo.reconciler.kube
    for ns in memo.namespaces or [None]:
        # Each object slimmed as the cache keeps it, page by page in a worker thread.
        jobs, jobs_version = await kube.list_jobs(ns, keep=slim_job)
        pods, pods_version = await kube.list_managed_pods(ns, keep=slim_pod)
        cache.replace(jobs, jobs_version, pods, pods_version, namespace=ns)
        memo.pods_versions[ns] = pods_version
        del jobs, pods
    trim_heap()
    metrics.RESYNCS.inc()
    memo.resynced.set()


async def watch_pods(memo: kopf.Memo, namespace: str | None) -> None:
    """Feed the cache from a watch of the operator's pods (of ``namespace``, or all),
    from the version of the last resync's list on; a watch the API server ends is taken
    up where it ended, one whose version expired (410) from the next resync's. Not kopf's
    watch: kopf's processing of every pod event (its per-object memory, loggers, causes,
    the handler's keyword arguments, its patching) costs a burst more CPU than the cache and
    the reconciles it feeds."""
    kube = memo.reconciler.kube
    since: str = memo.pods_versions[namespace]
    delay = 1.0
    while True:
        started = time.monotonic()
        try:
            async for kind, obj in kube.watch_managed_pods(namespace, since):
                since = str((obj.get("metadata") or {}).get("resourceVersion") or since)
                delay = 1.0
                if kind != "BOOKMARK":
                    pod_changed(memo, kind, obj)
            if time.monotonic() - started < 1.0:
                # Ended as soon as it began (a proxy in the way?): not a reason to spin.
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
        except WatchExpired:
            # What was deleted meanwhile is missing from any listing: only a full resync
            # (which drops what the API no longer has) sets the cache right.
            log.info(
                "Restarting the watch-stream for pods in %r: version %s expired", namespace, since
            )
            memo.resynced.clear()
            memo.resync_due.set()
            await memo.resynced.wait()
            since = memo.pods_versions[namespace]
        except Exception as exc:  # the API may be briefly away: take it up again
            log.warning("watching pods failed: %s; again in %.0f s", exc, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)  # soon after the API is back


# A full resync (a LIST of every job and pod) when a watch asks for one, else every this
# many resync periods. The watches miss nothing while they are healthy (an API server that
# cannot replay what a watch missed answers 410, and that asks for a resync), so the
# periodic LIST is only a backstop; each one is a few MB of pods to decode on the event
# loop (on the burst: up to seconds of it, every job's loop held up meanwhile). Every
# period still wakes every job's loop (its pass reads the cache).
RELIST_PERIODS = 10


async def _resync_forever(memo: kopf.Memo) -> None:
    due: asyncio.Event = memo.resync_due
    periods = 0
    asked = False
    while True:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(due.wait(), memo.settings.resync_seconds)
        # Asked or not is read from the event, not from how the wait ended: an ask that
        # arrives as the period times out would otherwise be cleared below, unanswered.
        if due.is_set():
            await asyncio.sleep(1.0)  # a re-listing arrives as many events: resync once
            asked = True
        due.clear()
        periods += 1
        if asked or periods >= RELIST_PERIODS:
            try:
                await resync(memo)
            except Exception as exc:  # the API may be briefly away; the next period retries
                log.warning("resync from the API failed: %s", exc)
                continue
            periods, asked = 0, False
        for wake in list(memo.wakeups.values()):
            wake.set()


# After a pass that only wrote the status, the next pass of the job starts at least this
# much later. A job's pods change one after another, tens of milliseconds apart (a kubelet
# per pod, or on the burst one marking them Running in turn), and a pass per change would
# be a status write per change and kopf processing its echo; within the gap they gather
# into one pass. A pass that acted (a pod deleted or created, an Event) is followed at once, so
# a failure's replacement never waits; so is a change after a quiet time.
PASS_GAP_SECONDS = 0.1


# kopf cancels a deleted job's daemon at once (no ``cancellation_backoff``: with one, kopf
# re-checks the daemon only when the backoff has passed, and every deletion would take that
# long), in whatever pass it is. The last pass of a deleted job — marking a Kueue group's
# pods unretriable, so Kueue lets them go — therefore runs as a task of its own, started in
# the loop's ``finally`` and not cancelled with it. As an await after the loop, kopf's
# cancel would reach it at its first await whenever the loop is slower than kopf's "instant
# exit" wait, and Kueue would keep the unmarked pods forever (test_kueue_admission's
# deleted-job test).
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
            ended = time.monotonic()
            waiter = asyncio.ensure_future(wake.wait())
            stopping = asyncio.ensure_future(stopped.wait())
            try:
                await asyncio.wait(
                    [waiter, stopping], timeout=delay, return_when=asyncio.FIRST_COMPLETED
                )
                gap = ended + PASS_GAP_SECONDS - time.monotonic()
                if outcome is not None and outcome.only_status and gap > 0 and not stopping.done():
                    # Woken right after a pass: what else changes meanwhile joins this one.
                    await asyncio.wait([stopping], timeout=gap)
            finally:
                waiter.cancel()
                stopping.cancel()
    finally:
        memo.wakeups.pop((namespace, name), None)
        if (
            stopped.reason is not None
            and kopf.DaemonStoppingReason.RESOURCE_DELETED in stopped.reason
        ):
            last_pass(memo, namespace, name, logger)  # forgets the job when it ends
        else:
            # Finished (or the operator exiting): what the passes remembered of the job is
            # dropped, so 10,000 finished jobs cost the operator only their cached objects.
            reconciler.forget(namespace, name)


def last_pass(memo: kopf.Memo, namespace: str, name: str, logger: Any) -> asyncio.Task[Any]:
    """One more pass of a deleted job, as a task of its own (kept in ``memo.last_passes``
    until it ends, so it is neither collected nor cancelled with the daemon)."""

    async def run() -> None:
        try:
            await memo.reconciler.reconcile(namespace, name)
        except Exception as exc:  # the pods stay until the garbage collector takes them
            logger.warning(f"the last pass of the deleted job failed: {exc}")
        finally:
            memo.reconciler.forget(namespace, name)

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
    obj = event["object"]
    # kopf keeps this very dict as the job's body for as long as it remembers the job (its
    # daemons' "live fresh body", kept again by any event after the daemon ended): without
    # its managedFields (a copy of the status's shape, nothing kopf or etj reads) it is a
    # fraction of its size, and the cache then keeps the same dict instead of a copy.
    (obj.get("metadata") or {}).pop("managedFields", None)
    seen = memo.cache.on_job_event(event.get("type"), obj)
    if seen.resync:
        memo.resync_due.set()
    # Only news wakes the job: the echo of its own status write would cost a whole pass
    # that finds the world as it left it.
    if seen.news and (wake := memo.wakeups.get((namespace, name))) is not None:
        wake.set()


def pod_changed(memo: kopf.Memo, event_type: str, obj: dict[str, Any]) -> None:
    """A watch event on one of the operator's pods (``watch_pods``)."""
    seen = memo.cache.on_pod_event(event_type, obj)
    meta = obj.get("metadata") or {}
    job = (meta.get("labels") or {}).get(LABEL_JOB_NAME)
    # As for jobs: a pod's ADDED event after the operator made it is no news.
    if seen.news and job and (wake := memo.wakeups.get((meta.get("namespace"), job))):
        wake.set()
