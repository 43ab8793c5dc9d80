"""One reconcile pass of one job: read the world, call the pure core, apply the Decision.

The world is read from the ``WatchCache`` the watches keep (no API request per pass), or,
without one, from the API through ``etj.controller.kube``; the decision is ``etj.core.reconcile.decide``;
objects come from ``etj.core.render``. Writes go through ``etj.controller.kube`` and their answers go back
into the cache (a 404 on a delete included), so the next pass sees them before the watch
event arrives. The status is written before any pod is deleted or created (a pod deleted
before its failure is recorded would take the failure with it), at most once per pass,
and only when it changed, so the operator's own writes do not wake it into a loop; its
Events are posted only once that write succeeded. Every create is idempotent (fixed
names: "already exists" is success), so an operator restart or a second pass never
duplicates a pod.

A pass that finds the world (the job's resourceVersion, its pods as observed, its
Service, ConfigMap and gang as the cache knows them, no new metrics) as the last pass left
it, when that pass did nothing, does not decide again until the decision's requeue is due:
``decide`` is pure, so only the time could change its answer, and every rule that depends
on the time alone (back-off, deadline, TTL, a failure count forgotten) asks for a requeue.
The timed pass every ``progress_seconds`` and the resync's wake-ups mostly find this.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
import urllib.request
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from etj.api.constants import (
    ANNOTATION_METRICS_ADDRESS,
    KUEUE_POD_GROUP_NAME_LABEL,
    METRICS_PORT_NAME,
)
from etj.api.conventions import trainer_config_map_name
from etj.api.job import EmbeddingTrainingJob, ObjectMeta
from etj.api.plan import ShardPlan
from etj.api.reasons import REASON_GANG_UNAVAILABLE, REASON_INVALID_SPEC, REASON_STORAGE_NOT_SHARED
from etj.api.roles import ALL_ROLES
from etj.api.status import FINISHED_PHASES, EmbeddingTrainingJobStatus, Phase, PodPhase
from etj.api.storage import claims_to_read, sharing_problems
from etj.controller import metrics
from etj.controller.cache import WatchCache
from etj.controller.kube import ApiRefused, Kube
from etj.controller.settings import OperatorSettings
from etj.core.reconcile import Decision, World, decide, observe_pod
from etj.core.reconcile.decision import Event, iso
from etj.core.reconcile.observe import PodState
from etj.core.reconcile.policies.claim import claim_wait
from etj.core.reconcile.policies.finish import failed_status
from etj.core.reconcile.policies.gang import gang_unavailable
from etj.core.reconcile.policies.queue import owners_wanted
from etj.core.reconcile.progress import (
    parse_evaluation,
    parse_export,
    parse_progress,
    parse_warm_start,
)
from etj.core.render import RenderSettings, build_config_map, build_pod, build_service
from etj.core.render.build import build_checkpoint_claim, build_gang_object
from etj.core.render.networkpolicy import build_network_policy
from etj.core.render.scheduling import GANG_APIS, gang_covers, gang_fingerprint, gang_scheduler
from etj.core.validation import Validated, validate_manifest

log = logging.getLogger(__name__)

PostEvent = Callable[[dict[str, Any], Event], None]
Scrape = Callable[[str], Awaitable[str | None]]


@dataclass(frozen=True)
class Quiet:
    """The last pass of a job decided to do nothing, from this world: the same world
    decides the same until ``until`` (time.monotonic()), when something that depends on
    the time alone may be due (a back-off, the deadline, the TTL, a failure count
    forgotten: the decision's requeue)."""

    fingerprint: tuple[Any, ...]
    until: float
    finished: bool


@dataclass(frozen=True)
class Outcome:
    gone: bool = False
    requeue_after: float | None = None
    # Succeeded or Failed: nothing more happens to the job but its TTL (``requeue_after``).
    finished: bool = False
    # Nothing was decided: the world was as the last pass, which did nothing, left it.
    unchanged: bool = False
    # The pass wrote the status and did nothing else: it recorded what its pods showed (one
    # of them running, scheduled, ...), and the next pass may wait a moment for their
    # next changes to gather (etj.controller.handlers.PASS_GAP_SECONDS).
    only_status: bool = False


async def scrape_http(address: str) -> str | None:
    """GET http://address/metrics; None when it does not answer."""

    def get() -> str | None:
        try:
            with urllib.request.urlopen(f"http://{address}/metrics", timeout=2) as resp:
                return str(resp.read().decode())
        except OSError:
            return None

    return await asyncio.to_thread(get)


class Reconciler:
    def __init__(
        self,
        kube: Kube,
        settings: OperatorSettings,
        post_event: PostEvent,
        scrape: Scrape = scrape_http,
        cache: WatchCache | None = None,
    ):
        self.kube = kube
        self.cache = cache
        self.settings = settings
        self.post_event = post_event
        self.scrape = scrape
        self._last_scrape: dict[tuple[str, str], float] = {}
        # (namespace, name) -> (uid, generation, the job validated and planned, and the
        # resourceVersion whose metadata the last one handed out (the fifth) carries).
        self._validations: dict[tuple[str, str], tuple[str, int, Validated, str, Validated]] = {}
        # (namespace, job) -> pod name -> (resourceVersion, the pod as observed).
        self._observed: dict[tuple[str, str], dict[str, tuple[str, PodState | None]]] = {}
        # (namespace, name) -> (uid, resourceVersion, the status as parsed).
        self._statuses: dict[tuple[str, str], tuple[str, str, EmbeddingTrainingJobStatus]] = {}
        # (namespace, name) -> the world of its last pass, when that pass did nothing.
        self._quiet: dict[tuple[str, str], Quiet] = {}

    async def reconcile(self, namespace: str, name: str) -> Outcome:
        started = time.monotonic()
        try:
            outcome = await self._reconcile(namespace, name)
        except Exception:
            metrics.RECONCILES.labels("error").inc()
            raise
        metrics.RECONCILES.labels("unchanged" if outcome.unchanged else "ok").inc()
        metrics.RECONCILE_SECONDS.observe(time.monotonic() - started)
        return outcome

    def forget(self, namespace: str, name: str) -> None:
        """Drop what the passes of a job remember (its validation and plan, its pods as
        observed, its status as parsed, its last scrape and quiet world): its loop ended
        (finished or deleted). A later pass (a finished job changed, the last pass of a
        deleted one) builds them again. At 10,000 finished jobs this is most of what the
        reconciler would otherwise hold."""
        key = (namespace, name)
        for memory in self._memories():
            memory.pop(key, None)

    def _memories(self) -> tuple[dict[tuple[str, str], Any], ...]:
        return (self._last_scrape, self._validations, self._observed, self._statuses, self._quiet)

    def remembered(self) -> int:
        """How many (job, memory) entries the reconciler holds (for tests and metrics)."""
        return sum(len(memory) for memory in self._memories())

    # ---- reads: the watch cache, or the API ---------------------------------------------

    async def _job(self, namespace: str, name: str) -> dict[str, Any] | None:
        if self.cache is not None:
            cached = self.cache.job(namespace, name)
            if cached is not None:
                return cached
        # Not cached: a job so new that its watch event is still on its way, or no cache.
        obj = await self.kube.get_job(namespace, name)
        if obj is not None and self.cache is not None:
            self.cache.put_job(obj)
        return obj

    async def _pods(self, namespace: str, name: str) -> list[dict[str, Any]]:
        if self.cache is not None:
            return self.cache.job_pods(namespace, name)
        return await self.kube.list_job_pods(namespace, name)

    async def _queue_owners(
        self, namespace: str, raw_pods: list[dict[str, Any]]
    ) -> frozenset[str] | None:
        """The uids of the pods that own the Kueue Workload of the job's pod group (named
        by the pods' group label); None when there is none or it cannot be read."""
        group = next(
            (
                g
                for pod in raw_pods
                if (g := (pod["metadata"].get("labels") or {}).get(KUEUE_POD_GROUP_NAME_LABEL))
            ),
            None,
        )
        return None if group is None else await self.kube.queue_workload_owners(namespace, group)

    async def _namespace_jobs(self, namespace: str) -> list[EmbeddingTrainingJob]:
        """The jobs of ``namespace`` (from the watch cache once it is synced), parsed; a job
        that does not parse is no warm start's source and is left out."""
        if self.cache is not None and self.cache.synced:
            raw = self.cache.namespace_jobs(namespace)
        else:
            raw = (await self.kube.list_jobs(namespace))[0]
        out = []
        for obj in raw:
            try:
                out.append(EmbeddingTrainingJob.from_manifest(obj))
            except ValidationError:
                continue
        return out

    async def _has(self, kind: str, namespace: str, job: str) -> bool:
        if self.cache is not None:
            return self.cache.has(kind, namespace, job)
        return await self.kube.exists(
            kind, namespace, job if kind == "Service" else trainer_config_map_name(job)
        )

    async def _reconcile(self, namespace: str, name: str) -> Outcome:
        key = (namespace, name)
        obj = await self._job(namespace, name)
        if obj is None:
            self.forget(namespace, name)
            return Outcome(gone=True)
        now, clock = datetime.now(UTC), time.monotonic()
        raw_pods = await self._pods(namespace, name)
        pods = self._observe(namespace, name, raw_pods)
        scraped = await self._scrape(namespace, name, raw_pods, now)
        fingerprint = None if scraped else self._fingerprint(obj, raw_pods, pods)
        quiet = self._quiet.pop(key, None)
        if (
            fingerprint is not None
            and quiet is not None
            and quiet.fingerprint == fingerprint
            and clock < quiet.until
        ):
            # The world the last pass found and left alone, before anything that depends
            # on the time alone is due: the decision would be the same (the timed pass
            # every progress_seconds and the resync's wake-ups of every job find this).
            self._quiet[key] = quiet
            return self._quiet_outcome(quiet)
        status = self._status(obj)
        validated = await self._validated(obj)
        if validated.job is None:
            # The schema normally stops these; an old CRD or a CEL-less server may not.
            problems = "; ".join(str(p) for p in validated.problems)
            new = failed_status(
                status, REASON_INVALID_SPEC, problems, iso(now), obj["metadata"].get("generation")
            )
            await self._write_status(obj, new)
            if status.phase != Phase.FAILED:
                self.post_event(obj, Event("Warning", REASON_INVALID_SPEC, problems))
            return Outcome(finished=True)
        job = validated.job.model_copy(update={"status": status})
        plan = validated.plan
        refusal = None
        # What the claims say (read from the API, not watched) is no part of the
        # fingerprint: a pass that read them is never taken as quiet.
        claims_read = plan is not None and not raw_pods and status.phase not in FINISHED_PHASES
        if plan is not None and claims_read:
            # Before the first pod: can the pods share the claims the job names?
            refusal = await self._claims_refusal(job, plan)
            if refusal is not None:
                plan = None
        has_service = plan is not None and await self._has("Service", namespace, name)
        has_cm = plan is not None and await self._has("ConfigMap", namespace, name)
        render = self._render(dict(status.memory_limits))
        gang = build_gang_object(job, plan, render) if plan is not None else None
        backend = gang_scheduler(job, self.settings.gang_scheduler)
        existing_gang, gang_current = await self._gang(gang)
        # Who owns the job's Kueue Workload: read from the API (Kueue's update of it is no
        # pod event), and only in the pass that may let go of a group's last old pod.
        owners_read = owners_wanted(pods)
        owners = await self._queue_owners(namespace, raw_pods) if owners_read else None
        # The namespace's jobs, while the warm start's source job is not pinned yet (read
        # anew every such pass, as the claims: never taken as quiet).
        jobs_read = _warm_start_unpinned(job, raw_pods)
        jobs = await self._namespace_jobs(namespace) if jobs_read else None
        world = World(
            job=job,
            plan=plan,
            plan_error=refusal or "; ".join(str(p) for p in validated.problems) or None,
            refusal_reason=REASON_STORAGE_NOT_SHARED if refusal else REASON_INVALID_SPEC,
            pods=pods,
            has_service=has_service,
            has_config_map=has_cm,
            now=now,
            **scraped,
            default_max_memory=self.settings.max_memory_on_oom,
            node_loss_seconds=self.settings.node_loss_seconds,
            gang=backend if gang is not None else None,
            gang_current=gang_current,
            queue_owners=owners,
            jobs=jobs,
        )
        decision = decide(world)
        if decision.skipped:
            await self._mark_unretriable(namespace, decision)  # a deleted job's Kueue group
            return Outcome()
        if (
            gang is not None
            and decision.apply_gang
            and not await self._apply_gang(obj, gang, existing_gang, iso(now))
        ):
            return Outcome(requeue_after=self.settings.resync_seconds)
        wrote = await self._apply(obj, job, plan, decision)
        finished = decision.status is not None and decision.status.phase in FINISHED_PHASES
        if (
            fingerprint is not None
            and not claims_read
            and not owners_read
            and not jobs_read
            and not wrote
            and not _acts(decision)
        ):
            # From the clock the decision read (``now``): a time-only change is never late.
            until = clock + (
                decision.requeue_after if decision.requeue_after is not None else float("inf")
            )
            self._quiet[key] = Quiet(fingerprint, until, finished)
        return Outcome(
            requeue_after=self._requeue(decision),
            finished=finished,
            only_status=wrote and not _acts(decision),
        )

    def _fingerprint(
        self, obj: dict[str, Any], raw_pods: list[dict[str, Any]], pods: list[PodState]
    ) -> tuple[Any, ...] | None:
        """Everything a pass's decision reads but the time, from the watch cache: the job
        as stored (its resourceVersion: spec, metadata and status), its pods as observed,
        whether its Service and ConfigMap exist and its gang object as last made or found.
        None without a cache (the reads then come from the API each pass)."""
        if self.cache is None:
            return None
        meta = obj["metadata"]
        ns, name = meta["namespace"], meta["name"]
        if not meta.get("resourceVersion"):
            return None
        return (
            meta.get("uid"),
            meta.get("resourceVersion"),
            bool(raw_pods),
            tuple(pods),
            self.cache.has("Service", ns, name),
            self.cache.has("ConfigMap", ns, name),
            self.cache.gang(ns, name),
        )

    def _quiet_outcome(self, quiet: Quiet) -> Outcome:
        left = quiet.until - time.monotonic()
        candidates = [left] if left != float("inf") else []
        if not quiet.finished:
            candidates.append(self.settings.progress_seconds)
        return Outcome(
            requeue_after=min(candidates) if candidates else None,
            finished=quiet.finished,
            unchanged=True,
        )

    def _status(self, obj: dict[str, Any]) -> EmbeddingTrainingJobStatus:
        """The job's status as parsed, once per resourceVersion (passes woken by its pods
        find the job as the last pass did). Shared between passes: nothing changes it in
        place (``decide`` copies it; the unit tests check)."""
        meta = obj["metadata"]
        key = (meta["namespace"], meta["name"])
        uid, version = str(meta.get("uid") or ""), str(meta.get("resourceVersion") or "")
        cached = self._statuses.get(key)
        if cached is not None and version and cached[:2] == (uid, version):
            return cached[2]
        status = _status_of(obj)
        self._statuses[key] = (uid, version, status)
        return status

    async def _validated(self, obj: dict[str, Any]) -> Validated:
        """The job (without its status) validated and planned, once per generation: the API
        server bumps ``metadata.generation`` on every spec change, and validation reads
        nothing else but the name. The metadata is taken fresh whenever the job's
        resourceVersion changed (labels and deletionTimestamp change without a new
        generation); passes woken by its pods find the job as the last pass did."""
        meta = obj["metadata"]
        key = (meta["namespace"], meta["name"])
        uid, generation = meta.get("uid"), meta.get("generation")
        version = str(meta.get("resourceVersion") or "")
        cached = self._validations.get(key)
        if cached is not None and cached[:2] == (uid, generation) and cached[2].job is not None:
            if version and cached[3] == version:
                return cached[4]
            job = cached[2].job.model_copy(update={"metadata": ObjectMeta.model_validate(meta)})
            fresh = dataclasses.replace(cached[2], job=job)
            self._validations[key] = (uid, generation, cached[2], version, fresh)
            return fresh
        # Planning is bounded but not free: never on the event loop every job shares.
        spec_only = {k: v for k, v in obj.items() if k != "status"}
        validated = await asyncio.to_thread(validate_manifest, spec_only)
        if uid is not None and generation is not None:
            # Its metadata is the job's of this version: reused while the version lasts.
            self._validations[key] = (uid, generation, validated, version, validated)
        return validated

    def _observe(self, namespace: str, name: str, raw_pods: list[dict[str, Any]]) -> list[PodState]:
        """The job's pods as the core sees them. Observing is pure and most passes find
        most pods as the last one did: a pod is observed again only when its
        resourceVersion changed."""
        last = self._observed.get((namespace, name), {})
        now: dict[str, tuple[str, PodState | None]] = {}
        for raw in raw_pods:
            meta = raw.get("metadata") or {}
            pod, version = str(meta.get("name")), str(meta.get("resourceVersion") or "")
            known = last.get(pod)
            state = known[1] if known and version and known[0] == version else observe_pod(raw)
            now[pod] = (version, state)
        self._observed[(namespace, name)] = now
        return [state for _, state in now.values() if state is not None]

    def _render(self, memory_limits: dict[str, int]) -> RenderSettings:
        return RenderSettings(
            default_image=self.settings.default_image,
            memory_limits=memory_limits,
            gang_scheduler=self.settings.gang_scheduler,
            network_policy=self.settings.network_policy,
            storage_class=self.settings.checkpoint_storage_class,
            node_loss_seconds=self.settings.node_loss_seconds,
        )

    async def _claims_refusal(self, job: EmbeddingTrainingJob, plan: ShardPlan) -> str | None:
        """Why the job's pods cannot share the claims it names (their access modes, read
        from the API); None when they can, or it names none."""
        names = claims_to_read(job.spec)
        if not names:
            return None
        modes = {}
        for claim in names:
            found = await self.kube.claim_access_modes(job.namespace, claim)
            if found is not None:  # not there yet: its pods wait for it, as any pod would
                modes[claim] = found
        problems = sharing_problems(job.spec, plan.strategy, plan.ps_replicas, modes)
        return "; ".join(f"{f}: {m}" for f, m in problems) or None

    async def _gang(self, gang: dict[str, Any] | None) -> tuple[dict[str, Any] | None, bool]:
        """The job's gang object as the API has it (None when the cache already says it is
        as wanted, or it does not exist) and whether it is as wanted."""
        if gang is None:
            return None, True
        ns, job = gang["metadata"]["namespace"], gang["metadata"]["name"]
        if self.cache is not None and self.cache.gang(ns, job) == gang_fingerprint(gang):
            return None, True
        api = next(a for a in GANG_APIS.values() if a.api_version == gang["apiVersion"])
        existing = await self.kube.get_gang(api, ns, job)
        current = gang_covers(existing, gang)
        if current and self.cache is not None:
            self.cache.put_gang(ns, job, gang_fingerprint(gang))
        return existing, current

    async def _apply_gang(
        self,
        obj: dict[str, Any],
        gang: dict[str, Any],
        existing: dict[str, Any] | None,
        now: str,
    ) -> bool:
        """Make the gang object before anything else of the pass; False (and the job says
        why, and no pod is made) when the API server will not have it."""
        meta = gang["metadata"]
        try:
            await self.kube.apply_gang(gang, existing)
        except ApiRefused as exc:
            what = _GANG_REFUSALS.get(exc.status, "the API server refused it")
            message = (
                f"cannot create the {gang['apiVersion']} {gang['kind']} {meta['name']}: "
                f"{what} ({exc.status}: {exc.message})"
            )
            # From the status as it was: this pass's decision (pods created, ...) did not
            # happen.
            new = gang_unavailable(_status_of(obj), message, now, obj["metadata"].get("generation"))
            await self._write_status(obj, new)
            self.post_event(obj, Event("Warning", REASON_GANG_UNAVAILABLE, message))
            return False
        if self.cache is not None:
            self.cache.put_gang(meta["namespace"], meta["name"], gang_fingerprint(gang))
        return True

    def _requeue(self, d: Decision) -> float | None:
        candidates = [d.requeue_after]
        if d.status is not None and d.status.phase not in FINISHED_PHASES:
            candidates.append(self.settings.progress_seconds)
        values = [c for c in candidates if c is not None]
        return min(values) if values else None

    async def _scrape(
        self, namespace: str, name: str, raw_pods: list[dict[str, Any]], now: datetime
    ) -> dict[str, Any]:
        """The chief's progress and held-out evaluation (World fields), read at most every
        ``progress_seconds``."""
        key = (namespace, name)
        if time.monotonic() - self._last_scrape.get(key, 0.0) < self.settings.progress_seconds:
            return {}
        address = _metrics_address(raw_pods, self.settings)
        if address is None:
            return {}
        self._last_scrape[key] = time.monotonic()
        text = await self.scrape(address)
        if not text:
            return {}
        return {
            "progress": parse_progress(text, iso(now)),
            "evaluation": parse_evaluation(text, iso(now)),
            "export": parse_export(text, iso(now)),
            "warm_start_report": parse_warm_start(text),
        }

    async def _apply(
        self, obj: dict[str, Any], job: EmbeddingTrainingJob, plan: ShardPlan | None, d: Decision
    ) -> bool:
        """Do what ``d`` says; whether the status was written."""
        ns, name = job.namespace, job.name
        if d.delete_pods or d.create_pods or d.release_pods or d.force_delete_pods:
            log.debug(
                "%s/%s: delete %s, force-delete %s, release %s, create %s",
                ns,
                name,
                d.delete_pods,
                d.force_delete_pods,
                d.release_pods,
                [f"{r}-{i}" for r, i in d.create_pods],
            )
        render = self._render(dict(d.status.memory_limits) if d.status else {})
        wrote = False
        if plan is not None and d.create_service:
            # With the Service, once per job: the NetworkPolicy when the operator makes them.
            policy = build_network_policy(job, render)
            if policy is not None:
                await self.kube.create(policy)
            await self.kube.create(build_service(job, render))
            self._known("Service", ns, name)
        if plan is not None and d.create_config_map:
            await self.kube.create(await asyncio.to_thread(build_config_map, job, plan, render))
            self._known("ConfigMap", ns, name)
        if d.status is not None:
            # Before any pod is deleted: the status is what remembers a failure once its
            # pod is gone. Were the pod deleted first and this write then lost (the API
            # server going away between the two), the next pass would find the replica
            # simply missing and recreate it with the restart never counted; written
            # first, a lost delete is only asked again (the replica is in restartingPods).
            _count_restarts(job.status, d.status)
            wrote = await self._write_status(obj, d.status)
        # Before the deletions: Kueue counts the group finished once no pod is active.
        await self._mark_unretriable(ns, d)
        for pod in d.force_delete_pods:
            if not await self.kube.delete_pod(ns, pod, force=True) and self.cache is not None:
                self.cache.forget_pod(ns, name, pod)
        for pod in d.delete_pods:
            if not await self.kube.delete_pod(ns, pod) and self.cache is not None:
                # Already gone (404): a deletion the watch did not show (it expired and
                # the re-listing cannot show what is missing). The API's answer is the
                # newer truth; a pod left in the cache would be deleted again forever and
                # never recreated.
                self.cache.forget_pod(ns, name, pod)
        for pod in d.release_pods:
            if not await self.kube.release_pod(ns, pod) and self.cache is not None:
                self.cache.forget_pod(ns, name, pod)
        claim = build_checkpoint_claim(job, render) if plan is not None and d.create_pods else None
        wait = None
        # Before its pods (they mount it); "already exists" on later passes is success, and
        # the claim outlives restarts and suspend, unless it is an earlier job's of the same
        # name, on its way out: then no pod until it has gone.
        if claim is not None and d.create_pods and await self.kube.create(claim) is None:
            existing = await self.kube.get_claim(ns, claim["metadata"]["name"])
            wait = claim_wait(existing, job.metadata.uid) if existing is not None else None
            if wait is not None:
                log.info("%s/%s: no pods yet: %s", ns, name, wait)
        if plan is not None and d.create_pods and wait is None:
            pods = await asyncio.to_thread(
                lambda: [build_pod(job, plan, r, i, render) for r, i in d.create_pods]
            )
            created = await asyncio.gather(*(self.kube.create(pod) for pod in pods))
            for stored in created:
                if stored is not None and self.cache is not None:
                    self.cache.put_pod(stored)
            metrics.PODS_CREATED.inc(sum(1 for c in created if c is not None))
        for event in d.events:
            self.post_event(obj, event)
        if (
            d.status is not None
            and d.status.phase in FINISHED_PHASES
            and ((job.status.phase if job.status else None) != d.status.phase)
        ):
            metrics.JOBS_FINISHED.labels(str(d.status.phase)).inc()
        if d.delete_job:
            await self.kube.delete_job(ns, name)
        return wrote

    async def _mark_unretriable(self, namespace: str, d: Decision) -> None:
        for pod in d.mark_unretriable:
            marked = await self.kube.mark_pod_unretriable(namespace, pod)
            if marked is not None and self.cache is not None:
                self.cache.put_pod(marked)

    def _known(self, kind: str, namespace: str, job: str) -> None:
        # Created now or "already exists": either way it is there.
        if self.cache is not None:
            self.cache.put_child(kind, namespace, job)

    async def _write_status(self, obj: dict[str, Any], status: EmbeddingTrainingJobStatus) -> bool:
        """Write the status if it changed; whether it did."""
        wire = status.to_wire()
        if wire == (obj.get("status") or {}):
            return False
        meta = obj["metadata"]
        stored = await self.kube.patch_job_status(meta["namespace"], meta["name"], wire)
        if self.cache is not None and stored:
            self.cache.put_job(stored)
        return True


def _warm_start_unpinned(job: EmbeddingTrainingJob, raw_pods: list[dict[str, Any]]) -> bool:
    """The job's warm start names a source job (fromJob or a selector) not pinned in its
    status yet, and it has no pods (etj.core.reconcile.decide resolves it then)."""
    ws, status = job.spec.warm_start, job.status
    return (
        ws is not None
        and ws.checkpoint is None
        and (status is None or (status.warm_start is None and status.phase not in FINISHED_PHASES))
        and not raw_pods
    )


def _acts(d: Decision) -> bool:
    """The decision does something besides (maybe) writing the status."""
    return bool(
        d.create_service
        or d.create_config_map
        or d.apply_gang
        or d.delete_pods
        or d.force_delete_pods
        or d.create_pods
        or d.mark_unretriable
        or d.release_pods
        or d.events
        or d.delete_job
    )


def _status_of(obj: dict[str, Any]) -> EmbeddingTrainingJobStatus:
    try:
        return EmbeddingTrainingJobStatus.model_validate(obj.get("status") or {})
    except ValidationError:
        # A status written by another version: start afresh rather than fail the job.
        log.warning("unreadable status of %s; starting from an empty one", obj["metadata"]["name"])
        return EmbeddingTrainingJobStatus()


# Why the API server would not take a gang object, by HTTP status.
_GANG_REFUSALS = {
    403: "the operator is not allowed to (the chart's gangScheduling.backends must name it)",
    404: "the API server does not serve it (Workload: Kubernetes v1.35+ with the "
    "GenericWorkload feature gate and scheduling.k8s.io/v1alpha1 enabled; Volcano or "
    "SchedulerPlugins: their CRDs installed)",
}


def _metrics_address(raw_pods: list[dict[str, Any]], settings: OperatorSettings) -> str | None:
    for pod in raw_pods:
        for port in ((pod.get("spec") or {}).get("containers") or [{}])[0].get("ports") or []:
            # A pod may say where its metrics are served (a process-backed node's pods share
            # 127.0.0.1); otherwise podIP:metricsPort is used.
            if port.get("name") != METRICS_PORT_NAME:
                continue
            annotated = (pod["metadata"].get("annotations") or {}).get(ANNOTATION_METRICS_ADDRESS)
            if annotated:
                return str(annotated)
            ip = (pod.get("status") or {}).get("podIP")
            if ip and (pod.get("status") or {}).get("phase") == PodPhase.RUNNING:
                return f"{ip}:{port['containerPort']}"
    return None


def _count_restarts(
    old: EmbeddingTrainingJobStatus | None, new: EmbeddingTrainingJobStatus
) -> None:
    if new.replica_statuses is None:
        return
    for role in ALL_ROLES:
        after = getattr(new.replica_statuses, role)
        before = getattr(old.replica_statuses, role) if old and old.replica_statuses else None
        delta = (after.restarts if after else 0) - (before.restarts if before else 0)
        if delta > 0:
            metrics.RESTARTS.labels(role).inc(delta)
