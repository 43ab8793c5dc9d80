"""End to end on real containers: the cluster ``ETJ_E2E_KUBECONFIG`` names, else the local
cluster with its real node (``etj.localcluster.kubelet_node``: containerd, kubelet, CoreDNS).

The flow a user goes through: ``helm install`` the chart with the operator in its pod from
the built image (the chart's ServiceAccount, in-cluster config), the quickstart applied with
a checkpoint volume shared by its replicas, Running then Succeeded with the step in
``kubectl get etj``, the chief's progress in ``kubectl logs``, a worker pod deleted mid-way
replaced while training goes on, the ps pods stopped at the end, a malformed job rejected,
``helm uninstall`` leaving nothing behind.

Opt-in (``make e2e``, which sets ``ETJ_E2E=1``): it costs minutes of both cores. Skips,
saying why, where the real node cannot start (root, ``make node-packages node-binaries``).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from etj.localcluster.cluster import LocalCluster, default_bin_dir, missing_binaries
from etj.localcluster.kubelet_node import KubeletNode, image_archives, unavailable_reason

from .conftest import ROOT, sh, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(2400)]

RELEASE = "etj"
NS = "etj-system"
STEPS = 12000  # ~3 min here: long enough to delete and kill replicas mid-way
OPERATOR_IMAGE = os.environ.get("ETJ_E2E_OPERATOR_IMAGE", "localhost/etj-operator:dev")
TRAINER_IMAGE = os.environ.get("ETJ_E2E_TRAINER_IMAGE", "localhost/etj-trainer:dev")


@dataclass
class Target:
    kubeconfig: str
    bin_dir: Path
    host_dir: Path | None  # where a hostPath checkpoint volume may live (one-node clusters)

    def kubectl(self, *args: str, **kw: object) -> subprocess.CompletedProcess[str]:
        return sh(str(self.bin_dir / "kubectl"), f"--kubeconfig={self.kubeconfig}", *args, **kw)  # type: ignore[arg-type]

    def helm(self, *args: str, **kw: object) -> subprocess.CompletedProcess[str]:
        return sh(str(self.bin_dir / "helm"), f"--kubeconfig={self.kubeconfig}", *args, **kw)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    if not os.environ.get("ETJ_E2E"):
        pytest.skip("opt-in: `make e2e` runs the real-node end-to-end suite (minutes of CPU)")
    bin_dir = default_bin_dir()
    if missing_binaries(bin_dir):
        pytest.skip("no control-plane binaries: run `make binaries`")
    named = os.environ.get("ETJ_E2E_KUBECONFIG")
    if named:
        yield Target(named, bin_dir, None)
        return
    reason = unavailable_reason(bin_dir)
    if reason:
        pytest.skip(f"real node not started: {reason}")
    build = subprocess.run(["bash", str(ROOT / "tests/cluster/build-images.sh")], text=True)
    assert build.returncode == 0, "make images failed"
    state = tmp_path_factory.mktemp("e2e")
    cluster = LocalCluster(state / "cluster", pod_network=True).start()
    node = KubeletNode(cluster, images=image_archives())
    try:
        node.start()
        yield Target(str(cluster.kubeconfig), bin_dir, state / "checkpoints")
    finally:
        node.stop()
        cluster.stop()


def job(t: Target, name: str) -> dict:
    return json.loads(t.kubectl("get", "etj", name, "-o", "json").stdout)


def status(t: Target, name: str) -> dict:
    return job(t, name).get("status") or {}


def step(t: Target) -> int:
    return int((status(t, "quickstart").get("progress") or {}).get("step", 0))


def checkpointed(t: Target) -> int:
    return int((status(t, "quickstart").get("progress") or {}).get("lastCheckpointStep") or 0)


def uid(t: Target, pod: str) -> str:
    return t.kubectl("get", "pod", pod, "-o", "jsonpath={.metadata.uid}").stdout


def running_again(t: Target, pod: str, old_uid: str) -> bool:
    """The pod exists anew (another uid) or restarted in place, and runs."""
    got = t.kubectl(
        "get", "pod", pod, "-o",
        "jsonpath={.metadata.uid} {.status.phase} {.status.containerStatuses[0].restartCount}",
        check=False,
    ).stdout.split()  # fmt: skip
    return len(got) == 3 and got[1] == "Running" and (got[0] != old_uid or got[2] != "0")


def kill_containers(t: Target, pod: str) -> None:
    """SIGKILL every process of the pod (on the local real node: through its cgroups, as a
    crash would), else delete the pod (an eviction: the same rule applies)."""
    pod_uid = uid(t, pod)
    if t.host_dir is None:
        t.kubectl("delete", "pod", pod, "--wait=false")
        return
    killed = 0
    for procs in Path("/sys/fs/cgroup/memory").glob(f"kubepods*/**/pod{pod_uid}/*/cgroup.procs"):
        for pid in procs.read_text().split():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
                killed += 1
    assert killed, f"no process of {pod} found in its cgroups"


def shared_checkpoints(t: Target) -> str:
    """A ReadWriteMany claim every replica mounts: each ps writes its own shards."""
    assert t.host_dir is not None, "ETJ_E2E_KUBECONFIG clusters need ETJ_E2E_CHECKPOINT_CLAIM"
    t.host_dir.mkdir(parents=True, exist_ok=True)
    t.host_dir.chmod(0o777)  # the trainer runs as uid 1000
    pv = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": "e2e-checkpoints"},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteMany"],
            "hostPath": {"path": str(t.host_dir)},
            "storageClassName": "",
        },
    }
    pvc = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "checkpoints", "namespace": "default"},
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "resources": {"requests": {"storage": "1Gi"}},
            "storageClassName": "",
            "volumeName": "e2e-checkpoints",
        },
    }
    for obj in (pv, pvc):
        t.kubectl("apply", "-f", "-", input=json.dumps(obj))
    return "checkpoints"


def test_install_train_recover_reject_uninstall(target: Target) -> None:
    t = target
    t.helm(
        "install", RELEASE, "charts/etj", "--namespace", NS, "--create-namespace", "--wait",
        "--timeout", "300s",
        "--set", f"image.repository={OPERATOR_IMAGE.rsplit(':', 1)[0]}",
        "--set", f"image.tag={OPERATOR_IMAGE.rsplit(':', 1)[1]}",
        "--set", "image.pullPolicy=IfNotPresent",
        "--set", f"defaultTrainerImage={TRAINER_IMAGE}",
    )  # fmt: skip
    claim = os.environ.get("ETJ_E2E_CHECKPOINT_CLAIM") or shared_checkpoints(t)
    quickstart = yaml.safe_load((ROOT / "examples" / "quickstart.yaml").read_text())
    quickstart["spec"]["training"]["steps"] = STEPS
    quickstart["spec"]["checkpoint"]["volume"] = {"persistentVolumeClaim": {"claimName": claim}}
    t.kubectl("apply", "-f", "-", input=yaml.safe_dump(quickstart))
    wait_for(lambda: status(t, "quickstart").get("phase") == "Running", 300, "Running")
    wait_for(lambda: step(t) >= 500, 900, "progress past the first checkpoint", every=2)
    logs = t.kubectl("logs", "quickstart-chief-0").stdout
    assert '"event": "progress"' in logs, logs[-2000:]

    # A worker pod deleted mid-way is replaced; training goes on.
    before = uid(t, "quickstart-worker-1")
    # A short grace: the replacement (same name) waits for the old pod to be gone.
    t.kubectl("delete", "pod", "quickstart-worker-1", "--grace-period=1", "--wait=false")
    wait_for(lambda: running_again(t, "quickstart-worker-1", before), 300, "worker-1 back", every=2)

    # A ps process killed: the ps and the chief restart, the chief restores the checkpoint.
    wait_for(lambda: checkpointed(t) > 0, 600, "a checkpoint", every=2)
    restarts = status(t, "quickstart").get("restarts", 0)
    chief = uid(t, "quickstart-chief-0")
    kill_containers(t, "quickstart-ps-0")
    wait_for(lambda: status(t, "quickstart").get("restarts", 0) > restarts, 300, "ps restart")
    wait_for(lambda: running_again(t, "quickstart-chief-0", chief), 300, "chief back", every=2)
    wait_for(
        lambda: (
            "restored"
            in t.kubectl("logs", "quickstart-chief-0", check=False).stdout
            + t.kubectl("logs", "quickstart-chief-0", check=False).stderr
        ),
        300,
        "the restarted chief to restore the checkpoint",
        every=3,
    )
    wait_for(
        lambda: status(t, "quickstart").get("phase") in ("Succeeded", "Failed"),
        1800,
        "the job to finish",
        every=5,
    )
    final = status(t, "quickstart")
    assert final["phase"] == "Succeeded", json.dumps(final, indent=1)[-3000:]
    assert final["progress"]["step"] >= STEPS
    table = t.kubectl("get", "etj", "quickstart").stdout
    assert "Succeeded" in table and str(STEPS) in table, table
    selector = "training.etj.dev/job-name=quickstart,training.etj.dev/replica-type=ps"
    # The operator deletes the ps pods on success; a real kubelet takes their grace period.
    wait_for(
        lambda: t.kubectl("get", "pods", "-l", selector, "-o", "name").stdout.strip() == "",
        120,
        "the ps pods to be stopped after the job succeeded",
        every=2,
    )

    # A replica over its memory limit: the kernel OOM-kills it (137, OOMKilled from the
    # kubelet) and the operator brings it back with a larger limit.
    oom = yaml.safe_load((ROOT / "examples" / "quickstart.yaml").read_text())
    oom["metadata"]["name"] = "oom"
    oom["spec"]["training"]["steps"] = 400
    oom["spec"]["checkpoint"]["volume"] = {"persistentVolumeClaim": {"claimName": claim}}
    oom["spec"]["replicas"]["worker"] = {
        "replicas": 1,
        "resources": {"requests": {"memory": "128Mi"}, "limits": {"memory": "128Mi"}},
    }
    oom["spec"]["runPolicy"]["backoffLimit"] = 10
    t.kubectl("apply", "-f", "-", input=yaml.safe_dump(oom))

    def oom_events() -> list[str]:
        selector = "involvedObject.name=oom,reason=OOMKilled"
        got = t.kubectl("get", "events", "--field-selector", selector, "-o", "json").stdout
        events = json.loads(got)["items"]
        return [e["message"] for e in events]

    messages = wait_for(oom_events, 600, "an OOM kill of the worker", every=3)
    assert any("recreating it with memory limit" in m for m in messages), messages
    limit = t.kubectl(
        "get", "pod", "oom-worker-0", "-o",
        "jsonpath={.spec.containers[0].resources.limits.memory}", check=False,
    ).stdout  # fmt: skip
    assert limit != "128Mi", limit
    wait_for(
        lambda: status(t, "oom").get("phase") in ("Succeeded", "Failed"), 900, "oom job", every=5
    )
    assert status(t, "oom")["phase"] == "Succeeded", json.dumps(status(t, "oom"))[-2000:]

    bad = yaml.safe_load((ROOT / "examples" / "quickstart.yaml").read_text())
    bad["metadata"]["name"] = "bad"
    bad["spec"]["strategy"] = "Sideways"
    rejected = t.kubectl("apply", "-f", "-", input=yaml.safe_dump(bad), check=False)
    assert rejected.returncode != 0 and "strategy" in rejected.stderr

    t.kubectl("delete", "etj", "--all", "--wait=true", timeout=300)
    t.helm("uninstall", RELEASE, "--namespace", NS, "--wait")

    def left() -> str:
        return t.kubectl(
            "get", "all", "-A", "-l", "app.kubernetes.io/managed-by=etj", "-o", "name"
        ).stdout.strip()  # fmt: skip

    # Deleted jobs' pods go with their owners, each after its grace period.
    wait_for(lambda: left() == "", 120, "nothing of etj left after uninstall", every=2)
