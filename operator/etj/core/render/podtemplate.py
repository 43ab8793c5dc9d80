"""Merge a role's Pod template (``spec.replicas.<role>.template``) over the Pod etj renders.

Pure: a Pod dict and the template's wire form in, a new Pod dict out. The rules, in the
spirit of a strategic merge patch (lists of named things merge by name):

- ``metadata.labels`` / ``annotations``: the template's are added; etj's own keys win (the
  operator finds its pods by them).
- containers merge by name; ``trainer`` and TFJob's ``tensorflow`` are etj's container
  (it keeps the name ``trainer`` and stays first: the kubelet-less local node runs the first
  container). In it the template's ``env`` merges by name, ``volumeMounts`` by mountPath,
  ``ports`` by containerPort; every other key (command, args, image, workingDir, probes,
  securityContext, ...) replaces etj's. ``resources`` are not merged here:
  ``etj.core.render.pod`` folds them into the role's resources first, so the plan's memory
  floor still holds. Containers of other names are sidecars, appended.
- ``initContainers``, ``volumes``, ``imagePullSecrets``: merge by name (appended);
  ``tolerations``: appended; ``nodeSelector``: merged key by key; anything else
  (securityContext, schedulerName, affinity, topologySpreadConstraints, ...) replaces etj's.

A ``securityContext`` (the Pod's or the main container's) replaces etj's hardened one
whole rather than key by key: etj's ``runAsUser: 1000``, ``runAsNonRoot`` and
``readOnlyRootFilesystem`` would stop many images (TensorFlow's own run as root and write
outside /tmp), and a merge cannot remove a key. ``securityContext: {}`` runs the image as
it was built, as a TFJob does; ``etj convert`` writes that when the TFJob gives none.

What a template may not set at all (TF_CONFIG, ETJ_* env, restartPolicy, hostname, ...)
is refused by ``etj.api.podtemplate`` before rendering.
"""

from __future__ import annotations

import copy
from typing import Any

from etj.api.podtemplate import MAIN_CONTAINER_NAMES

_MERGE_BY_NAME = ("initContainers", "volumes", "imagePullSecrets")
_APPEND = ("tolerations",)
_MERGE_KEYS = ("nodeSelector",)


def _merge_list(base: list[Any], extra: list[Any], key: str) -> list[Any]:
    """``base`` with ``extra``'s items: an item with the same ``key`` replaces in place."""
    out = list(base)
    index = {item.get(key): i for i, item in enumerate(out) if isinstance(item, dict)}
    for item in extra:
        k = item.get(key) if isinstance(item, dict) else None
        if k is not None and k in index:
            out[index[k]] = item
        else:
            out.append(item)
    return out


def _merge_main(container: dict[str, Any], given: dict[str, Any]) -> dict[str, Any]:
    out = dict(container)
    if "image" in given and "command" not in given:
        out.pop("command", None)  # another image: its own entrypoint
    for key, value in given.items():
        if key in ("name", "resources"):
            continue
        if key == "env":
            out["env"] = _merge_list(out.get("env") or [], value or [], "name")
        elif key == "volumeMounts":
            out["volumeMounts"] = _merge_list(
                out.get("volumeMounts") or [], value or [], "mountPath"
            )
        elif key == "ports":
            out["ports"] = _merge_list(out.get("ports") or [], value or [], "containerPort")
        else:
            out[key] = value
    return out


def merge_pod_template(pod: dict[str, Any], template: dict[str, Any] | None) -> dict[str, Any]:
    """``pod`` with ``template`` (a PodTemplate's wire form) merged over it; a new dict."""
    out = copy.deepcopy(pod)
    if not template:
        return out
    template = copy.deepcopy(template)
    meta = out.setdefault("metadata", {})
    given_meta = template.get("metadata") or {}
    for key in ("labels", "annotations"):
        if given_meta.get(key):
            meta[key] = {**given_meta[key], **(meta.get(key) or {})}
    spec = out.setdefault("spec", {})
    for key, value in (template.get("spec") or {}).items():
        if key == "containers":
            containers = list(spec.get("containers") or [])
            for c in value:
                if c.get("name") in MAIN_CONTAINER_NAMES and containers:
                    containers[0] = _merge_main(containers[0], c)
                else:
                    containers = _merge_list(containers, [c], "name")
            spec["containers"] = containers
        elif key in _MERGE_BY_NAME:
            spec[key] = _merge_list(spec.get(key) or [], value or [], "name")
        elif key in _APPEND:
            spec[key] = [*(spec.get(key) or []), *(value or [])]
        elif key in _MERGE_KEYS and isinstance(value, dict):
            spec[key] = {**(spec.get(key) or {}), **value}
        else:
            spec[key] = value
    return out


def template_resources(template: dict[str, Any] | None) -> dict[str, Any] | None:
    """The ``resources`` of the template's main container, if it gives any."""
    for c in ((template or {}).get("spec") or {}).get("containers") or []:
        if isinstance(c, dict) and c.get("name") in MAIN_CONTAINER_NAMES:
            return c.get("resources") or None
    return None


def template_command(template: dict[str, Any] | None) -> list[str] | None:
    """The command of the template's main container, if it gives one (a custom program)."""
    for c in ((template or {}).get("spec") or {}).get("containers") or []:
        if isinstance(c, dict) and c.get("name") in MAIN_CONTAINER_NAMES and c.get("command"):
            return [str(a) for a in c["command"]]
    return None
