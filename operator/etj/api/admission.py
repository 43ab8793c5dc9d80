"""No host access or privilege through a job: the chart's admission policy and the same
check in ``etj validate``, from one declaration.

The operator creates pods from what a job says (a replica's PodTemplateSpec is merged over
etj's own pod, the checkpoint and data volumes are any volume source), so whoever may
create an EmbeddingTrainingJob could otherwise have the operator's ServiceAccount create
pods they may not create themselves. Each ``Check`` below names where it looks (a
``Scope``: every replica template's pod spec, every container, every volume source, every
mount), the field, and the value refused; from it come

- a CEL expression of a ``ValidatingAdmissionPolicy`` (``policy()``; the chart's
  ``templates/admission-policy.yaml`` is generated from it by ``make crds`` and a test
  fails when the committed file differs), and
- the Python check ``host_access_problems`` that ``etj validate`` applies, naming the field.

A namespace labelled ``training.etj.dev/allow-privileged: "true"`` (a cluster admin's
decision) is exempt: the binding's namespaceSelector leaves it out; ``etj validate
--allow-privileged`` says the same offline.

Pure: no I/O, no environment; works on the job's wire form (a dict), as the API server does.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import yaml

from etj.api.constants import GROUP, PLURAL
from etj.api.roles import ALL_ROLES

# The namespace label by which a cluster admin lets jobs there ask for host access.
ALLOW_PRIVILEGED_LABEL = f"{GROUP}/allow-privileged"
_OPT_IN = f'a cluster admin may label the namespace {ALLOW_PRIVILEGED_LABEL}="true" to allow it'

# The roles whose ``spec.replicas.<role>.template`` is merged over the pod.
TEMPLATE_ROLES = tuple(r.value for r in ALL_ROLES)
# What the Pod Security "restricted" level lets a container add.
ALLOWED_CAPABILITIES = ("NET_BIND_SERVICE",)
# Directories a mount may not cover (nor be above: "/" or "/var" hide them too).
SYSTEM_PATHS = (
    "/bin",
    "/boot",
    "/dev",
    "/etc",
    "/lib",
    "/lib32",
    "/lib64",
    "/proc",
    "/root",
    "/run",
    "/sbin",
    "/sys",
    "/usr",
    "/var/run",
)


def _system_path_regex() -> str:
    inside = "|".join(re.escape(p[1:]) for p in SYSTEM_PATHS)
    parents = sorted({p.rsplit("/", 1)[0][1:] for p in SYSTEM_PATHS if p.count("/") > 1})
    above = "|".join(re.escape(p) + "/?" for p in parents)
    # RE2 (CEL's matches) and Python's re read this the same way.
    return f"^/(({inside})(/.*)?|{above})?$"


SYSTEM_PATH_RE = _system_path_regex()
# "//", "." or ".." segments: such a path could name a system path in another spelling.
UNCLEAN_PATH_RE = r"//|(^|/)\.\.?(/|$)"


@dataclass(frozen=True)
class Scope:
    """A set of places in a job, each holding an item the checks look at.

    ``routes``: paths from the job to an item; a last segment ending in ``[]`` is a list of
    items. ``parent`` + ``field``: the items of list ``field`` of every item of ``parent``.
    """

    name: str
    what: str  # in messages: "a template's container", ...
    routes: tuple[str, ...] = ()
    parent: Scope | None = None
    field: str = ""


PODS = Scope(
    "pods", "a replica template", tuple(f"spec.replicas.{r}.template.spec" for r in TEMPLATE_ROLES)
)
CONTAINERS = Scope(
    "containers",
    "a replica template's container",
    tuple(
        f"spec.replicas.{r}.template.spec.{kind}[]"
        for r in TEMPLATE_ROLES
        for kind in ("containers", "initContainers", "ephemeralContainers")
    ),
)
VOLUMES = Scope(
    "volumes",
    "a volume (checkpoint.volume, data.files.volume or a template's)",
    (
        *(f"spec.replicas.{r}.template.spec.volumes[]" for r in TEMPLATE_ROLES),
        "spec.checkpoint.volume",
        "spec.data.files.volume",
    ),
)
# The checkpoint spec has its mountPath under the same name as a volumeMount.
MOUNTS = Scope(
    "mounts",
    "checkpoint.mountPath or a template's volumeMount",
    ("spec.checkpoint",),
    parent=CONTAINERS,
    field="volumeMounts",
)
PORTS = Scope("ports", "a container port", parent=CONTAINERS, field="ports")
SCOPES = (PODS, CONTAINERS, VOLUMES)  # the ones with routes of their own: policy variables


# How a field's value is refused. Each kind has its CEL and its Python side by side.
@dataclass(frozen=True)
class Check:
    """One refused thing: ``field`` (a dotted path inside each item of ``scope``) with a
    value that ``kind``/``arg`` refuse; ``why`` is the message's reason."""

    name: str
    scope: Scope
    field: str
    kind: str  # equals | present | nonzero | beyond | matches
    arg: Any
    why: str

    def refused(self, value: Any) -> bool:
        """The Python side of ``cel_refused``; ``value`` is present."""
        if self.kind == "equals":
            return _cel_equal(value, self.arg)
        if self.kind == "present":
            return True
        if self.kind == "nonzero":
            return not _cel_equal(value, 0)
        # A value of another type than the field's is refused, as by the CEL.
        if self.kind == "beyond":
            return not isinstance(value, list) or any(v not in self.arg for v in value)
        if self.kind == "matches":
            return not isinstance(value, str) or re.search(self.arg, value) is not None
        raise ValueError(self.kind)  # pragma: no cover - the kinds are fixed below

    def cel_refused(self, item: str) -> str:
        """CEL: whether ``item`` (a CEL variable) has the refused value."""
        opt = item + "".join(f".?{part}" for part in self.field.split("."))
        if self.kind == "equals":
            return f"{opt}.orValue(null) == {_cel_literal(self.arg)}"
        if self.kind == "present":
            return f"{opt}.hasValue()"
        if self.kind == "nonzero":
            return f"{opt}.orValue(0) != 0"
        # A value of another type is refused with the check's own message (an expression
        # that errors would deny with CEL's).
        if self.kind == "beyond":
            value = f"{opt}.orValue([])"
            allowed = _cel_literal(list(self.arg))
            return f"(type({value}) != list || !{value}.all(v, v in {allowed}))"
        if self.kind == "matches":
            value = f"{opt}.orValue('')"
            return f"(type({value}) != string || {value}.matches({_cel_literal(self.arg)}))"
        raise ValueError(self.kind)  # pragma: no cover

    @property
    def shown(self) -> str:
        """The refused setting as a user would write it."""
        if self.kind == "equals":
            return f"{self.field}: {_cel_literal(self.arg).strip(chr(39))}"
        return self.field

    @property
    def message(self) -> str:
        """The policy's message (one line; ``etj validate`` names the field instead)."""
        return f"{self.scope.what} may not set {self.shown} ({self.why}); {_OPT_IN}"


