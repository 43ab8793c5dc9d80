"""No privilege, host access or identity lent through a job: the chart's admission
policies and the same checks in ``etj validate``, from one declaration.

The operator creates pods from what a job says (a replica's PodTemplateSpec and
``spec.podTemplate`` are merged over etj's own pod, the checkpoint and data volumes are any
volume source), so whoever may create an EmbeddingTrainingJob could otherwise have the
operator's ServiceAccount create pods they may not create themselves: the operator is a
deputy. Each ``Check`` below names where it looks (a ``Scope``: every replica template's
pod spec, every container, every volume source, every mount, ...), the field, the value
refused, where the rule comes from (``Origin``: the Pod Security Standards' baseline or
restricted profile, or etj's own as a deputy) and how a namespace lifts it (a ``Grant``).
From it come

- the CEL of two ``ValidatingAdmissionPolicy`` objects (``policies()``; the chart's
  ``templates/admission-policy.yaml`` is generated from them by ``make crds`` and a test
  fails when the committed file differs): ``no-host-access`` (the Pod Security rules and
  etj's mount rules; a namespace labelled ``training.etj.dev/allow-privileged: "true"`` is
  left out by its binding) and ``no-borrowed-identity`` (service account, node, priority,
  tolerations; bound everywhere, each rule lifted by its own namespace label or annotation,
  read from ``namespaceObject``),
- the Python check ``admission_problems`` that ``etj validate`` applies, naming the field,
  for a namespace described by its labels and annotations (``Namespace``), and
- the README's table of every rule (``rules_table``).

Pod Security's "must be set" requirements (``runAsNonRoot: true``, ``drop: [ALL]``, a
seccomp profile) are met by the pods etj renders; what a job can do is set the opposite, and
that is refused. Pure: no I/O, no environment; works on the job's wire form (a dict), as
the API server does.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import yaml

from etj.api.constants import GROUP, PLURAL
from etj.api.roles import ALL_ROLES


class Origin(StrEnum):
    """Where a rule comes from (the README's table says it per rule)."""

    BASELINE = "Pod Security baseline"
    RESTRICTED = "Pod Security restricted"
    DEPUTY = "etj (the operator as deputy)"


@dataclass(frozen=True)
class Grant:
    """How a namespace lifts a check: its ``label`` set to "true", or (``annotation``) the
    value listed in that namespace annotation (comma-separated)."""

    label: str = ""
    annotation: str = ""

    @property
    def how(self) -> str:
        if self.annotation:
            return (
                f"a cluster admin may list it in the namespace annotation {self.annotation} "
                "(comma-separated)"
            )
        return f'a cluster admin may label the namespace {self.label}="true" to allow it'


@dataclass(frozen=True)
class Namespace:
    """What the policies read of a job's namespace (``etj validate`` takes it from flags)."""

    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)

    def grants(self, grant: Grant) -> bool:
        """Whether a label grant is given (an annotation grant is judged per value)."""
        return bool(grant.label) and self.labels.get(grant.label) == "true"

    def listed(self, grant: Grant) -> list[str]:
        """The values the namespace lists under ``grant.annotation``."""
        raw = self.annotations.get(grant.annotation, "") if grant.annotation else ""
        return [v.strip() for v in raw.split(",") if v.strip()]


# The namespace label by which a cluster admin lets jobs there ask for host access.
ALLOW_PRIVILEGED_LABEL = f"{GROUP}/allow-privileged"
PRIVILEGED = Grant(label=ALLOW_PRIVILEGED_LABEL)
# The deputy rules' grants, one per rule.
SERVICE_ACCOUNTS_ANNOTATION = f"{GROUP}/service-accounts"
ALLOW_NODE_NAME_LABEL = f"{GROUP}/allow-node-name"
ALLOW_SYSTEM_PRIORITY_LABEL = f"{GROUP}/allow-system-priority"
ALLOW_ANY_TOLERATION_LABEL = f"{GROUP}/allow-any-toleration"

