"""Leader election on a coordination.k8s.io Lease: one active operator, the others on standby.

Why a Lease and not kopf peering: kopf peering needs a distinct priority per replica, which
one Deployment template cannot give its pods; with equal priorities every replica pauses
(nothing reconciles). Even with distinct priorities, two peers that start together both
run until each has seen the other's record, and a SIGKILLed peer's record only goes stale
after its lifetime. A Lease is what controllers normally use (client-go's leaderelection,
controller-runtime): taking it is an update guarded by resourceVersion, so only one
candidate can win; the standby takes over once the holder has not renewed for
``lease_seconds``; and a leader that cannot renew within ``renew_deadline`` exits at once
(the kubelet restarts it as a standby), before any standby may take the Lease, so two
operators never reconcile at the same time. A standby counts the lease duration on its own
clock from when it last saw the record change, so clock skew between nodes does not matter.

Until it holds the Lease the process runs nothing but this loop (and its liveness
endpoint); then it runs the operator, renewing every ``retry_seconds``. On a normal stop it
releases the Lease so the standby takes over at once.

The pure part (``LeaseView``, ``lease_spec``) decides; ``LeaderElector`` does the waiting
and the API calls through ``etj.controller.kube``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from etj.api.constants import POD_NAME_ENV
from etj.controller import metrics
from etj.controller.kube import Kube

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Timing:
    """client-go's defaults: a SIGKILLed leader is replaced within lease + retry seconds."""

    lease_seconds: float = 15.0
    renew_deadline: float = 10.0
    retry_seconds: float = 2.0

    def __post_init__(self) -> None:
        if not 0 < self.retry_seconds < self.renew_deadline < self.lease_seconds:
            raise ValueError("need 0 < retry < renew deadline < lease duration")


def default_identity() -> str:
    """The pod name (a pod's hostname) and a random suffix: a restarted container is a new
    candidate, never mistaken for the holder it replaced."""
    return f"{os.environ.get(POD_NAME_ENV) or socket.gethostname()}_{uuid.uuid4().hex[:8]}"


def micro_time(t: datetime) -> str:
    """A Lease's MicroTime (RFC 3339 with microseconds)."""
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class LeaseView:
    """What one candidate knows of the Lease: the record it last saw and when (its clock)."""

    resource_version: str | None = None
    holder: str | None = None
    lease_seconds: float = 0.0
    observed_at: float = 0.0  # monotonic time the record last changed, as this candidate saw

    def observe(self, lease: dict[str, Any] | None, now: float) -> None:
        version = (lease or {}).get("metadata", {}).get("resourceVersion")
        if version != self.resource_version:
            spec = (lease or {}).get("spec") or {}
            self.resource_version = version
            self.holder = spec.get("holderIdentity") or None
            self.lease_seconds = float(spec.get("leaseDurationSeconds") or 0)
            self.observed_at = now

    def may_take(self, identity: str, now: float) -> bool:
        """Free, ours, or not renewed for a whole lease duration."""
        return (
            self.holder is None
            or self.holder == identity
            or now - self.observed_at > self.lease_seconds
        )


def lease_spec(
    previous: dict[str, Any] | None, identity: str, timing: Timing, now: datetime
) -> dict[str, Any]:
    """The Lease's spec after ``identity`` took or renewed it."""
    old = previous or {}
    renewing = old.get("holderIdentity") == identity
    transitions = int(old.get("leaseTransitions") or 0)
    return {
        "holderIdentity": identity,
        "leaseDurationSeconds": int(timing.lease_seconds),
        "acquireTime": _micro(old.get("acquireTime")) if renewing else micro_time(now),
        "renewTime": micro_time(now),
        "leaseTransitions": transitions if renewing or not old else transitions + 1,
    }


