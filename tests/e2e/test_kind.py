"""End to end on the local kind cluster (``make images kind-up``: three nodes, one control
plane and two workers): helm install, the quickstart with its checkpoints on the
ReadWriteMany etj-shared class, its ps and its chief on different nodes (read from each
pod's ``spec.nodeName``); a ps killed while its node is cordoned comes back on the other
node and the chief restores the last checkpoint from the shared volume; Succeeded, the
checkpoint files seen on the host directory every node shares; helm uninstall leaves
nothing. Skips, saying why, without root or a cluster (see conftest.kind_missing).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from .conftest import KIND_BIN_DIR, ROOT, sh, wait_for

pytestmark = pytest.mark.e2e

RELEASE = "etj"
NS = "etj-system"
OPERATOR_IMAGE = os.environ.get("ETJ_E2E_OPERATOR_IMAGE", "localhost/etj-operator:dev")
TRAINER_IMAGE = os.environ.get("ETJ_E2E_TRAINER_IMAGE", "localhost/etj-trainer:dev")
# The host directory kind-config.yaml mounts into every node at /var/lib/etj-shared.
SHARED = Path("/tmp/etj-kind-shared")
# Long enough that the ps kill happens in the first two thirds (checked before it).
STEPS = 8000


class Kind:
    def __init__(self, kubeconfig: str) -> None:
        self.kubeconfig = kubeconfig

    def kubectl(self, *args: str, **kw: object) -> subprocess.CompletedProcess[str]:
        return sh(str(KIND_BIN_DIR / "kubectl"), f"--kubeconfig={self.kubeconfig}", *args, **kw)  # type: ignore[arg-type]

    def helm(self, *args: str, **kw: object) -> subprocess.CompletedProcess[str]:
        return sh(str(KIND_BIN_DIR / "helm"), f"--kubeconfig={self.kubeconfig}", *args, **kw)  # type: ignore[arg-type]

    def status(self, name: str) -> dict:
        got = self.kubectl("get", "etj", name, "-o", "json")
        return json.loads(got.stdout).get("status") or {}

    def node_of(self, pod: str) -> str:
        return self.kubectl("get", "pod", pod, "-o", "jsonpath={.spec.nodeName}").stdout

    def progress(self, key: str) -> int:
        return int((self.status("quickstart").get("progress") or {}).get(key) or 0)

    def pod_state(self, pod: str) -> list[str]:
        """uid, phase and node of a pod (empty when it does not exist)."""
        return self.kubectl(
            "get", "pod", pod, "-o", "jsonpath={.metadata.uid} {.status.phase} {.spec.nodeName}",
            check=False,
        ).stdout.split()  # fmt: skip

    def restored_step(self) -> int | None:
        # The trainer logs {"event": "restored", "step": N} when it resumes a checkpoint.
        logs = self.kubectl("logs", "quickstart-chief-0", check=False).stdout.splitlines()
        events = [json.loads(x) for x in logs if x.startswith("{")]
        steps = [e["step"] for e in events if e.get("event") == "restored"]
        return steps[-1] if steps else None


def quickstart(claim: str) -> dict:
    job = yaml.safe_load((ROOT / "examples" / "quickstart.yaml").read_text())
    job["spec"]["training"]["steps"] = STEPS
    job["spec"]["checkpoint"]["volume"] = {"persistentVolumeClaim": {"claimName": claim}}
    # The ps keep off the chief's node when they can (a preference: the scheduler may
    # still put them together, and the assertion below would say so).
    away_from_chief = {
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 100,
                    "podAffinityTerm": {
                        "topologyKey": "kubernetes.io/hostname",
                        "labelSelector": {
                            "matchLabels": {
                                "training.etj.dev/job-name": "quickstart",
                                "training.etj.dev/replica-type": "chief",
                            }
                        },
                    },
                }
            ]
        }
    }
    job["spec"]["replicas"]["ps"]["template"] = {"spec": {"affinity": away_from_chief}}
    return job


def test_quickstart_on_three_nodes(kind_kubeconfig: str) -> None:
    k = Kind(kind_kubeconfig)
    nodes = k.kubectl("get", "nodes", "-o", "jsonpath={.items[*].metadata.name}").stdout.split()
    assert len(nodes) == 3, nodes
    k.helm(
        "upgrade", "--install", RELEASE, "charts/etj", "--namespace", NS, "--create-namespace",
        "--wait", "--timeout", "300s",
        "--set", f"image.repository={OPERATOR_IMAGE.rsplit(':', 1)[0]}",
        "--set", f"image.tag={OPERATOR_IMAGE.rsplit(':', 1)[1]}",
        "--set", "image.pullPolicy=Never",
        "--set", f"defaultTrainerImage={TRAINER_IMAGE}",
        "--set", "progressSeconds=2",
    )  # fmt: skip
    try:
        claim = {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "quickstart-checkpoints"},
            "spec": {
                "storageClassName": "etj-shared",
                "accessModes": ["ReadWriteMany"],
                "resources": {"requests": {"storage": "1Gi"}},
            },
        }
        k.kubectl("apply", "-f", "-", input=yaml.safe_dump(claim))
        wait_for(
            lambda: (
                k.kubectl(
                    "get", "pvc", "quickstart-checkpoints", "-o", "jsonpath={.status.phase}"
                ).stdout
                == "Bound"
            ),
            60,
            "the etj-shared claim to be bound",
        )
        volume = k.kubectl(
            "get", "pvc", "quickstart-checkpoints", "-o", "jsonpath={.spec.volumeName}"
        ).stdout
        host_path = k.kubectl("get", "pv", volume, "-o", "jsonpath={.spec.hostPath.path}").stdout
        assert host_path.startswith("/var/lib/etj-shared/volumes/"), host_path
        on_host = SHARED / host_path.removeprefix("/var/lib/etj-shared/")

        job = quickstart("quickstart-checkpoints")
        k.kubectl("apply", "-f", "-", input=yaml.safe_dump(job))
        wait_for(lambda: k.status("quickstart").get("phase") == "Running", 900, "Running")
        chief = k.node_of("quickstart-chief-0")
        ps = {k.node_of("quickstart-ps-0"), k.node_of("quickstart-ps-1")}
        print(f"chief on {chief}, ps on {sorted(ps)}")
        assert chief and "" not in ps and chief not in ps, (chief, ps)

        # A ps lost while its node takes no new pods: it comes back on the other node, and
        # the restarted chief restores the last checkpoint from the shared volume (which the
        # new ps reads from there too).
        every = job["spec"]["checkpoint"]["everySteps"]
        wait_for(lambda: k.progress("lastCheckpointStep") >= 2 * every, 900, "two checkpoints")
        at = k.progress("step")
        assert at < STEPS * 2 // 3, f"step {at} of {STEPS} before the ps kill: raise STEPS"
        before_kill = k.progress("lastCheckpointStep")
        restarts = k.status("quickstart").get("restarts", 0)
        old_uid, _, old_node = k.pod_state("quickstart-ps-0")
        k.kubectl("cordon", old_node)
        try:
            k.kubectl("delete", "pod", "quickstart-ps-0", "--grace-period=1", "--wait=false")
            wait_for(
                lambda: k.status("quickstart").get("restarts", 0) > restarts, 300, "ps restart"
            )

            def back_elsewhere() -> bool:
                got = k.pod_state("quickstart-ps-0")
                return len(got) == 3 and got[0] != old_uid and got[1] == "Running"

            wait_for(back_elsewhere, 600, "ps-0 running again")
        finally:
            k.kubectl("uncordon", old_node)
        new_node = k.node_of("quickstart-ps-0")
        assert new_node != old_node, (old_node, new_node)
        restored = wait_for(k.restored_step, 600, "the restarted chief to restore")
        print(
            f"ps-0 killed at step {at} (checkpoint {before_kill}) on {old_node}, "
            f"back on {new_node}; the chief restored step {restored}"
        )
        assert restored >= before_kill, (restored, before_kill)

        wait_for(
            lambda: k.status("quickstart").get("phase") == "Succeeded", 1800, "Succeeded", every=5
        )
        # Every ps wrote its shards and the chief the index, from two nodes, into one
        # directory of the host.
        index = sorted(p.name for p in on_host.rglob("*.index"))
        assert index, f"no checkpoint index under {on_host}: {list(on_host.rglob('*'))[:20]}"
        data = sorted(p.name for p in on_host.rglob("*.data-*"))
        assert data, f"no checkpoint data under {on_host}"
    finally:
        k.kubectl("delete", "etj", "--all", "--wait=true", timeout=300, check=False)
        k.kubectl("delete", "pvc", "quickstart-checkpoints", "--wait=true", check=False)
        k.helm("uninstall", RELEASE, "--namespace", NS, "--wait", check=False)
    leftovers = k.kubectl(
        "get", "all", "-A", "-l", "app.kubernetes.io/managed-by=etj", "-o", "name"
    ).stdout
    assert leftovers.strip() == ""