# The roles whose ``spec.replicas.<role>.template`` is merged over the pod.
TEMPLATE_ROLES = tuple(r.value for r in ALL_ROLES)
# What the Pod Security "restricted" level lets a container add.
ALLOWED_CAPABILITIES = ("NET_BIND_SERVICE",)
# Pod Security baseline's safe sysctls (namespaced, isolated from the node and other pods).
SAFE_SYSCTLS = (
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
    "net.ipv4.tcp_rmem",
    "net.ipv4.tcp_wmem",
)
# Pod Security baseline's SELinux types ("" is unset).
SELINUX_TYPES = ("", "container_t", "container_init_t", "container_kvm_t", "container_engine_t")
# Pod Security restricted's volume types. hostPath has its own (baseline) check, so a
# hostPath volume is refused once, with that check's reason.
VOLUME_KEYS = (
    "name",
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
    "hostPath",
)
APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/"
# Service accounts a job may always name: the namespace's own default.
DEFAULT_SERVICE_ACCOUNTS = ("default",)
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


# spec.podTemplate holds a few pod fields (service account, priority, tolerations): the pod
# checks read it as one more pod.
PODS = Scope(
    "pods",
    "a replica template or spec.podTemplate",
    (*(f"spec.replicas.{r}.template.spec" for r in TEMPLATE_ROLES), "spec.podTemplate"),
)
POD_METADATA = Scope(
    "pod_metadata",
    "a replica template's metadata or spec.podTemplate",
    (*(f"spec.replicas.{r}.template.metadata" for r in TEMPLATE_ROLES), "spec.podTemplate"),
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
TOLERATIONS = Scope("tolerations", "a toleration", parent=PODS, field="tolerations")
SCHEDULING = Scope("scheduling", "runPolicy.schedulingPolicy", ("spec.runPolicy.schedulingPolicy",))
SCOPES = (PODS, CONTAINERS, VOLUMES)  # the ones with routes of their own: policy variables


# How a field's value is refused. Each kind has its CEL and its Python side by side.
@dataclass(frozen=True)
class Check:
    """One refused thing: ``field`` (a dotted path inside each item of ``scope``; "" is the
    item itself) with a value that ``kind``/``arg`` refuse; ``why`` is the message's
    reason, ``origin`` where the rule comes from, ``grant`` how a namespace lifts it."""

    name: str
    scope: Scope
    field: str
    # equals | present | nonzero | beyond | matches | outside | names | keys | annotated
    # | tolerates | unlisted (see ``refused``)
    kind: str
    arg: Any
    why: str
    origin: Origin = Origin.BASELINE
    grant: Grant = PRIVILEGED

    def refused(self, value: Any, namespace: Namespace | None = None) -> bool:
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
        if self.kind == "outside":
            return not isinstance(value, str) or value not in self.arg
        if self.kind == "names":
            return not isinstance(value, list) or any(
                not isinstance(v, dict) or v.get("name", "") not in self.arg for v in value
            )
        if self.kind == "keys":
            return not isinstance(value, dict) or any(k not in self.arg for k in value)
        if self.kind == "annotated":
            return not isinstance(value, dict) or any(
                k.startswith(self.arg)
                and not (v == "runtime/default" or str(v).startswith("localhost/"))
                for k, v in value.items()
            )
        if self.kind == "tolerates":
            return not isinstance(value, dict) or (
                value.get("operator", "Equal") == "Exists" and value.get("key", "") == ""
            )
        if self.kind == "unlisted":
            allowed = [*self.arg, *(namespace or Namespace()).listed(self.grant)]
            return not isinstance(value, str) or value not in allowed
        raise ValueError(self.kind)  # pragma: no cover - the kinds are fixed below

    def cel_refused(self, item: str) -> str:
        """CEL: whether ``item`` (a CEL variable) has the refused value."""
        opt = item + "".join(f".?{part}" for part in self.field.split(".")) if self.field else ""

        def value(default: str) -> str:
            return f"{opt}.orValue({default})" if self.field else item

        if self.kind == "equals":
            return f"{opt}.orValue(null) == {_cel_literal(self.arg)}"
        if self.kind == "present":
            return f"{opt}.hasValue()"
        if self.kind == "nonzero":
            return f"{opt}.orValue(0) != 0"
        # A value of another type is refused with the check's own message (an expression
        # that errors would deny with CEL's).
        allowed = _cel_literal(list(self.arg)) if isinstance(self.arg, tuple) else ""
        if self.kind == "beyond":
            v = value("[]")
            return f"(type({v}) != list || !{v}.all(v, v in {allowed}))"
        if self.kind == "matches":
            v = value("''")
            return f"(type({v}) != string || {v}.matches({_cel_literal(self.arg)}))"
        if self.kind == "outside":
            v = value("''")
            return f"(type({v}) != string || !({v} in {allowed}))"
        if self.kind == "names":
            v = value("[]")
            return f"(type({v}) != list || !{v}.all(s, s.?name.orValue('') in {allowed}))"
        if self.kind == "keys":
            v = value("{}")
            return f"(type({v}) != map || !{v}.all(k, k in {allowed}))"
        if self.kind == "annotated":
            v = value("{}")
            ok = (
                f"!k.startsWith({_cel_literal(self.arg)}) || {v}[k] == 'runtime/default' "
                f"|| {v}[k].startsWith('localhost/')"
            )
            return f"(type({v}) != map || !{v}.all(k, {ok}))"
        if self.kind == "tolerates":
            v = value("{}")
            return f"({v}.?operator.orValue('Equal') == 'Exists' && {v}.?key.orValue('') == '')"
        if self.kind == "unlisted":
            v = value("''")
            listed = (
                "namespaceObject.metadata.?annotations"
                f"[?{_cel_literal(self.grant.annotation)}].orValue('').split(',')"
            )
            return (
                f"(type({v}) != string || !({v} in {allowed} "
                f"|| {listed}.exists(s, s.trim() == {v})))"
            )
        raise ValueError(self.kind)  # pragma: no cover

    @property
    def shown(self) -> str:
        """The refused setting as a user would write it."""
        if self.kind == "equals":
            return f"{self.field}: {_cel_literal(self.arg).strip(chr(39))}"
        return self.field or "this"

    @property
    def message(self) -> str:
        """The policy's message (one line; ``etj validate`` names the field instead)."""
        return f"{self.scope.what} may not set {self.shown} ({self.why}); {self.grant.how}"


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
_SELINUX = "jobs keep the node's SELinux confinement"
_B, _R, _D = Origin.BASELINE, Origin.RESTRICTED, Origin.DEPUTY

HOST_ACCESS_CHECKS: tuple[Check, ...] = (
    Check(
        "host-network", PODS, "hostNetwork", "equals", True, "the node's network is not for jobs"
    ),
    Check("host-pid", PODS, "hostPID", "equals", True, "the node's processes are not for jobs"),
    Check("host-ipc", PODS, "hostIPC", "equals", True, "the node's IPC is not for jobs"),
    Check("pod-run-as-root", PODS, "securityContext.runAsUser", "equals", 0, _ROOT, _R),
    Check("pod-run-as-non-root", PODS, "securityContext.runAsNonRoot", "equals", False, _ROOT, _R),
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
        "apparmor-annotation",
        POD_METADATA,
        "annotations",
        "annotated",
        APPARMOR_ANNOTATION,
        f"an AppArmor annotation ({APPARMOR_ANNOTATION}*) other than runtime/default or "
        "localhost/* lifts the confinement",
    ),
    Check(
        "pod-selinux-type",
        PODS,
        "securityContext.seLinuxOptions.type",
        "outside",
        SELINUX_TYPES,
        f"{_SELINUX}: types {', '.join(t for t in SELINUX_TYPES if t)} only",
    ),
    Check(
        "pod-selinux-user", PODS, "securityContext.seLinuxOptions.user", "present", None, _SELINUX
    ),
    Check(
        "pod-selinux-role", PODS, "securityContext.seLinuxOptions.role", "present", None, _SELINUX
    ),
    Check(
        "sysctls",
        PODS,
        "securityContext.sysctls",
        "names",
        SAFE_SYSCTLS,
        "only the safe sysctls, isolated from the node: " + ", ".join(SAFE_SYSCTLS),
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
        _R,
    ),
    Check(
        "capabilities",
        CONTAINERS,
        "securityContext.capabilities.add",
        "beyond",
        ALLOWED_CAPABILITIES,
        f"only {', '.join(ALLOWED_CAPABILITIES)} may be added",
        _R,
    ),
    Check("run-as-root", CONTAINERS, "securityContext.runAsUser", "equals", 0, _ROOT, _R),
    Check(
        "run-as-non-root", CONTAINERS, "securityContext.runAsNonRoot", "equals", False, _ROOT, _R
    ),
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
        "selinux-type",
        CONTAINERS,
        "securityContext.seLinuxOptions.type",
        "outside",
        SELINUX_TYPES,
        f"{_SELINUX}: types {', '.join(t for t in SELINUX_TYPES if t)} only",
    ),
    Check(
        "selinux-user", CONTAINERS, "securityContext.seLinuxOptions.user", "present", None, _SELINUX
    ),
    Check(
        "selinux-role", CONTAINERS, "securityContext.seLinuxOptions.role", "present", None, _SELINUX
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
        "volume-type",
        VOLUMES,
        "",
        "keys",
        VOLUME_KEYS,
        "a volume type outside restricted's list reaches storage the cluster admin did not "
        "offer as a claim; allowed: " + ", ".join(k for k in VOLUME_KEYS[1:] if k != "hostPath"),
        _R,
    ),
    Check(
        "system-path",
        MOUNTS,
        "mountPath",
        "matches",
        SYSTEM_PATH_RE,
        "a mount over a system directory, or above one, replaces the container's own files: "
        + ", ".join(SYSTEM_PATHS),
        _D,
    ),
    Check(
        "unclean-path",
        MOUNTS,
        "mountPath",
        "matches",
        UNCLEAN_PATH_RE,
        "a mount path with //, . or .. segments could name a system directory",
        _D,
    ),
)

