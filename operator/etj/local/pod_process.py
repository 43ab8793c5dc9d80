"""A rendered Pod as a local process: command, environment, working files. Pure.

Volumes become directories: each container mount path is mapped to a local directory,
and every environment value that names a path under a mount is rewritten to the local
path, so the trainer finds its config and checkpoints without knowing it runs locally.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from etj.api.constants import LABEL_REPLICA_INDEX, LABEL_REPLICA_TYPE


@dataclass(frozen=True)
class ProcessSpec:
    name: str
    role: str
    index: int
    command: list[str]
    env: dict[str, str]


def _field_ref(pod: dict[str, Any], path: str) -> str:
    meta = pod.get("metadata") or {}
    if path == "metadata.name":
        return str(meta.get("name", ""))
    if path == "metadata.namespace":
        return str(meta.get("namespace", ""))
    return ""


def _map_path(value: str, mounts: dict[str, str]) -> str:
    # Longest mount first, so /a/b wins over /a.
    for mount in sorted(mounts, key=len, reverse=True):
        if value == mount or value.startswith(mount.rstrip("/") + "/"):
            return mounts[mount] + value[len(mount.rstrip("/")) :]
    return value


def pod_process(
    pod: dict[str, Any], volume_dirs: dict[str, str], command: list[str] | None = None
) -> ProcessSpec:
    """The process for a pod's single container.

    ``volume_dirs`` maps volume names to local directories; ``command`` replaces the
    container's command (a local interpreter instead of the image's ``python``).
    """
    container = pod["spec"]["containers"][0]
    labels = pod["metadata"].get("labels") or {}
    mounts = {
        m["mountPath"]: volume_dirs[m["name"]]
        for m in container.get("volumeMounts") or []
        if m["name"] in volume_dirs
    }
    env: dict[str, str] = {}
    for e in container.get("env") or []:
        if "value" in e:
            env[e["name"]] = _map_path(str(e["value"]), mounts)
        elif "fieldRef" in (e.get("valueFrom") or {}):
            env[e["name"]] = _field_ref(pod, e["valueFrom"]["fieldRef"]["fieldPath"])
    return ProcessSpec(
        name=pod["metadata"]["name"],
        # Any pod, not only a replica (the process-backed node runs the operator's too).
        role=labels.get(LABEL_REPLICA_TYPE, ""),
        index=int(labels.get(LABEL_REPLICA_INDEX, 0)),
        # No command: the image's entrypoint, which only the caller can know (empty here).
        command=list(command or container.get("command") or []) + list(container.get("args") or []),
        env=env,
    )