class LeaderElector:
    """Wait for the Lease, run the operator while it is held, exit when it is lost."""

    def __init__(
        self,
        kube: Kube,
        namespace: str,
        name: str,
        identity: str | None = None,
        timing: Timing | None = None,
        on_lost: Callable[[], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.kube = kube
        self.namespace = namespace
        self.name = name
        self.identity = identity or default_identity()
        self.timing = timing or Timing()
        self.clock = clock
        self.view = LeaseView()
        self.last_renewed = 0.0
        # Losing the Lease ends the process at once: a graceful stop could outlast the
        # margin before the standby takes over.
        self.on_lost = on_lost or (lambda: os._exit(1))

    async def try_take(self) -> bool:
        """One attempt to take or renew the Lease; True when this candidate holds it."""
        lease = await self.kube.get_lease(self.namespace, self.name)
        now = self.clock()
        self.view.observe(lease, now)
        if not self.view.may_take(self.identity, now):
            return False
        spec = lease_spec(lease and lease.get("spec"), self.identity, self.timing, _utcnow())
        if lease is None:
            done = await self.kube.create_lease(self.namespace, self.name, spec)
        else:
            # Guarded by the resourceVersion we read: of two candidates, one wins.
            done = await self.kube.replace_lease(
                self.namespace, self.name, spec, lease["metadata"]["resourceVersion"]
            )
        if done:
            self.last_renewed = self.clock()
        return done

    async def acquire(self) -> None:
        log.info(
            "waiting for the leader Lease %s/%s as %s", self.namespace, self.name, self.identity
        )
        while True:
            try:
                if await self.try_take():
                    break
            except Exception as exc:  # the API may be briefly away; try again
                log.warning("leader election: %s", exc)
            await asyncio.sleep(self.timing.retry_seconds)
        metrics.LEADER.set(1)
        log.info("became the leader (%s)", self.identity)

    async def keep(self) -> None:
        """Renew until it fails for longer than the renew deadline; then ``on_lost``."""
        while True:
            await asyncio.sleep(self.timing.retry_seconds)
            try:
                held = await asyncio.wait_for(self.try_take(), self.timing.retry_seconds * 2)
            except Exception as exc:
                log.warning("renewing the leader Lease failed: %s", exc)
                held = None
            taken = held is False and self.view.holder not in (None, self.identity)
            if taken or self.clock() - self.last_renewed > self.timing.renew_deadline:
                metrics.LEADER.set(0)
                log.error("lost the leader Lease %s/%s; exiting", self.namespace, self.name)
                self.on_lost()
                return

    async def release(self) -> None:
        """Give the Lease up (on a normal stop), so a standby need not wait it out."""
        lease = await self.kube.get_lease(self.namespace, self.name)
        if lease is None or (lease.get("spec") or {}).get("holderIdentity") != self.identity:
            return
        spec = {**lease["spec"], "holderIdentity": None, "leaseDurationSeconds": 1}
        await self.kube.replace_lease(
            self.namespace, self.name, spec, lease["metadata"]["resourceVersion"]
        )
        metrics.LEADER.set(0)

    async def run(self, operator: Callable[[], Awaitable[None]]) -> None:
        await self.acquire()
        keeper = asyncio.create_task(self.keep())
        try:
            await operator()
        finally:
            keeper.cancel()
            try:
                await self.release()
            except Exception as exc:
                log.warning("releasing the leader Lease failed: %s", exc)


def _micro(text: str | None) -> str | None:
    # The client hands MicroTimes back as ISO strings that may lack the fraction.
    return micro_time(datetime.fromisoformat(text.replace("Z", "+00:00"))) if text else None


def _utcnow() -> datetime:
    return datetime.now(UTC)


async def serve_liveness(url: str, main: Awaitable[None]) -> None:
    """Run ``main`` with a liveness endpoint (``http://host:port/path``, '' for none) that
    answers 200 while this process's event loop runs, standby or leader alike (kopf's own
    endpoint only exists once the operator runs)."""
    from urllib.parse import urlparse

    from aiohttp import web

    if not url:
        await main
        return
    parsed = urlparse(url)

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_get(parsed.path or "/", healthz)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, parsed.hostname, parsed.port or 80).start()
    try:
        await main
    finally:
        await runner.cleanup()
