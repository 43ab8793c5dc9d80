"""Jobs that ask for host access, privilege or an identity, and ordinary ones: one list that
drives the chart's admission policies on a real API server
(tests/integration/etj/api/test_admission_policy.py) and ``etj validate``
(tests/unit/etj/api/admission/), so both give the same verdicts.

Each hostile case names the checks of ``etj.api.admission`` it trips (the policies' messages
and ``etj validate``'s fields come from them) and the namespace (labels, annotations) where
it is allowed. Pure data.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from etj.api.admission import (
    ALLOW_ANY_TOLERATION_LABEL,
    ALLOW_NODE_NAME_LABEL,
    ALLOW_PRIVILEGED_LABEL,
    ALLOW_SYSTEM_PRIORITY_LABEL,
    SERVICE_ACCOUNTS_ANNOTATION,
    Namespace,
)

# An ordinary job that uses what the checks look at: templates with a sidecar, an init
# container, volumes and mounts, an added NET_BIND_SERVICE, a PVC checkpoint volume.
ORDINARY: dict[str, Any] = {
    "apiVersion": "training.etj.dev/v1alpha1",
    "kind": "EmbeddingTrainingJob",
    "metadata": {"name": "host"},
    "spec": {
        "strategy": "ParameterServer",
        "replicas": {
            "chief": {"replicas": 1},
            "worker": {
                "replicas": 2,
                "template": {
                    "spec": {
                        "securityContext": {"runAsNonRoot": True, "runAsUser": 1000},
                        "initContainers": [
                            {
                                "name": "fetch",
                                "image": "busybox",
                                "securityContext": {"allowPrivilegeEscalation": False},
                                "volumeMounts": [{"name": "cache", "mountPath": "/cache"}],
                            }
                        ],
                        "containers": [
                            {
                                "name": "trainer",
                                "volumeMounts": [{"name": "cache", "mountPath": "/var/cache/etj"}],
                            },
                            {
                                "name": "proxy",
                                "image": "envoy",
                                "ports": [{"containerPort": 80}],
                                "securityContext": {
                                    "runAsUser": 1001,
                                    "capabilities": {
                                        "add": ["NET_BIND_SERVICE"],
                                        "drop": ["ALL"],
                                    },
                                    "seccompProfile": {"type": "RuntimeDefault"},
                                },
                            },
                        ],
                        "volumes": [{"name": "cache", "emptyDir": {}}],
                    }
                },
            },
            "ps": {"replicas": 1, "resources": {"limits": {"memory": "1Gi"}}},
        },
        "model": {"embeddings": [{"name": "user_id", "vocabularySize": 1000, "dimension": 8}]},
        "training": {"steps": 10},
        "checkpoint": {
            "volume": {"persistentVolumeClaim": {"claimName": "ckpt"}},
            "mountPath": "/var/lib/etj/checkpoints",
        },
    },
}

W = "spec.replicas.worker.template.spec"
PRIVILEGED_NAMESPACE = Namespace(labels={ALLOW_PRIVILEGED_LABEL: "true"})
# A hostPath is refused for host access alone only in a one-process job: in a multi-pod job
# it is also refused because the pods may not share it (etj.api.storage), which an opted-in
# namespace does not lift.
ONE_PROCESS = (
    ("spec.strategy", "MultiWorkerMirrored"),
    ("spec.replicas", {"worker": {"replicas": 1}}),
)
TRAINER = f"{W}.containers[0]"
PROXY = f"{W}.containers[1]"


@dataclass(frozen=True)
class Case:
    id: str
    # (check name, the field etj validate names) for every refusal the job must get.
    refusals: tuple[tuple[str, str], ...]
    change: Callable[[dict[str, Any]], None]
    # Where the job is allowed (the host-access cases: a namespace that opted in).
    allowed_in: Namespace = field(default_factory=lambda: PRIVILEGED_NAMESPACE)

    @property
    def validate_flags(self) -> list[str]:
        """``etj validate``'s flags for ``allowed_in``."""
        return [f"--namespace-label={k}={v}" for k, v in self.allowed_in.labels.items()] + [
            f"--namespace-annotation={k}={v}" for k, v in self.allowed_in.annotations.items()
        ]

    @property
    def manifest(self) -> dict[str, Any]:
        doc = copy.deepcopy(ORDINARY)
        self.change(doc)
        return doc