def _cel_equal(a: Any, b: Any) -> bool:
    """CEL's heterogeneous equality: numbers by value (0 == 0.0), a bool only to a bool."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    return type(a) is type(b) and bool(a == b)


def _cel_literal(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if isinstance(value, list):
        return "[" + ", ".join(_cel_literal(v) for v in value) + "]"
    raise TypeError(value)  # pragma: no cover


_ROOT = "jobs do not run as root"
_SECCOMP = "jobs keep the kernel's syscall filter"
_APPARMOR = "jobs keep the node's AppArmor confinement"

CHECKS: tuple[Check, ...] = (
    Check(
        "host-network", PODS, "hostNetwork", "equals", True, "the node's network is not for jobs"
    ),
    Check("host-pid", PODS, "hostPID", "equals", True, "the node's processes are not for jobs"),
    Check("host-ipc", PODS, "hostIPC", "equals", True, "the node's IPC is not for jobs"),
    Check("pod-run-as-root", PODS, "securityContext.runAsUser", "equals", 0, _ROOT),
    Check("pod-run-as-non-root", PODS, "securityContext.runAsNonRoot", "equals", False, _ROOT),
    Check(
        "pod-seccomp", PODS, "securityContext.seccompProfile.type", "equals", "Unconfined", _SECCOMP
    ),
    Check(
        "pod-apparmor",
        PODS,
        "securityContext.appArmorProfile.type",
        "equals",
        "Unconfined",
        _APPARMOR,
    ),
    Check(
        "pod-host-process",
        PODS,
        "securityContext.windowsOptions.hostProcess",
        "equals",
        True,
        "host processes are not for jobs",
    ),
    Check(
        "privileged",
        CONTAINERS,
        "securityContext.privileged",
        "equals",
        True,
        "a privileged container has the node's devices and every capability",
    ),
    Check(
        "privilege-escalation",
        CONTAINERS,
        "securityContext.allowPrivilegeEscalation",
        "equals",
        True,
        "a process could gain more privilege than its parent, through setuid say",
    ),
    Check(
        "capabilities",
        CONTAINERS,
        "securityContext.capabilities.add",
        "beyond",
        ALLOWED_CAPABILITIES,
        f"only {', '.join(ALLOWED_CAPABILITIES)} may be added",
    ),
    Check("run-as-root", CONTAINERS, "securityContext.runAsUser", "equals", 0, _ROOT),
    Check("run-as-non-root", CONTAINERS, "securityContext.runAsNonRoot", "equals", False, _ROOT),
    Check(
        "seccomp",
        CONTAINERS,
        "securityContext.seccompProfile.type",
        "equals",
        "Unconfined",
        _SECCOMP,
    ),
    Check(
        "apparmor",
        CONTAINERS,
        "securityContext.appArmorProfile.type",
        "equals",
        "Unconfined",
        _APPARMOR,
    ),
    Check(
        "proc-mount",
        CONTAINERS,
        "securityContext.procMount",
        "equals",
        "Unmasked",
        "an unmasked /proc shows the node's kernel settings",
    ),
    Check(
        "host-process",
        CONTAINERS,
        "securityContext.windowsOptions.hostProcess",
        "equals",
        True,
        "host processes are not for jobs",
    ),
    Check("host-port", PORTS, "hostPort", "nonzero", None, "the node's ports are not for jobs"),
    Check("host-path", VOLUMES, "hostPath", "present", None, "the node's files are not for jobs"),
    Check(
        "system-path",
        MOUNTS,
        "mountPath",
        "matches",
        SYSTEM_PATH_RE,
        "a mount over a system directory, or above one, replaces the container's own files: "
        + ", ".join(SYSTEM_PATHS),
    ),
    Check(
        "unclean-path",
        MOUNTS,
        "mountPath",
        "matches",
        UNCLEAN_PATH_RE,
        "a mount path with //, . or .. segments could name a system directory",
    ),
)


# --- Python: the items of a scope, each with its field path ---------------------------


def _route_items(job: Any, route: str) -> Iterator[tuple[str, Any]]:
    node: Any = job
    parts = route.split(".")
    for part in parts[:-1]:
        node = node.get(part) if isinstance(node, dict) else None
    last = parts[-1]
    if not isinstance(node, dict):
        return
    if last.endswith("[]"):
        items = node.get(last[:-2])
        for i, item in enumerate(items if isinstance(items, list) else []):
            yield f"{route[:-2]}[{i}]", item
    elif last in node:
        yield route, node[last]


def scope_items(job: Any, scope: Scope) -> Iterator[tuple[str, Any]]:
    """Every item of ``scope`` in ``job`` (its wire form), with the item's field path."""
    for route in scope.routes:
        yield from _route_items(job, route)
    if scope.parent is not None:
        for path, parent in scope_items(job, scope.parent):
            items = parent.get(scope.field) if isinstance(parent, dict) else None
            for i, item in enumerate(items if isinstance(items, list) else []):
                yield f"{path}.{scope.field}[{i}]", item


