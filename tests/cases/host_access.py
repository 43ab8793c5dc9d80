"""Jobs that ask for host access or privilege, and ordinary ones: one list that drives the
chart's admission policy on a real API server (tests/integration/test_admission_policy.py)
and ``etj validate`` (tests/unit/etj/api/test_admission.py), so both give the same verdicts.

Each hostile case names the checks of ``etj.api.admission`` it trips (the policy's messages
and ``etj validate``'s fields come from them). Pure data.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

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
]
