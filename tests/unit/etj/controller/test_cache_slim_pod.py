"""controller/cache keeps a pod as only the fields the operator reads (``POD_READ``): a
rendered pod, fully populated the way the API server and a kubelet fill it, is read through
every reader of cached pods (observe_pod, the metrics address, the Kueue group, the cache's
bookkeeping) and every field read is declared; they read the same from the slim pod as from
the whole one, which is a fraction of its size."""

from __future__ import annotations

import copy
import json
from typing import Any

from etj.api.constants import (
    ANNOTATION_METRICS_ADDRESS,
    KUEUE_ADMISSION_GATE,
    KUEUE_POD_FINALIZER,
    KUEUE_POD_GROUP_NAME_LABEL,
    KUEUE_TERMINATION_CONDITION,
    LABEL_JOB_NAME,
)
from etj.controller.cache import POD_READ, WatchCache, slim_pod
from etj.controller.reconciler import _metrics_address
from etj.controller.settings import OperatorSettings
from etj.core.reconcile import observe_pod
from tests.unit.etj.controller.test_reconciler import NS, Setup

TERMINATED = {
    "exitCode": 137,
    "reason": "OOMKilled",
    "message": "EtjOutOfMemory: the ps ran out",
    "startedAt": "2026-01-01T00:00:00Z",
    "finishedAt": "2026-01-01T00:05:00Z",
    "containerID": "containerd://abc",
}
CONDITION = {
    "status": "True",
    "reason": "Why",
    "message": "because",
    "lastProbeTime": None,
    "lastTransitionTime": "2026-01-01T00:00:00Z",
    "observedGeneration": 1,
}


def full_pods() -> list[dict[str, Any]]:
    """A job's pods as rendered, with every field the API server and a kubelet add."""
    s = Setup()
    s.run()
    out = []
    for i, rendered in enumerate(s.api.pods(NS)):
        pod = copy.deepcopy(rendered)
        meta = pod["metadata"]
        meta.update(
            uid=f"uid-{i}",
            creationTimestamp="2026-01-01T00:00:00Z",
            deletionTimestamp="2026-01-01T00:06:00Z",
            deletionGracePeriodSeconds=30,
            finalizers=[KUEUE_POD_FINALIZER],
            ownerReferences=[{"kind": "EmbeddingTrainingJob", "name": "ctr", "uid": "u-1"}],
            managedFields=[{"manager": "etj", "fieldsV1": {"f:spec": {"f:containers": {}}}}],
        )
        meta["labels"][KUEUE_POD_GROUP_NAME_LABEL] = "ctr-group"
        if i % 2:
            meta.setdefault("annotations", {})[ANNOTATION_METRICS_ADDRESS] = "127.0.0.1:9000"
        pod["spec"].update(
            nodeName="node-1",
            schedulingGates=[{"name": KUEUE_ADMISSION_GATE}],
            tolerations=[{"key": "k", "operator": "Exists"}],
        )
        pod["status"] = {
            "phase": "Running",
            "reason": "NodeLost" if i == 0 else None,
            "podIP": "10.0.0.1",
            "podIPs": [{"ip": "10.0.0.1"}],
            "hostIP": "10.1.0.1",
            "qosClass": "Burstable",
            "startTime": "2026-01-01T00:00:00Z",
            "conditions": [
                {"type": t, **CONDITION}
                for t in (
                    "Ready",
                    "PodScheduled",
                    "DisruptionTarget",
                    KUEUE_TERMINATION_CONDITION,
                    "Initialized",
                )
            ],
            "containerStatuses": [
                {
                    "name": "trainer",
                    "ready": True,
                    "restartCount": 1,
                    "image": "etj:dev",
                    "imageID": "sha256:" + "0" * 64,
                    "containerID": "containerd://def",
                    "started": True,
                    "state": {"running": {"startedAt": "2026-01-01T00:05:01Z"}}
                    if i % 2
                    else {"terminated": TERMINATED},
                    "lastState": {"terminated": TERMINATED},
                }
            ],
        }
        out.append(pod)
    return out


class Reads:
    """Records the dotted path (``[]`` for a list's items) of every field read."""

    def __init__(self) -> None:
        self.paths: set[str] = set()

    def wrap(self, value: Any, path: str) -> Any:
        if isinstance(value, dict):
            return Tracked(self, path, value)
        if isinstance(value, list):
            return [self.wrap(v, f"{path}[]") for v in value]
        return value


class Tracked(dict[str, Any]):
    def __init__(self, reads: Reads, path: str, value: dict[str, Any]) -> None:
        super().__init__(value)
        self._reads, self._path = reads, path

    def _at(self, key: str) -> str:
        path = f"{self._path}.{key}" if self._path else key
        self._reads.paths.add(path)
        return path

    def __getitem__(self, key: str) -> Any:
        return self._reads.wrap(super().__getitem__(key), self._at(key))

    def get(self, key: str, default: Any = None) -> Any:
        path = self._at(key)
        return self._reads.wrap(super().get(key, default), path)

    def __contains__(self, key: object) -> bool:
        self._at(str(key))
        return super().__contains__(key)

    def keys(self) -> Any:  # nothing reads a whole level
        raise AssertionError(f"{self._path}: every key read")


def _read_all(pods: list[dict[str, Any]], reads: Reads | None = None) -> list[Any]:
    """What every reader of cached pods gets from ``pods``."""
    wrap = (lambda p: reads.wrap(p, "")) if reads else (lambda p: p)
    seen = [observe_pod(wrap(p)) for p in pods]
    seen.append(_metrics_address([wrap(p) for p in pods], OperatorSettings()))
    for p in pods:
        # The reconciler's Kueue group, the cache's keys and versions.
        meta = wrap(p)["metadata"]
        seen.append(
            (
                (meta.get("labels") or {}).get(KUEUE_POD_GROUP_NAME_LABEL),
                meta.get("namespace"),
                meta.get("name"),
                meta.get("resourceVersion"),
                (meta.get("labels") or {}).get(LABEL_JOB_NAME),
            )
        )
    # Both ways of finding the metrics address: annotated, and podIP:port.
    seen.append(_metrics_address([wrap(p) for p in pods[::2]], OperatorSettings()))
    return seen


def _covered(path: str) -> bool:
    """``path`` is declared, under a declared path, or on the way to one."""
    return any(
        path == d
        or any(a.startswith(b + ".") or a.startswith(b + "[") for a, b in ((path, d), (d, path)))
        for d in POD_READ
    )


def test_every_field_a_reader_of_cached_pods_reads_is_declared():
    reads = Reads()
    _read_all(full_pods(), reads)
    assert reads.paths  # the tracking works
    assert {p for p in reads.paths if not _covered(p)} == set()


def test_the_slim_pod_reads_the_same_as_the_whole_one_at_a_fraction_of_its_size():
    pods = full_pods()
    slim = [slim_pod(p) for p in pods]
    assert _read_all(slim) == _read_all(pods)
    assert all(len(json.dumps(s)) < len(json.dumps(p)) / 2 for s, p in zip(slim, pods, strict=True))
    assert "managedFields" not in slim[0]["metadata"]
    assert slim[0]["spec"]["containers"][0].keys() <= {"resources", "ports"}


def test_the_cache_keeps_slim_pods():
    cache = WatchCache()
    pod = full_pods()[0]
    whole = copy.deepcopy(pod)
    cache.on_pod_event("ADDED", pod)
    (kept,) = cache.job_pods(NS, "ctr")
    assert kept == slim_pod(whole)
    assert pod == whole  # the caller's object is left alone
