"""What the process-backed node makes of a pod's securityContext, as a kubelet would.

A pure function: a pod (as JSON) and the node's own uid in, how to start its process (or
the kubelet's refusal) out. The node has no image and no user namespace: a process runs as
the node's user (switching users would lock it out of the node's state directory). What it
does honour, as a kubelet does:

- ``runAsNonRoot`` with a uid that would be 0 (``runAsUser: 0``, or no ``runAsUser`` on a
  root node, whose "image user" is root) is refused: the container is not created and the
  pod stays Pending with ``CreateContainerConfigError``;
- ``allowPrivilegeEscalation: false`` sets ``no_new_privs`` on the process;
- ``capabilities.drop: [ALL]``, or a non-zero ``runAsUser`` on a root node (a non-root
  user has no capabilities), empties the capability bounding set before exec, so a process
  started by root runs with no capabilities at all.

It must not do I/O; ``etj.local.launch`` applies the result.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

REFUSED_REASON = "CreateContainerConfigError"


class Refused(Exception):
    """A kubelet would not create this container; the message says why (as a kubelet's)."""


@dataclass(frozen=True)
class ProcessSecurity:
    no_new_privs: bool = False
    drop_capabilities: bool = False


def process_security(pod: dict[str, Any], node_uid: int) -> ProcessSecurity:
    """How to start the pod's (single) container's process on a node running as ``node_uid``."""
    spec = pod["spec"]
    container = spec["containers"][0]
    pod_sc = spec.get("securityContext") or {}
    sc = container.get("securityContext") or {}

    def setting(key: str) -> Any:  # the container's value wins over the pod's
        return sc[key] if sc.get(key) is not None else pod_sc.get(key)

    uid = setting("runAsUser")
    where = f"pod: {pod['metadata'].get('name')}, container: {container['name']}"
    if setting("runAsNonRoot"):
        if uid == 0:
            raise Refused(f"container's runAsUser breaks non-root policy ({where})")
        if uid is None and node_uid == 0:
            raise Refused(f"container has runAsNonRoot and image will run as root ({where})")
    drop = (sc.get("capabilities") or {}).get("drop") or []
    return ProcessSecurity(
        no_new_privs=sc.get("allowPrivilegeEscalation") is False,
        drop_capabilities="ALL" in drop or (node_uid == 0 and uid not in (None, 0)),
    )
