"""What a reconcile sees, kept from watches instead of read from the API on every pass.

kopf watches the jobs, the operator its pods (``etj.controller.handlers``); every object
they see goes into a ``WatchCache``, and a reconcile reads the job, its pods and whether its
Service and ConfigMap exist from here: no API request per pass, so a thousand idle jobs
cost the API server nothing. (A kopf index would hold the same, but an index cannot take
the operator's own writes: after a status patch or a pod create the reconcile must see
the result before the watch event arrives, or it would redo the work; the cache takes the
API's answers to those writes as well.)

Correctness rests on full resyncs from the API (``resync``: one LIST of the jobs and one of
the operator's pods, objects missing from the lists dropped): once on start, before any
reconcile; whenever a watch is taken up again after it expired (a re-listing shows what
exists, never what was deleted while the watch was away: a listed object that looks
unchanged proves nothing); and every few resync periods as a backstop (``handlers.RELIST_PERIODS``: a
healthy watch misses nothing).

Objects are compared by resourceVersion so that an older copy (a late watch event after
the operator's own write) never replaces a newer one. Kubernetes calls resourceVersions
opaque; every API server backed by etcd issues increasing integers, and where one is not
an integer the later arrival wins.

Services and ConfigMaps are not watched (one per job, made once): the cache remembers
those it created or found existing ("already exists" on create). Gang objects (Workload,
PodGroup) are not watched either: the cache remembers the fingerprint of the one it made
or found as wanted, so a pass reads the API only when the wanted gang changed.

No decisions here, and no I/O except through the ``Kube`` passed to ``resync``.
"""

from __future__ import annotations

import logging
from typing import Any, NamedTuple

from etj.api.constants import LABEL_JOB_NAME

log = logging.getLogger(__name__)

Key = tuple[str, str]  # (namespace, name)


class Seen(NamedTuple):
    """What a watch event did to the cache."""

    # It changed what a reconcile reads (a newer object, or one gone): worth a pass. The
    # echo of the operator's own write (its answer is already cached) is not.
    news: bool
    # A full resync is due (a re-listing: see ``on_job_event``).
    resync: bool


def _rv(obj: dict[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


def newer(candidate: dict[str, Any], current: dict[str, Any] | None) -> bool:
    """``candidate`` is at least as new as ``current``."""
    if current is None:
        return True
    a, b = _rv(candidate), _rv(current)
    if a.isdigit() and b.isdigit():
        return int(a) >= int(b)
    return True


def slim_job(obj: dict[str, Any]) -> dict[str, Any]:
    """The object without ``metadata.managedFields``: nothing a reconcile reads, and for a
    job whose status the operator writes, a copy of the status's shape (most of its size)."""
    meta = obj.get("metadata") or {}
    if "managedFields" not in meta:
        return obj
    return {**obj, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}


# The fields of a pod that the operator reads (``etj.core.reconcile.observe_pod`` and the
# reconciler's metrics address, Kueue group and cache bookkeeping), as dotted paths; ``[]``
# marks a list, whose every item keeps the rest of the path (so ``containers[0]`` is still
# the first container). A path keeps everything under it. A pod is cached as just these:
# the rest (the container's command, env, volumes, mounts, probes, tolerations, the
# kubelet's image ids and times) is most of a pod's size and nothing a pass reads, and
# 10,000 finished jobs keep their pods. A unit test reads a fully populated pod through
# every reader and checks each field read is declared here.
POD_METADATA_READ = frozenset(
    {
        "metadata.name",
        "metadata.namespace",
        "metadata.uid",
        "metadata.resourceVersion",
        "metadata.labels",
        "metadata.annotations",
        "metadata.deletionTimestamp",
        "metadata.finalizers",
    }
)
POD_SPEC_READ = frozenset(
    {
        "spec.nodeName",
        "spec.schedulingGates[].name",
        "spec.containers[].resources.limits.memory",
        "spec.containers[].ports[].name",
        "spec.containers[].ports[].containerPort",
    }
)
POD_STATUS_READ = frozenset(
    {
        "status.phase",
        "status.reason",
        "status.podIP",
        "status.conditions[].type",
        "status.conditions[].status",
        "status.conditions[].reason",
        "status.conditions[].message",
        "status.containerStatuses[].state",
        "status.containerStatuses[].lastState",
    }
)
POD_READ = POD_METADATA_READ | POD_SPEC_READ | POD_STATUS_READ

_Tree = dict[str, Any]  # key -> subtree, or True: the whole value


def _tree(paths: frozenset[str]) -> _Tree:
    tree: _Tree = {}
    for path in sorted(paths):
        node = tree
        *inner, last = path.replace("[]", "").split(".")
        for key in inner:
            sub = node.setdefault(key, {})
            if sub is True:
                break
            node = sub
        else:
            node[last] = True
    return tree


_POD_TREE = _tree(POD_READ)


def _keep(value: Any, tree: _Tree | bool) -> Any:
    if tree is True:
        return value
    if isinstance(value, dict):
        return {k: _keep(value[k], sub) for k, sub in tree.items() if k in value}  # type: ignore[union-attr]
    if isinstance(value, list):
        return [_keep(item, tree) for item in value]
    return value


def slim_pod(pod: dict[str, Any]) -> dict[str, Any]:
    """The pod as the cache keeps it: only the fields in ``POD_READ``."""
    slim: dict[str, Any] = _keep(pod, _POD_TREE)
    return slim


def _key(obj: dict[str, Any]) -> Key:
    meta = obj.get("metadata") or {}
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))


