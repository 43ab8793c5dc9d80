"""Names as the API server checks them (k8s.io/apimachinery's validation), for the job's
own name and for every name etj derives from it.

The job is a custom resource, whose name the API server checks as a DNS-1123 subdomain;
etj names its objects after it — the Service ``<job>`` (a DNS-1035 label), the pods
``<job>-<role>-<index>`` whose hostname is the pod name (a DNS-1123 label), the trainer
ConfigMap, the gang object, label values — so the job's name must be a DNS-1123 label and
every derived name must pass its own kind's rule. ``object_name_problems`` checks the
objects as rendered (``etj.core.render.build_objects``), so a limit is never a copy of how a
name is made.

Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

LABEL_MAX = 63
SUBDOMAIN_MAX = 253
DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
DNS1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")

# (pattern, longest, what it is) per rule.
_RULES = {
    "label": (
        DNS1123_LABEL,
        LABEL_MAX,
        "a DNS-1123 label: lowercase letters, digits and '-', starting and ending with a "
        "letter or digit",
    ),
    "subdomain": (
        DNS1123_SUBDOMAIN,
        SUBDOMAIN_MAX,
        "a DNS-1123 subdomain: lowercase letters, digits, '-' and '.', starting and ending "
        "with a letter or digit",
    ),
    "dns1035": (
        DNS1035_LABEL,
        LABEL_MAX,
        "a DNS-1035 label: lowercase letters, digits and '-', starting with a letter and "
        "ending with a letter or digit",
    ),
    "label-value": (
        LABEL_VALUE,
        LABEL_MAX,
        "a label value: letters, digits, '-', '_' and '.', starting and ending with a letter "
        "or digit",
    ),
}


def name_problem(value: str, rule: str) -> str | None:
    """Why ``value`` fails ``rule`` (label, subdomain, dns1035, label-value), else None."""
    pattern, longest, what = _RULES[rule]
    if len(value) > longest:
        return f"{len(value)} characters; at most {longest} ({what.split(':')[0]})"
    if not pattern.fullmatch(value):
        return f"must be {what}"
    return None


def job_name_problem(name: str) -> str | None:
    """Why a job's metadata.name cannot be used, else None."""
    why = name_problem(name, "label")
    if why is None:
        return None
    return f"{name!r}: {why} (etj names the job's pods, hostnames and Service after it)"


def _named(obj: dict[str, Any]) -> Iterable[tuple[str, str, str]]:
    """(what, value, rule) for every name in one rendered object the API server checks."""
    kind = obj.get("kind", "")
    meta = obj.get("metadata") or {}
    # Services are DNS-1035 labels (RelaxedServiceNameValidation is off by default).
    yield f"the {kind} name", meta.get("name", ""), "dns1035" if kind == "Service" else "subdomain"
    if kind == "Pod":
        spec = obj.get("spec") or {}
        for key in ("hostname", "subdomain"):
            if key in spec:
                yield f"the pod {meta.get('name')}'s {key}", spec[key], "label"
    for key, value in (meta.get("labels") or {}).items():
        yield f"the label {key}", value, "label-value"


def object_name_problems(objects: Iterable[dict[str, Any]]) -> list[str]:
    """Every derived name of the rendered objects that the API server would refuse, one
    line each (the same failure on many objects, e.g. every pod's label, said once)."""
    out: list[str] = []
    for obj in objects:
        for what, value, rule in _named(obj):
            why = name_problem(value, rule)
            line = f"{what} {value!r} {why}" if why else None
            if line and line not in out:
                out.append(line)
    return out