def _field(item: Any, field: str) -> tuple[bool, Any]:
    node = item
    for part in field.split("."):
        if not isinstance(node, dict) or part not in node:
            return False, None
        node = node[part]
    return True, node


def host_access_problems(job: Any) -> list[tuple[str, str]]:
    """(field, why) for every place ``job`` asks for host access or privilege."""
    out: list[tuple[str, str]] = []
    for check in CHECKS:
        for path, item in scope_items(job, check.scope):
            present, value = _field(item, check.field)
            if present and check.refused(value):
                out.append((f"{path}.{check.field}", f"{check.why}; {_OPT_IN}"))
    return out


# --- CEL: the same as a ValidatingAdmissionPolicy ------------------------------------


def _cel_route(route: str) -> str:
    """CEL for a route: a list of its items (a missing single item is ``{}``, which no
    check refuses)."""
    parts = route.removesuffix("[]").split(".")
    opt = "object." + parts[0] + "".join(f".?{p}" for p in parts[1:])
    # dyn(): a list literal of a map is list(dyn), the lists of a route's field are dyn,
    # and a list literal of both would not type-check.
    return f"{opt}.orValue([])" if route.endswith("[]") else f"dyn([{opt}.orValue({{}})])"


def scope_variable(scope: Scope) -> str:
    """A policy variable: the lists of the scope's items (CEL has no flatten everywhere)."""
    return "[" + ", ".join(_cel_route(r) for r in scope.routes) + "]"


