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
from .test_fake_gcs import CHECKPOINT_ROUNDTRIP, GCS_HOSTS

pytestmark = pytest.mark.e2e

RELEASE = "etj"
NS = "etj-system"
OPERATOR_IMAGE = os.environ.get("ETJ_E2E_OPERATOR_IMAGE", "localhost/etj-operator:dev")
TRAINER_IMAGE = os.environ.get("ETJ_E2E_TRAINER_IMAGE", "localhost/etj-trainer:dev")
# The host directory kind-config.yaml mounts into every node at /var/lib/etj-shared.
SHARED = Path("/tmp/etj-kind-shared")
# Long enough that the ps kill happens in the first two thirds (checked before it).
STEPS = 8000
# fake-gcs-server's Service address and bucket (tests/cluster/kind-fake-gcs.sh).
GCS_IP = "10.96.0.50"
GCS_BUCKET = "etj-ckpt"


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


def quickstart() -> dict:
    """The README's quickstart: its checkpoint.storage claim gets the cluster's default
    class, etj-shared (ReadWriteMany on a directory every node mounts)."""
    job = yaml.safe_load((ROOT / "examples" / "quickstart.yaml").read_text())
    job["spec"]["training"]["steps"] = STEPS
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
        job = quickstart()
        k.kubectl("apply", "-f", "-", input=yaml.safe_dump(job))
        wait_for(lambda: k.status("quickstart").get("phase") == "Running", 900, "Running")
        # The claim etj made for checkpoint.storage: bound to an etj-shared volume.
        claims = json.loads(k.kubectl("get", "pvc", "-o", "json").stdout)["items"]
        owned = [
            c
            for c in claims
            if any(
                o["kind"] == "EmbeddingTrainingJob" and o["name"] == "quickstart"
                for o in c["metadata"].get("ownerReferences", [])
            )
        ]
        assert len(owned) == 1, [c["metadata"]["name"] for c in claims]
        claim = owned[0]
        assert claim["spec"]["storageClassName"] == "etj-shared", claim["spec"]
        assert claim["spec"]["accessModes"] == ["ReadWriteMany"], claim["spec"]
        assert claim["status"]["phase"] == "Bound", claim["status"]
        volume = claim["spec"]["volumeName"]
        host_path = k.kubectl("get", "pv", volume, "-o", "jsonpath={.spec.hostPath.path}").stdout
        assert host_path.startswith("/var/lib/etj-shared/volumes/"), host_path
        on_host = SHARED / host_path.removeprefix("/var/lib/etj-shared/")
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
        k.helm("uninstall", RELEASE, "--namespace", NS, "--wait", check=False)
    leftovers = k.kubectl(
        "get", "all", "-A", "-l", "app.kubernetes.io/managed-by=etj", "-o", "name"
    ).stdout
    assert leftovers.strip() == ""


def test_tf_checkpoint_on_fake_gcs_from_a_pod(kind_kubeconfig: str) -> None:
    """gs:// from inside the cluster, as a job's pod would use it: TensorFlow in the trainer
    image saves, lists, renames and restores checkpoints on fake-gcs-server (the
    kind cluster's stand-in for GCS, tests/cluster/kind-fake-gcs.sh), and the objects are
    seen on the host directory fake-gcs-server keeps them in."""
    k = Kind(kind_kubeconfig)
    name = "gcs-probe"
    prefix = f"probe-{os.getpid()}"
    # The loopback test's roundtrip, keeping the checkpoints (no rmtree) for the host to see.
    script = CHECKPOINT_ROUNDTRIP.replace('step("rmtree", remove_tree)', "")
    assert script != CHECKPOINT_ROUNDTRIP
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "hostAliases": [{"ip": GCS_IP, "hostnames": list(GCS_HOSTS)}],
            "containers": [
                {
                    "name": "probe",
                    "image": TRAINER_IMAGE,
                    "imagePullPolicy": "Never",
                    "command": ["python", "-c", script, f"gs://{GCS_BUCKET}/{prefix}"],
                    "env": [
                        {"name": "CURL_CA_BUNDLE", "value": "/etc/etj-gcs/ca.crt"},
                        {"name": "NO_GCE_CHECK", "value": "true"},
                        {"name": "GOOGLE_AUTH_TOKEN_FOR_TESTING", "value": "etj-fake-token"},
                        {"name": "TF_CPP_MIN_LOG_LEVEL", "value": "2"},
                    ],
                    "volumeMounts": [{"name": "ca", "mountPath": "/etc/etj-gcs"}],
                }
            ],
            "volumes": [{"name": "ca", "configMap": {"name": "etj-gcs-ca"}}],
        },
    }
    k.kubectl("delete", "pod", name, "--ignore-not-found", "--wait=true")
    k.kubectl("apply", "-f", "-", input=yaml.safe_dump(pod))
    try:
        phase = wait_for(
            lambda: (
                k.kubectl("get", "pod", name, "-o", "jsonpath={.status.phase}").stdout
                in ("Succeeded", "Failed")
                and k.kubectl("get", "pod", name, "-o", "jsonpath={.status.phase}").stdout
            ),
            600,
            "the probe pod to finish",
        )
        logs = k.kubectl("logs", name).stdout
        assert phase == "Succeeded", logs[-3000:]
        result = [ln for ln in logs.splitlines() if ln.startswith("RESULT ")]
        assert result, logs[-3000:]
        steps = json.loads(result[0][len("RESULT ") :])
        failed = {s: v["error"] for s, v in steps.items() if not v["ok"]}
        assert not failed, failed
        assert steps["restore"]["value"] == {"step": 300, "emb_equal": True}
        # The objects, on the host: fake-gcs-server's filesystem backend, a file each.
        objects = sorted(p.name for p in (SHARED / "gcs" / GCS_BUCKET / prefix).iterdir())
        assert any("ckpt-300.index" in o for o in objects), objects
    finally:
        k.kubectl("delete", "pod", name, "--ignore-not-found", "--wait=false", check=False)