IDENTITY_CHECKS: tuple[Check, ...] = (
    Check(
        "service-account",
        PODS,
        "serviceAccountName",
        "unlisted",
        DEFAULT_SERVICE_ACCOUNTS,
        "the pods would act with that account's rights, which the job's author may not have",
        _D,
        Grant(annotation=SERVICE_ACCOUNTS_ANNOTATION),
    ),
    Check(
        "service-account-alias",
        PODS,
        "serviceAccount",
        "unlisted",
        DEFAULT_SERVICE_ACCOUNTS,
        "the deprecated alias of serviceAccountName, judged the same",
        _D,
        Grant(annotation=SERVICE_ACCOUNTS_ANNOTATION),
    ),
    Check(
        "node-name",
        PODS,
        "nodeName",
        "present",
        None,
        "a pod bound to a node skips the scheduler and its checks (taints, quotas, Kueue)",
        _D,
        Grant(label=ALLOW_NODE_NAME_LABEL),
    ),
    Check(
        "system-priority",
        PODS,
        "priorityClassName",
        "matches",
        "^system-",
        "the system- classes are for the cluster's own components and preempt everything",
        _D,
        Grant(label=ALLOW_SYSTEM_PRIORITY_LABEL),
    ),
    Check(
        "gang-system-priority",
        SCHEDULING,
        "priorityClass",
        "matches",
        "^system-",
        "the system- classes are for the cluster's own components and preempt everything",
        _D,
        Grant(label=ALLOW_SYSTEM_PRIORITY_LABEL),
    ),
    Check(
        "tolerate-every-taint",
        TOLERATIONS,
        "",
        "tolerates",
        None,
        "operator: Exists without a key tolerates every taint, the control plane's and "
        "NoExecute ones included; name the taint's key",
        _D,
        Grant(label=ALLOW_ANY_TOLERATION_LABEL),
    ),
)