def cel_expression(check: Check) -> str:
    """The policy's validation: true when no item of the check's scope is refused."""
    ok = f"!({check.cel_refused('x')})"
    return _cel_all(check.scope, "x", ok)


def _cel_all(scope: Scope, var: str, body: str) -> str:
    """CEL: ``body`` holds for every item ``var`` of ``scope``."""
    terms = []
    if scope.routes and scope in SCOPES:
        terms.append(f"variables.{scope.name}.all(l, l.all({var}, {body}))")
    elif scope.routes:
        terms += [f"{_cel_route(r)}.all({var}, {body})" for r in scope.routes]
    if scope.parent is not None:
        inner = f"p.?{scope.field}.orValue([]).all({var}, {body})"
        terms.append(_cel_all(scope.parent, "p", inner))
    return " && ".join(terms)


def policy(name: str = "etj-no-host-access") -> dict[str, Any]:
    """The ValidatingAdmissionPolicy refusing jobs that ask for host access or privilege."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [GROUP],
                        "apiVersions": ["*"],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": [PLURAL],
                    }
                ]
            },
            # An update that leaves the spec alone (the operator's own patches of a job
            # admitted before the policy, say) is not judged again.
            "matchConditions": [
                {
                    "name": "spec-written",
                    "expression": (
                        "request.operation == 'CREATE' || !has(oldObject.spec) "
                        "|| !has(object.spec) || object.spec != oldObject.spec"
                    ),
                }
            ],
            "variables": [{"name": s.name, "expression": scope_variable(s)} for s in SCOPES],
            "validations": [
                {"expression": cel_expression(c), "message": c.message, "reason": "Forbidden"}
                for c in CHECKS
            ],
        },
    }


def binding(policy_name: str = "etj-no-host-access") -> dict[str, Any]:
    """The binding: every namespace but those a cluster admin labelled to allow it."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": policy_name},
        "spec": {
            "policyName": policy_name,
            "validationActions": ["Deny"],
            "matchResources": {
                "namespaceSelector": {
                    "matchExpressions": [
                        {"key": ALLOW_PRIVILEGED_LABEL, "operator": "NotIn", "values": ["true"]}
                    ]
                }
            },
        },
    }


# --- The chart's template ------------------------------------------------------------

CHART_TEMPLATE = "charts/etj/templates/admission-policy.yaml"
_HELM = {
    "ETJ_NAME": '{{ include "etj.fullname" . }}',
    "labels: ETJ_LABELS": 'labels: {{- include "etj.labels" . | nindent 4 }}',
    "validationActions: ETJ_ACTIONS": (
        "validationActions: {{ toJson .Values.admissionPolicy.validationActions }}"
    ),
}


class _Dumper(yaml.SafeDumper):
    """Block-style YAML, keys in the order written."""


def chart_template() -> str:
    """The chart's ``templates/admission-policy.yaml`` (a test fails when they differ)."""
    name = "ETJ_NAME-no-host-access"
    docs = []
    for doc in (policy(name), binding(name)):
        doc["metadata"]["labels"] = "ETJ_LABELS"
        docs.append(doc)
    docs[1]["spec"]["validationActions"] = "ETJ_ACTIONS"
    body = "---\n".join(
        yaml.dump(d, Dumper=_Dumper, sort_keys=False, width=100, default_flow_style=False)
        for d in docs
    )
    assert "{{" not in body, "a CEL expression would read as a helm action"
    for token, helm in _HELM.items():
        body = body.replace(token, helm)
    return (
        "{{- /* Generated by `make crds` from etj.api.admission; do not edit. Jobs may not ask\n"
        "     for host access or privilege unless their namespace is labelled\n"
        f'     {ALLOW_PRIVILEGED_LABEL}="true" (values: admissionPolicy). */}}}}\n'
        "{{- if .Values.admissionPolicy.enabled }}\n"
        f"{body}"
        "{{- end }}\n"
    )
