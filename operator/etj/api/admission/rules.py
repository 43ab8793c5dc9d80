"""Every admission rule etj applies, declared once: Pod Security baseline and restricted, the
mount rules, and what the operator as a deputy must not lend (service account, node,
priority, tolerations). Each ``Check`` says where it looks, what it refuses, its origin and
its grant; ``etj.api.admission.policy`` turns them into the chart's policies, ``etj validate``'s
problems and the README's table.

Pure data (and the one regex built from the system paths).
"""

from __future__ import annotations

import re

from etj.api.admission.checks import ALLOW_PRIVILEGED_LABEL, PRIVILEGED, Check, Grant, Origin, Scope
from etj.api.constants import GROUP
from etj.api.roles import ALL_ROLES

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


_ROOT = "jobs do not run as root"
_SECCOMP = "jobs keep the kernel's syscall filter"
_APPARMOR = "jobs keep the node's AppArmor confinement"
_SELINUX = "jobs keep the node's SELinux confinement"
_B, _R, _D = Origin.BASELINE, Origin.RESTRICTED, Origin.DEPUTY

_SELINUX_TYPES_WHY = f"{_SELINUX}: types {', '.join(t for t in SELINUX_TYPES if t)} only"


def _pod_and_container(
    name: str, field: str, kind: str, arg: object, why: str, origin: Origin = _B
) -> tuple[Check, Check]:
    """A securityContext rule at both levels Kubernetes has it: the pod's (``pod-<name>``)
    and every container's."""
    return (
        Check(f"pod-{name}", PODS, f"securityContext.{field}", kind, arg, why, origin),
        Check(name, CONTAINERS, f"securityContext.{field}", kind, arg, why, origin),
    )


HOST_ACCESS_CHECKS: tuple[Check, ...] = (
    Check(
        "host-network", PODS, "hostNetwork", "equals", True, "the node's network is not for jobs"
    ),
    Check("host-pid", PODS, "hostPID", "equals", True, "the node's processes are not for jobs"),
    Check("host-ipc", PODS, "hostIPC", "equals", True, "the node's IPC is not for jobs"),
    *_pod_and_container("run-as-root", "runAsUser", "equals", 0, _ROOT, _R),
    *_pod_and_container("run-as-non-root", "runAsNonRoot", "equals", False, _ROOT, _R),
    *_pod_and_container("seccomp", "seccompProfile.type", "equals", "Unconfined", _SECCOMP),
    *_pod_and_container("apparmor", "appArmorProfile.type", "equals", "Unconfined", _APPARMOR),
    *_pod_and_container(
        "selinux-type", "seLinuxOptions.type", "outside", SELINUX_TYPES, _SELINUX_TYPES_WHY
    ),
    *_pod_and_container("selinux-user", "seLinuxOptions.user", "present", None, _SELINUX),
    *_pod_and_container("selinux-role", "seLinuxOptions.role", "present", None, _SELINUX),
    *_pod_and_container(
        "host-process",
        "windowsOptions.hostProcess",
        "equals",
        True,
        "host processes are not for jobs",
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
        "sysctls",
        PODS,
        "securityContext.sysctls",
        "names",
        SAFE_SYSCTLS,
        "only the safe sysctls, isolated from the node: " + ", ".join(SAFE_SYSCTLS),
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
    Check(
        "proc-mount",
        CONTAINERS,
        "securityContext.procMount",
        "equals",
        "Unmasked",
        "an unmasked /proc shows the node's kernel settings",
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


__all__ = [
    "ALLOW_ANY_TOLERATION_LABEL",
    "ALLOW_NODE_NAME_LABEL",
    "ALLOW_PRIVILEGED_LABEL",
    "ALLOW_SYSTEM_PRIORITY_LABEL",
    "CHECKS",
    "HOST_ACCESS_CHECKS",
    "IDENTITY_CHECKS",
    "PRIVILEGED",
    "SCOPES",
    "SERVICE_ACCOUNTS_ANNOTATION",
    "SYSTEM_PATHS",
    "SYSTEM_PATH_RE",
    "UNCLEAN_PATH_RE",
]