def _at(path: str) -> Any:
    return path.replace("[", ".").replace("]", "").split(".")


def _set(*pairs: tuple[str, Any]) -> Callable[[dict[str, Any]], None]:
    """Set each dotted path (``a.b[0].c``; missing maps and roles are created)."""

    def change(doc: dict[str, Any]) -> None:
        for path, value in pairs:
            *parents, last = _at(path)
            node: Any = doc
            for p in parents:
                node = node[int(p)] if p.isdigit() else node.setdefault(p, {})
            node[last] = value

    return change


HOSTILE: list[Case] = [
    # ---- the issue's own ----------------------------------------------------------------
    Case(
        "privileged-host-network",
        (
            ("host-network", f"{W}.hostNetwork"),
            ("privileged", f"{TRAINER}.securityContext.privileged"),
        ),
        _set((f"{W}.hostNetwork", True), (f"{TRAINER}.securityContext", {"privileged": True})),
    ),
    Case(
        "checkpoint-host-path-etc",
        (("host-path", "spec.checkpoint.volume.hostPath"),),
        _set(("spec.checkpoint.volume", {"hostPath": {"path": "/etc"}}), *ONE_PROCESS),
    ),
    Case(
        "checkpoint-mounted-over-etc",
        (("system-path", "spec.checkpoint.mountPath"),),
        _set(("spec.checkpoint.mountPath", "/etc")),
    ),
    # ---- held out: the rest of what the policy must see ------------------------------------
    Case(
        "ps-host-pid",
        (("host-pid", "spec.replicas.ps.template.spec.hostPID"),),
        _set(("spec.replicas.ps.template", {"spec": {"hostPID": True}})),
    ),
    Case(
        "chief-host-ipc",
        (("host-ipc", "spec.replicas.chief.template.spec.hostIPC"),),
        _set(("spec.replicas.chief.template", {"spec": {"hostIPC": True}})),
    ),
    Case(
        "sidecar-adds-sys-admin",
        (("capabilities", f"{PROXY}.securityContext.capabilities.add"),),
        _set((f"{PROXY}.securityContext.capabilities.add", ["NET_BIND_SERVICE", "SYS_ADMIN"])),
    ),
    Case(
        # Not a list: refused with the check's message, not with a CEL error.
        "capabilities-add-not-a-list",
        (("capabilities", f"{PROXY}.securityContext.capabilities.add"),),
        _set((f"{PROXY}.securityContext.capabilities.add", "SYS_ADMIN")),
    ),
    Case(
        "init-container-escalates",
        (
            (
                "privilege-escalation",
                f"{W}.initContainers[0].securityContext.allowPrivilegeEscalation",
            ),
        ),
        _set((f"{W}.initContainers[0].securityContext.allowPrivilegeEscalation", True)),
    ),
    Case(
        "container-runs-as-root",
        (("run-as-root", f"{PROXY}.securityContext.runAsUser"),),
        _set((f"{PROXY}.securityContext.runAsUser", 0)),
    ),
    Case(
        "container-not-non-root",
        (("run-as-non-root", f"{W}.initContainers[0].securityContext.runAsNonRoot"),),
        _set((f"{W}.initContainers[0].securityContext.runAsNonRoot", False)),
    ),
    Case(
        "root-as-a-float",
        (("run-as-root", f"{PROXY}.securityContext.runAsUser"),),
        _set((f"{PROXY}.securityContext.runAsUser", 0.0)),
    ),
    Case(
        "pod-not-non-root",
        (("pod-run-as-non-root", f"{W}.securityContext.runAsNonRoot"),),
        _set((f"{W}.securityContext.runAsNonRoot", False)),
    ),
    Case(
        "evaluator-pod-root",
        (("pod-run-as-root", "spec.replicas.evaluator.template.spec.securityContext.runAsUser"),),
        _set(
            (
                "spec.replicas.evaluator",
                {"replicas": 1, "template": {"spec": {"securityContext": {"runAsUser": 0}}}},
            )
        ),
    ),
    Case(
        "data-volume-host-path",
        (("host-path", "spec.data.files.volume.hostPath"),),
        _set(
            (
                "spec.data",
                {
                    "source": "files",
                    "files": {"pattern": "/data/*.tfrecord", "volume": {"hostPath": {"path": "/"}}},
                },
            ),
            *ONE_PROCESS,
        ),
    ),
    Case(
        "template-volume-host-path",
        (("host-path", f"{W}.volumes[1].hostPath"),),
        _set(
            (
                f"{W}.volumes",
                [{"name": "cache", "emptyDir": {}}, {"name": "dock", "hostPath": {"path": "/x"}}],
            )
        ),
    ),
    Case(
        "sidecar-mounts-over-usr-local",
        (("system-path", f"{PROXY}.volumeMounts[0].mountPath"),),
        _set((f"{PROXY}.volumeMounts", [{"name": "cache", "mountPath": "/usr/local/bin"}])),
    ),
    Case(
        "init-mounts-over-var-run",
        (("system-path", f"{W}.initContainers[0].volumeMounts[0].mountPath"),),
        _set((f"{W}.initContainers[0].volumeMounts[0].mountPath", "/var/run/secrets")),
    ),
    Case(
        "checkpoint-mounted-over-root",
        (("system-path", "spec.checkpoint.mountPath"),),
        _set(("spec.checkpoint.mountPath", "/")),
    ),
    Case(
        "checkpoint-path-climbs-to-etc",
        (("unclean-path", "spec.checkpoint.mountPath"),),
        _set(("spec.checkpoint.mountPath", "/var/lib/../../etc")),
    ),
    Case(
        "host-port",
        (("host-port", f"{PROXY}.ports[0].hostPort"),),
        _set((f"{PROXY}.ports", [{"containerPort": 80, "hostPort": 80}])),
    ),
    Case(
        "seccomp-unconfined",
        (("seccomp", f"{PROXY}.securityContext.seccompProfile.type"),),
        _set((f"{PROXY}.securityContext.seccompProfile.type", "Unconfined")),
    ),
    Case(
        "pod-seccomp-unconfined",
        (("pod-seccomp", f"{W}.securityContext.seccompProfile.type"),),
        _set((f"{W}.securityContext.seccompProfile", {"type": "Unconfined"})),
    ),
    Case(
        "apparmor-unconfined",
        (("apparmor", f"{W}.initContainers[0].securityContext.appArmorProfile.type"),),
        _set((f"{W}.initContainers[0].securityContext.appArmorProfile", {"type": "Unconfined"})),
    ),
    Case(
        "pod-apparmor-unconfined",
        (("pod-apparmor", "spec.replicas.ps.template.spec.securityContext.appArmorProfile.type"),),
        _set(
            (
                "spec.replicas.ps.template",
                {"spec": {"securityContext": {"appArmorProfile": {"type": "Unconfined"}}}},
            )
        ),
    ),
    Case(
        "proc-unmasked",
        (("proc-mount", f"{TRAINER}.securityContext.procMount"),),
        _set((f"{TRAINER}.securityContext", {"procMount": "Unmasked"})),
    ),
    # ---- the rest of Pod Security baseline and restricted ---------------------------------
    Case(
        "apparmor-annotation-unconfined",
        (("apparmor-annotation", "spec.replicas.worker.template.metadata.annotations"),),
        _set(
            (
                "spec.replicas.worker.template.metadata",
                {
                    "annotations": {
                        "container.apparmor.security.beta.kubernetes.io/proxy": "unconfined"
                    }
                },
            )
        ),
    ),
    Case(
        "pod-template-apparmor-annotation",
        (("apparmor-annotation", "spec.podTemplate.annotations"),),
        _set(
            (
                "spec.podTemplate",
                {"annotations": {"container.apparmor.security.beta.kubernetes.io/trainer": "x"}},
            )
        ),
    ),
    Case(
        "pod-selinux-super-privileged",
        (
            ("pod-selinux-type", f"{W}.securityContext.seLinuxOptions.type"),
            ("pod-selinux-user", f"{W}.securityContext.seLinuxOptions.user"),
            ("pod-selinux-role", f"{W}.securityContext.seLinuxOptions.role"),
        ),
        _set(
            (
                f"{W}.securityContext.seLinuxOptions",
                {"type": "spc_t", "user": "system_u", "role": "system_r"},
            )
        ),
    ),
    Case(
        "container-selinux",
        (
            ("selinux-type", f"{PROXY}.securityContext.seLinuxOptions.type"),
            ("selinux-user", f"{W}.initContainers[0].securityContext.seLinuxOptions.user"),
            ("selinux-role", f"{TRAINER}.securityContext.seLinuxOptions.role"),
        ),
        _set(
            (f"{PROXY}.securityContext.seLinuxOptions", {"type": "unconfined_t"}),
            (f"{W}.initContainers[0].securityContext.seLinuxOptions", {"user": "root"}),
            (f"{TRAINER}.securityContext", {"seLinuxOptions": {"role": "sysadm_r"}}),
        ),
    ),
    Case(
        "unsafe-sysctl",
        (("sysctls", "spec.replicas.ps.template.spec.securityContext.sysctls"),),
        _set(
            (
                "spec.replicas.ps.template",
                {
                    "spec": {
                        "securityContext": {
                            "sysctls": [
                                {"name": "net.ipv4.tcp_syncookies", "value": "1"},
                                {"name": "kernel.msgmax", "value": "65536"},
                            ]
                        }
                    }
                },
            )
        ),
    ),
    Case(
        "template-volume-nfs",
        (("volume-type", f"{W}.volumes[1]"),),
        _set(
            (
                f"{W}.volumes",
                [
                    {"name": "cache", "emptyDir": {}},
                    {"name": "shared", "nfs": {"server": "10.0.0.1", "path": "/exports"}},
                ],
            )
        ),
    ),
    # ---- what a deputy must not lend --------------------------------------------------
    Case(
        "pod-template-service-account",
        (("service-account", "spec.podTemplate.serviceAccountName"),),
        _set(("spec.podTemplate", {"serviceAccountName": "ops"})),
        Namespace(annotations={SERVICE_ACCOUNTS_ANNOTATION: "trainer, ops"}),
    ),
    Case(
        "template-service-account",
        (
            ("service-account", "spec.replicas.chief.template.spec.serviceAccountName"),
            ("service-account-alias", f"{W}.serviceAccount"),
        ),
        _set(
            ("spec.replicas.chief.template", {"spec": {"serviceAccountName": "ops"}}),
            (f"{W}.serviceAccount", "ops"),
        ),
        Namespace(annotations={SERVICE_ACCOUNTS_ANNOTATION: "ops"}),
    ),
    Case(
        "node-name",
        (("node-name", "spec.replicas.ps.template.spec.nodeName"),),
        _set(("spec.replicas.ps.template", {"spec": {"nodeName": "node-1"}})),
        Namespace(labels={ALLOW_NODE_NAME_LABEL: "true"}),
    ),
    Case(
        "system-priority",
        (
            ("system-priority", "spec.podTemplate.priorityClassName"),
            ("gang-system-priority", "spec.runPolicy.schedulingPolicy.priorityClass"),
        ),
        _set(
            ("spec.podTemplate", {"priorityClassName": "system-node-critical"}),
            ("spec.runPolicy", {"schedulingPolicy": {"priorityClass": "system-cluster-critical"}}),
        ),
        Namespace(labels={ALLOW_SYSTEM_PRIORITY_LABEL: "true"}),
    ),
    Case(
        "tolerates-every-taint",
        (
            ("tolerate-every-taint", f"{W}.tolerations[0]"),
            ("tolerate-every-taint", "spec.podTemplate.tolerations[1]"),
        ),
        _set(
            (f"{W}.tolerations", [{"operator": "Exists"}]),
            (
                "spec.podTemplate",
                {
                    "tolerations": [
                        {"key": "dedicated", "operator": "Exists"},
                        {"operator": "Exists", "effect": "NoExecute"},
                    ]
                },
            ),
        ),
        Namespace(labels={ALLOW_ANY_TOLERATION_LABEL: "true"}),
    ),
]