CHECKS: tuple[Check, ...] = HOST_ACCESS_CHECKS + IDENTITY_CHECKS


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


def _field(item: Any, name: str) -> tuple[bool, Any]:
    node = item
    for part in name.split(".") if name else ():
        if not isinstance(node, dict) or part not in node:
            return False, None
        node = node[part]
    return True, node


def admission_problems(job: Any, namespace: Namespace | None = None) -> list[tuple[str, str]]:
    """(field, why) for every place ``job`` asks for what the policies refuse in
    ``namespace`` (default: one with no label or annotation)."""
    namespace = namespace or Namespace()
    out: list[tuple[str, str]] = []
    for check in CHECKS:
        if namespace.grants(check.grant):
            continue
        for path, item in scope_items(job, check.scope):
            present, value = _field(item, check.field)
            if present and check.refused(value, namespace):
                where = f"{path}.{check.field}" if check.field else path
                out.append((where, f"{check.why}; {check.grant.how}"))
    return out


# --- CEL: the same as ValidatingAdmissionPolicies -------------------------------------


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
    """The policy's validation: true when no item of the check's scope is refused (or, for
    a label grant read in the policy, when the namespace has it)."""
    ok = f"!({check.cel_refused('x')})"
    expression = _cel_all(check.scope, "x", ok)
    if check.grant != PRIVILEGED and check.grant.label:
        label = _cel_literal(check.grant.label)
        return f"namespaceObject.metadata.?labels[?{label}].orValue('') == 'true' || ({expression})"
    return expression


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


