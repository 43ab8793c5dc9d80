"""kopf registrations: a loop per job, woken by events on the job and on its pods.

Each job gets a kopf daemon that runs ``Reconciler.reconcile`` whenever the job or one
of its pods changes, when a decision asks to be requeued (TTL, deadline, progress), and
at least every ``resync_seconds``. kopf provides the watches, the daemon lifecycle (started
for every job on operator start, stopped on deletion or when a peer takes over), retries
of failed passes, peering and the liveness endpoint. Daemons put a finalizer on the job,
so deleting a job needs the operator running.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import kopf

from etj.api.constants import (
    GROUP,
    LABEL_JOB_NAME,
    LABEL_MANAGED_BY,
    MANAGED_BY_VALUE,
    PLURAL,
    VERSION,
)
from etj.controller.reconciler import Reconciler
from etj.reconcile.decide import Event


def post_event(obj: dict[str, Any], event: Event) -> None:
    body: Any = obj  # kopf accepts any mapping with apiVersion/kind/metadata
    kopf.event(body, type=event.type, reason=event.reason, message=event.message[:1000])


def _wakeup(memo: kopf.Memo, namespace: str | None, name: str | None) -> asyncio.Event:
    return memo.wakeups.setdefault((namespace, name), asyncio.Event())


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    # etj.k8s runs the blocking client in threads; asyncio's default pool has cpu+4 of
    # them (6 on 2 cores), which throttles a burst of jobs to 6 API calls in flight.
    asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(max_workers=32))
    settings.persistence.finalizer = f"{GROUP}/finalizer"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=GROUP, key="last-handled-configuration"
    )
    # Only our own decisions become Events; kopf's per-handler chatter stays in the logs.
    settings.posting.level = logging.ERROR
    settings.watching.server_timeout = 300
    # The resources are known up front (the CRD is installed before the operator), so no
    # CRD or namespace scanning: the operator needs no permission on either.
    settings.scanning.disabled = True
    settings.execution.max_workers = 32


@kopf.daemon(GROUP, VERSION, PLURAL, cancellation_timeout=10.0)  # type: ignore[arg-type]
async def job_loop(
    namespace: str, name: str, stopped: kopf.DaemonStopped, memo: kopf.Memo, logger: Any, **_: Any
) -> None:
    reconciler: Reconciler = memo.reconciler
    wake = _wakeup(memo, namespace, name)
    while not stopped:
        wake.clear()
        try:
            outcome = await reconciler.reconcile(namespace, name)
        except Exception as exc:  # a failed pass is retried; the loop must not die
            logger.exception(f"reconcile failed: {exc}")
            outcome = None
        if outcome is not None and outcome.gone:
            return
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
    memo.wakeups.pop((namespace, name), None)


@kopf.on.event(GROUP, VERSION, PLURAL)  # type: ignore[arg-type]
def job_changed(namespace: str, name: str, memo: kopf.Memo, **_: Any) -> None:
    _wakeup(memo, namespace, name).set()


@kopf.on.event("", "v1", "pods", labels={LABEL_MANAGED_BY: MANAGED_BY_VALUE})  # type: ignore[arg-type]
def pod_changed(namespace: str, labels: dict[str, str], memo: kopf.Memo, **_: Any) -> None:
    job = labels.get(LABEL_JOB_NAME)
    if job:
        _wakeup(memo, namespace, job).set()
