"""An in-memory stand-in for ``etj.controller.kube.Kube``: objects with resourceVersions, every call
logged in order, so tests can count requests and see what came before what."""

from __future__ import annotations

import copy
import itertools
from typing import Any

from kubernetes.client.rest import ApiException

from etj.api.constants import (
    KUEUE_POD_FINALIZER,
    KUEUE_RETRIABLE_IN_GROUP_ANNOTATION,
    LABEL_JOB_NAME,
)

_versions = itertools.count(100)


def stamp(obj: dict[str, Any]) -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    obj.setdefault("metadata", {})["resourceVersion"] = str(next(_versions))
    return obj


class FakeKube:
    def __init__(self) -> None:
        self.jobs: dict[tuple[str, str], dict[str, Any]] = {}
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}  # kind, ns, name
        self.log: list[tuple[str, ...]] = []
        self.fail_status_patch = False
        # What apply_gang raises (e.g. etj.controller.kube.ApiRefused), if anything.
        self.gang_refusal: Exception | None = None
        # Kueue's Workloads by (namespace, name): the uids of the pods that own each.
        self.queue_workloads: dict[tuple[str, str], set[str]] = {}
        self._uids = itertools.count(1)

    # ---- test set-up -------------------------------------------------------------------

    def add_job(self, obj: dict[str, Any]) -> dict[str, Any]:
        stored = stamp(obj)
        meta = stored["metadata"]
        self.jobs[(meta["namespace"], meta["name"])] = stored
        return stored

    def set_pod_status(self, namespace: str, name: str, status: dict[str, Any]) -> dict[str, Any]:
        pod = self.objects[("Pod", namespace, name)]
        pod = stamp({**pod, "status": status})
        self.objects[("Pod", namespace, name)] = pod
        return pod

    def calls(self, verb: str) -> list[tuple[str, ...]]:
        return [c for c in self.log if c[0] == verb]

    def pods(self, namespace: str) -> list[dict[str, Any]]:
        return [o for (k, ns, _), o in self.objects.items() if k == "Pod" and ns == namespace]

    # ---- the Kube interface ------------------------------------------------------------

    async def get_job(self, namespace: str, name: str) -> dict[str, Any] | None:
        self.log.append(("get", "job", name))
        job = self.jobs.get((namespace, name))
        return copy.deepcopy(job) if job else None

    async def list_job_pods(self, namespace: str, job_name: str) -> list[dict[str, Any]]:
        self.log.append(("list", "pods", job_name))
        return [
            copy.deepcopy(p)
            for p in self.pods(namespace)
            if p["metadata"]["labels"].get(LABEL_JOB_NAME) == job_name
        ]

    async def exists(self, kind: str, namespace: str, name: str) -> bool:
        self.log.append(("get", kind, name))
        return (kind, namespace, name) in self.objects

    async def list_jobs(
        self, namespace: str | None, keep: Any = None
    ) -> tuple[list[dict[str, Any]], str]:
        self.log.append(("list", "jobs", str(namespace)))
        keep = keep or (lambda o: o)
        return [keep(copy.deepcopy(j)) for j in self.jobs.values()], str(next(_versions))

    async def list_managed_pods(
        self, namespace: str | None, keep: Any = None
    ) -> tuple[list[dict[str, Any]], str]:
        self.log.append(("list", "pods", str(namespace)))
        keep = keep or (lambda o: o)
        pods = [keep(copy.deepcopy(p)) for p in self.objects.values() if p["kind"] == "Pod"]
        return pods, str(next(_versions))

    async def create(self, obj: dict[str, Any]) -> dict[str, Any] | None:
        meta = obj["metadata"]
        key = (obj["kind"], meta["namespace"], meta["name"])
        self.log.append(("create", obj["kind"], meta["name"]))
        if key in self.objects:
            return None
        stored = stamp(obj)
        stored["metadata"]["uid"] = f"uid-{next(self._uids)}"
        self.objects[key] = stored
        return copy.deepcopy(stored)

    async def claim_access_modes(self, namespace: str, name: str) -> list[str] | None:
        self.log.append(("get", "PersistentVolumeClaim", name))
        claim = self.objects.get(("PersistentVolumeClaim", namespace, name))
        return list(claim["spec"].get("accessModes") or []) if claim else None

    async def get_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        self.log.append(("get", "PersistentVolumeClaim", name))
        claim = self.objects.get(("PersistentVolumeClaim", namespace, name))
        return copy.deepcopy(claim) if claim else None

    async def delete_pod(self, namespace: str, name: str, force: bool = False) -> bool:
        self.log.append(("delete", "Pod", name, *(("force",) if force else ())))
        return self.objects.pop(("Pod", namespace, name), None) is not None

    async def mark_pod_unretriable(self, namespace: str, name: str) -> dict[str, Any] | None:
        self.log.append(("mark-unretriable", "Pod", name))
        pod = self.objects.get(("Pod", namespace, name))
        if pod is None:
            return None
        annotations = pod["metadata"].setdefault("annotations", {})
        annotations[KUEUE_RETRIABLE_IN_GROUP_ANNOTATION] = "false"
        self.objects[("Pod", namespace, name)] = stamp(pod)
        return copy.deepcopy(self.objects[("Pod", namespace, name)])

    async def release_pod(self, namespace: str, name: str) -> bool:
        """Kueue's finalizer goes; a pod being deleted that nothing else holds goes with it."""
        self.log.append(("release", "Pod", name))
        pod = self.objects.get(("Pod", namespace, name))
        if pod is None:
            return False
        meta = pod["metadata"]
        meta["finalizers"] = [f for f in meta.get("finalizers") or [] if f != KUEUE_POD_FINALIZER]
        if meta.get("deletionTimestamp") and not meta["finalizers"]:
            del self.objects[("Pod", namespace, name)]
        else:
            self.objects[("Pod", namespace, name)] = stamp(pod)
        return True

    async def queue_workload_owners(self, namespace: str, name: str) -> frozenset[str] | None:
        self.log.append(("get", "queue-workload", name))
        owners = self.queue_workloads.get((namespace, name))
        return None if owners is None else frozenset(owners)

    async def patch_job_status(
        self, namespace: str, name: str, status: dict[str, Any]
    ) -> dict[str, Any]:
        self.log.append(("patch", "status", name))
        if self.fail_status_patch:
            raise ApiException(status=500, reason="etcd timeout")
        job = stamp({**self.jobs[(namespace, name)], "status": copy.deepcopy(status)})
        self.jobs[(namespace, name)] = job
        return copy.deepcopy(job)

    async def delete_job(self, namespace: str, name: str) -> None:
        self.log.append(("delete", "job", name))
        self.jobs.pop((namespace, name), None)

    # ---- gang objects ------------------------------------------------------------------

    async def get_gang(self, api: Any, namespace: str, name: str) -> dict[str, Any] | None:
        self.log.append(("get", api.kind, name))
        found = self.objects.get((api.kind, namespace, name))
        return copy.deepcopy(found) if found else None

    async def apply_gang(self, obj: dict[str, Any], existing: dict[str, Any] | None) -> None:
        meta = obj["metadata"]
        self.log.append(("apply", obj["kind"], meta["name"]))
        if self.gang_refusal is not None:
            raise self.gang_refusal
        self.objects[(obj["kind"], meta["namespace"], meta["name"])] = stamp(obj)