# Jobs the policy admits everywhere (near misses of the checks included).
ORDINARY_CASES: list[Case] = [
    Case("ordinary", (), lambda doc: None),
    Case(
        "near-misses",
        (),
        _set(
            (f"{W}.hostNetwork", False),
            (f"{TRAINER}.securityContext", {"privileged": False, "runAsNonRoot": True}),
            (f"{PROXY}.ports", [{"containerPort": 80, "hostPort": 0}]),
            # Names that only start like a system directory.
            ("spec.checkpoint.mountPath", "/etcetera/ckpt"),
            (f"{PROXY}.volumeMounts", [{"name": "cache", "mountPath": "/usrdata"}]),
            (f"{W}.initContainers[0].volumeMounts[0].mountPath", "/var/lib/cache"),
        ),
    ),
    Case(
        "near-misses-of-the-rest",
        (),
        _set(
            (
                "spec.replicas.worker.template.metadata",
                {
                    "annotations": {
                        "container.apparmor.security.beta.kubernetes.io/trainer": "runtime/default",
                        "container.apparmor.security.beta.kubernetes.io/proxy": "localhost/envoy",
                        "example.com/unconfined": "unconfined",
                    }
                },
            ),
            (f"{W}.securityContext.seLinuxOptions", {"type": "container_t", "level": "s0:c1"}),
            (f"{W}.securityContext.sysctls", [{"name": "net.ipv4.tcp_syncookies", "value": "1"}]),
            (
                f"{W}.volumes",
                [
                    {"name": "cache", "emptyDir": {}},
                    {"name": "code", "configMap": {"name": "code"}},
                    {"name": "token", "projected": {"sources": []}},
                    {"name": "creds", "secret": {"secretName": "creds"}},
                    {"name": "info", "downwardAPI": {"items": []}},
                    {
                        "name": "scratch",
                        "ephemeral": {
                            "volumeClaimTemplate": {
                                "spec": {
                                    "accessModes": ["ReadWriteOnce"],
                                    "resources": {"requests": {"storage": "1Gi"}},
                                }
                            }
                        },
                    },
                ],
            ),
            (f"{W}.serviceAccountName", "default"),
            (f"{W}.tolerations", [{"key": "dedicated", "operator": "Exists"}]),
            (
                "spec.podTemplate",
                {
                    "priorityClassName": "batch-high",
                    "tolerations": [{"key": "gpu", "operator": "Equal", "value": "none"}],
                },
            ),
            ("spec.runPolicy", {"schedulingPolicy": {"priorityClass": "batch-high"}}),
        ),
    ),
]


EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def example_jobs() -> list[tuple[str, dict[str, Any]]]:
    """(path, job) for every EmbeddingTrainingJob under examples/: admitted everywhere."""
    out = []
    for path in sorted(EXAMPLES.rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == "EmbeddingTrainingJob":
                out.append((str(path.relative_to(EXAMPLES.parent)), doc))
    return out