@dataclass(frozen=True)
class PolicyDef:
    """One ValidatingAdmissionPolicy and its binding: its checks, and whether its binding
    leaves out the namespaces labelled allow-privileged."""

    suffix: str
    checks: tuple[Check, ...]
    exempt_privileged: bool


POLICIES = (
    PolicyDef("no-host-access", HOST_ACCESS_CHECKS, exempt_privileged=True),
    PolicyDef("no-borrowed-identity", IDENTITY_CHECKS, exempt_privileged=False),
)


def policy(name: str = "etj-no-host-access", definition: PolicyDef = POLICIES[0]) -> dict[str, Any]:
    """The ValidatingAdmissionPolicy refusing jobs that ask for what ``definition``'s
    checks refuse."""
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
                for c in definition.checks
            ],
        },
    }


def binding(
    policy_name: str = "etj-no-host-access", definition: PolicyDef = POLICIES[0]
) -> dict[str, Any]:
    """The binding: every namespace (for the host-access policy: but those a cluster admin
    labelled to allow it)."""
    match: dict[str, Any] = {}
    if definition.exempt_privileged:
        match["namespaceSelector"] = {
            "matchExpressions": [
                {"key": ALLOW_PRIVILEGED_LABEL, "operator": "NotIn", "values": ["true"]}
            ]
        }
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": policy_name},
        "spec": {
            "policyName": policy_name,
            "validationActions": ["Deny"],
            "matchResources": match,
        },
    }


# --- The chart's template and the README's table -------------------------------------

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
    docs: list[dict[str, Any]] = []
    for definition in POLICIES:
        name = f"ETJ_NAME-{definition.suffix}"
        pair = (policy(name, definition), binding(name, definition))
        for doc in pair:
            doc["metadata"]["labels"] = "ETJ_LABELS"
        pair[1]["spec"]["validationActions"] = "ETJ_ACTIONS"
        docs += pair
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
        f'     {ALLOW_PRIVILEGED_LABEL}="true", nor borrow an identity, a node or a priority\n'
        "     unless its own label or annotation allows it (values: admissionPolicy). */}}\n"
        "{{- if .Values.admissionPolicy.enabled }}\n"
        f"{body}"
        "{{- end }}\n"
    )


README_TABLE_BEGIN = "<!-- admission rules: generated by `make crds` from etj.api.admission -->"
README_TABLE_END = "<!-- end of admission rules -->"


# What a check on the item itself (field "") refuses, for the table.
_ITEM_REFUSED = {"keys": "a volume type", "tolerates": "`operator: Exists` without a key"}


def rules_table() -> str:
    """Markdown: every rule, what it refuses and where, its origin and its opt-out."""
    rows = [
        "| rule | refused | where | origin | allowed where |",
        "|---|---|---|---|---|",
    ]
    for c in CHECKS:
        refused = f"`{c.shown}`" if c.field else _ITEM_REFUSED[c.kind]
        opt = (
            f"namespace annotation `{c.grant.annotation}` lists it"
            if c.grant.annotation
            else f"namespace label `{c.grant.label}=true`"
        )
        rows.append(f"| `{c.name}` | {refused} | {c.scope.what} | {c.origin.value} | {opt} |")
    return "\n".join(rows)


def with_rules_table(readme: str) -> str:
    """``readme`` with the text between the table's markers replaced by ``rules_table()``."""
    begin = readme.index(README_TABLE_BEGIN) + len(README_TABLE_BEGIN)
    end = readme.index(README_TABLE_END)
    return readme[:begin] + "\n" + rules_table() + "\n" + readme[end:]