def _job_of(pod: dict[str, Any]) -> str | None:
    return ((pod.get("metadata") or {}).get("labels") or {}).get(LABEL_JOB_NAME)


class WatchCache:
    def __init__(self) -> None:
        self.jobs: dict[Key, dict[str, Any]] = {}
        self.pods: dict[Key, dict[str, dict[str, Any]]] = {}  # (ns, job) -> name -> pod
        # (kind, namespace, job) of the Services and ConfigMaps known to exist.
        self.children: set[tuple[str, str, str]] = set()
        # (namespace, job) -> fingerprint of its gang object as last made or found.
        self.gangs: dict[Key, str] = {}
        self.synced = False

    # ---- reads -------------------------------------------------------------------------

    def job(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.jobs.get((namespace, name))

    def namespace_jobs(self, namespace: str) -> list[dict[str, Any]]:
        """Every job of ``namespace`` (a warm start's candidate sources)."""
        return [obj for (ns, _), obj in self.jobs.items() if ns == namespace]

    def job_pods(self, namespace: str, job: str) -> list[dict[str, Any]]:
        return list(self.pods.get((namespace, job), {}).values())

    def has(self, kind: str, namespace: str, job: str) -> bool:
        return (kind, namespace, job) in self.children

    # ---- writes: the operator's own, and watch events ----------------------------------

    def put_job(self, obj: dict[str, Any]) -> bool:
        """Store a job if it is newer; True when it told the cache something new."""
        key = _key(obj)
        current = self.jobs.get(key)
        if not newer(obj, current) or (current is not None and _rv(current) == _rv(obj)):
            return False
        self.jobs[key] = slim_job(obj)
        return True

    def put_pod(self, obj: dict[str, Any]) -> bool:
        job = _job_of(obj)
        if job is None:
            return False
        ns, name = _key(obj)
        pods = self.pods.setdefault((ns, job), {})
        current = pods.get(name)
        if not newer(obj, current) or (current is not None and _rv(current) == _rv(obj)):
            return False
        pods[name] = slim_pod(obj)
        return True

    def put_child(self, kind: str, namespace: str, job: str) -> None:
        self.children.add((kind, namespace, job))

    def gang(self, namespace: str, job: str) -> str | None:
        return self.gangs.get((namespace, job))

    def put_gang(self, namespace: str, job: str, fingerprint: str) -> None:
        self.gangs[(namespace, job)] = fingerprint

    def forget_job(self, namespace: str, name: str) -> None:
        self.jobs.pop((namespace, name), None)
        self.pods.pop((namespace, name), None)
        self.children = {c for c in self.children if (c[1], c[2]) != (namespace, name)}
        self.gangs.pop((namespace, name), None)

    def forget_pod(self, namespace: str, job: str, name: str) -> None:
        self.pods.get((namespace, job), {}).pop(name, None)

    def on_job_event(self, event_type: str | None, obj: dict[str, Any]) -> Seen:
        """A watch event on a job: whether it told the cache anything new, and whether a
        full resync is due. One is due for a listed object (type None) after the first
        resync: kopf lists again only when its watch expired (410 Gone), and the objects
        deleted while it was away are simply absent from that listing, so no listed object
        can tell whether something is missing. Only a full resync (which drops what the API
        no longer has) can; it is due on every re-listing, whether or not the listed
        objects look new. (The listing kopf makes on start costs one more resync, once.)"""
        if event_type == "DELETED":
            known = _key(obj) in self.jobs
            self.forget_job(*_key(obj))
            return Seen(news=known, resync=False)
        return Seen(news=self.put_job(obj), resync=event_type is None and self.synced)

    def on_pod_event(self, event_type: str | None, obj: dict[str, Any]) -> Seen:
        """As ``on_job_event``, for one of the operator's pods."""
        if event_type == "DELETED":
            job = _job_of(obj)
            ns, name = _key(obj)
            known = job is not None and name in self.pods.get((ns, job), {})
            if job is not None:
                self.forget_pod(ns, job, name)
            return Seen(news=known, resync=False)
        return Seen(news=self.put_pod(obj), resync=event_type is None and self.synced)

    # ---- full resync --------------------------------------------------------------------

    def replace(
        self,
        jobs: list[dict[str, Any]],
        jobs_version: str,
        pods: list[dict[str, Any]],
        pods_version: str,
        namespace: str | None = None,
    ) -> None:
        """Take fresh lists (of ``namespace``, or of all) from the API: what they hold is
        stored (unless the cache has a newer copy), what they lack is dropped (unless it
        came after the list)."""

        def mine(key: Key) -> bool:
            return namespace is None or key[0] == namespace

        def after(obj: dict[str, Any], version: str) -> bool:
            v = _rv(obj)
            return v.isdigit() and version.isdigit() and int(v) > int(version)

        listed_jobs = {_key(j) for j in jobs}
        for key, job in list(self.jobs.items()):
            if mine(key) and key not in listed_jobs and not after(job, jobs_version):
                self.forget_job(*key)
        for j in jobs:
            self.put_job(j)
        listed_pods = {_key(p) for p in pods}
        for job_key, by_name in list(self.pods.items()):
            if not mine(job_key):
                continue
            kept = {
                n: p
                for n, p in by_name.items()
                if (job_key[0], n) in listed_pods or after(p, pods_version)
            }
            if kept:
                self.pods[job_key] = kept
            else:
                del self.pods[job_key]
        for p in pods:
            self.put_pod(p)
        self.synced = True
