"""End to end on real containers: the cluster ``ETJ_E2E_KUBECONFIG`` names, else the local
cluster with its real node (``etj_testcluster.kubelet_node``: containerd, kubelet, CoreDNS),
started and stopped as the README does it, ``etj cluster up --node kubelet`` / ``etj cluster
down``.

The flow a user goes through: ``helm install`` the chart with the operator in its pod from
the built image (the chart's ServiceAccount, in-cluster config, the ``kubernetes`` Service
found by DNS), the quickstart applied with a checkpoint volume shared by its replicas,
Running then Succeeded with the step in ``kubectl get etj``, peers found by their DNS
names, the chief's progress in ``kubectl logs``, a worker pod deleted mid-way replaced
while training goes on, a killed ps restored from the checkpoint volume, the ps pods
stopped at the end, a replica over its memory limit OOM-killed by the kernel (137,
``OOMKilled`` from the kubelet) and brought back with more memory, a malformed job
rejected, ``helm uninstall`` leaving nothing behind; on the local node, stopping it
leaves no process, bridge, mount, iptables chain or cgroup.

One real-node cluster for the whole flow (it is the expensive part), and the OOM job runs
beside the quickstart: each waits on its own pods, so their waits overlap.

Runs in ``make test`` (which installs and builds what the node needs, cached) wherever the
real node can start: root, ``make node-packages node-binaries images``. Elsewhere it skips
saying why; in CI as root a node that cannot start is a failure.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from etj_testcluster.cluster import LocalCluster, default_bin_dir, missing_binaries
from etj_testcluster.kubelet_node import (
    KUBELET_NODE_NAME,
    KubeletNode,
    unavailable_reason,
)

from .conftest import ROOT, sh, wait_for

ETJ = str(Path(sys.executable).parent / "etj")

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1800)]

RELEASE = "etj"
NS = "etj-system"
# The quickstart's own length: the worker deletion and the ps kill happen in its first
# ~2000 steps (checked before each, so a faster machine fails loudly, not vacuously).
STEPS = 6000
OPERATOR_IMAGE = os.environ.get("ETJ_E2E_OPERATOR_IMAGE", "localhost/etj-operator:dev")
TRAINER_IMAGE = os.environ.get("ETJ_E2E_TRAINER_IMAGE", "localhost/etj-trainer:dev")
# Run inside the operator's pod: the Service's DNS name, then the API through it with the
# pod's ServiceAccount token.
API_PROBE = """
import socket, ssl, urllib.request
print("dns", socket.gethostbyname("kubernetes.default.svc.cluster.local"), flush=True)
sa = "/var/run/secrets/kubernetes.io/serviceaccount/"
ctx = ssl.create_default_context(cafile=sa + "ca.crt")
req = urllib.request.Request("https://kubernetes.default.svc/version",
                             headers={"Authorization": "Bearer " + open(sa + "token").read()})
print("api", urllib.request.urlopen(req, context=ctx, timeout=10).status, flush=True)
"""


@dataclass
class Target:
    kubeconfig: str
    bin_dir: Path
    host_dir: Path | None  # where a hostPath checkpoint volume may live (one-node clusters)
    node: KubeletNode | None = None  # the local real node, when the suite started one
    marks: list[str] = field(default_factory=list)
    t0: float = field(default_factory=time.monotonic)

    def kubectl(self, *args: str, **kw: object) -> subprocess.CompletedProcess[str]:
        return sh(str(self.bin_dir / "kubectl"), f"--kubeconfig={self.kubeconfig}", *args, **kw)  # type: ignore[arg-type]

    def helm(self, *args: str, **kw: object) -> subprocess.CompletedProcess[str]:
        return sh(str(self.bin_dir / "helm"), f"--kubeconfig={self.kubeconfig}", *args, **kw)  # type: ignore[arg-type]

    def mark(self, what: str) -> None:
        """A timestamped milestone, printed at the end: where the flow's minutes go."""
        self.marks.append(f"{time.monotonic() - self.t0:6.1f}s {what}")
        print(self.marks[-1], flush=True)


def _cannot_run(why: str) -> None:
    if os.environ.get("CI") and os.geteuid() == 0:
        pytest.fail(f"CI runs as root, so the real node must start: {why}", pytrace=False)
    pytest.skip(f"real node not started: {why}")


def etj_cluster(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [ETJ, "cluster", *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT
    )


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    bin_dir = default_bin_dir()
    missing = missing_binaries(bin_dir)
    if missing:
        _cannot_run(f"no {', '.join(missing)} in {bin_dir}: run `make binaries`")
    named = os.environ.get("ETJ_E2E_KUBECONFIG")
    if named:
        yield Target(named, bin_dir, None)
        return
    reason = unavailable_reason(bin_dir)
    if reason:
        _cannot_run(reason)
    t0 = time.monotonic()
    # Cached by input hash (a no-op after `make images`): the images hold this checkout.
    build = subprocess.run(
        ["bash", str(ROOT / "tests/cluster/build-images.sh")], capture_output=True, text=True
    )
    assert build.returncode == 0, f"make images failed:\n{build.stdout[-3000:]}{build.stderr}"
    # As the README says: `etj cluster up --node kubelet`, the node imports the built images.
    state = tmp_path_factory.mktemp("e2e")
    local = state / "local"
    # Its readiness includes importing changed images into containerd (minutes when cold).
    up = etj_cluster(
        "up", "--node", "kubelet", "--state-dir", str(local), "--timeout", "900", timeout=960
    )
    node = KubeletNode(LocalCluster(local / "cluster"))
    try:
        assert up.returncode == 0, f"etj cluster up --node kubelet failed:\n{up.stderr}"
        t = Target(up.stdout.strip(), bin_dir, state / "checkpoints", node, t0=t0)
        t.mark("images checked, control plane and real node up (etj cluster up --node kubelet)")
        yield t
    finally:
        etj_cluster("down", "--state-dir", str(local), timeout=180)


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


@dataclass
class PodWatch:
    """Every version of a job's pods while it runs (``kubectl get -w`` into a file: a pipe
    nobody reads would stop it at 64 KiB): a container's terminated state is seen even
    when the operator replaces the pod at once."""

    proc: subprocess.Popen[bytes]
    out: Path

    @classmethod
    def start(cls, t: Target, job_name: str, out: Path) -> PodWatch:
        with out.open("wb") as sink:
            proc = subprocess.Popen(
                [str(t.bin_dir / "kubectl"), f"--kubeconfig={t.kubeconfig}", "get", "pods",
                 "-w", "-l", f"training.etj.dev/job-name={job_name}", "-o", "json"],
                stdout=sink, stderr=subprocess.STDOUT, cwd=ROOT,
            )  # fmt: skip
        return cls(proc, out)

    def terminations(self) -> list[tuple[str, int, str]]:
        """(pod, exit code, reason) of every terminated container seen; stops the watch."""
        self.proc.terminate()
        self.proc.wait(timeout=30)
        text = self.out.read_text()
        found, decoder, at = [], json.JSONDecoder(), 0
        while (at := text.find("{", at)) >= 0:
            pod, at = decoder.raw_decode(text, at)
            for cs in (pod.get("status") or {}).get("containerStatuses") or []:
                for state in (cs.get("state") or {}, cs.get("lastState") or {}):
                    if done := state.get("terminated"):
                        found.append(
                            (pod["metadata"]["name"], done["exitCode"], done.get("reason"))
                        )
        return found


def quickstart_job(name: str, claim: str) -> dict:
    job = yaml.safe_load((ROOT / "examples" / "quickstart.yaml").read_text())
    job["metadata"]["name"] = name
    # The test's own ReadWriteMany claim instead of the quickstart's checkpoint.storage.
    job["spec"]["checkpoint"].pop("storage", None)
    job["spec"]["checkpoint"]["volume"] = {"persistentVolumeClaim": {"claimName": claim}}
    return job


def test_install_train_recover_reject_uninstall(target: Target, tmp_path: Path) -> None:
    t = target
    t.helm(
        "install", RELEASE, "charts/etj", "--namespace", NS, "--create-namespace", "--wait",
        "--timeout", "300s",
        "--set", f"image.repository={OPERATOR_IMAGE.rsplit(':', 1)[0]}",
        "--set", f"image.tag={OPERATOR_IMAGE.rsplit(':', 1)[1]}",
        "--set", "image.pullPolicy=IfNotPresent",
        "--set", f"defaultTrainerImage={TRAINER_IMAGE}",
        # Progress into status every 2 s (default 10): the flow acts on the step it reads.
        "--set", "progressSeconds=2",
    )  # fmt: skip
    t.mark("helm install: the operator's pod is ready")
    if t.node is not None:  # the local cluster: its fake node is gone, the real one serves
        nodes = t.kubectl("get", "nodes", "-o", "name").stdout.split()
        assert nodes == [f"node/{KUBELET_NODE_NAME}"], nodes
    # The operator's pod finds the `kubernetes` Service by DNS and reaches the API through it.
    probe = t.kubectl("exec", "-n", NS, f"deploy/{RELEASE}", "--", "python", "-c", API_PROBE)
    assert "dns 10." in probe.stdout and "api 200" in probe.stdout, probe.stdout

    claim = os.environ.get("ETJ_E2E_CHECKPOINT_CLAIM") or shared_checkpoints(t)
    quickstart = quickstart_job("quickstart", claim)
    quickstart["spec"]["training"]["steps"] = STEPS
    quickstart_watch = PodWatch.start(t, "quickstart", tmp_path / "quickstart-pods.json")
    t.kubectl("apply", "-f", "-", input=yaml.safe_dump(quickstart))
    # Beside it, a replica over its memory limit: the kernel OOM-kills it (137, OOMKilled
    # from the kubelet) and the operator brings it back with a larger limit.
    oom = quickstart_job("oom", claim)
    oom["spec"]["training"]["steps"] = 400
    oom["spec"]["replicas"]["chief"]["resources"]["requests"]["cpu"] = "100m"  # fits beside
    oom["spec"]["replicas"]["worker"] = {
        "replicas": 1,
        "resources": {"requests": {"memory": "128Mi"}, "limits": {"memory": "128Mi"}},
    }
    oom["spec"]["runPolicy"]["backoffLimit"] = 10
    # The limit grows 1.5x per kill (128, 192, 288, ... MiB) until the worker fits: a few
    # kills in a row, each waiting out the restart back-off (10, 20, 40 s by default). The
    # back-off has its own tests; here it only makes the flow a minute longer.
    oom["spec"]["runPolicy"]["restartBackoff"] = {"initialSeconds": 1}
    oom_watch = PodWatch.start(t, "oom", tmp_path / "oom-pods.json")
    t.kubectl("apply", "-f", "-", input=yaml.safe_dump(oom))

    wait_for(lambda: status(t, "quickstart").get("phase") == "Running", 300, "Running")
    t.mark("quickstart Running")
    wait_for(lambda: step(t) >= 500, 900, "progress past the first checkpoint", every=2)
    t.mark(f"quickstart at step {step(t)}")
    logs = t.kubectl("logs", "quickstart-chief-0").stdout
    assert '"event": "progress"' in logs, logs[-2000:]
    # Peers by their DNS names: TF_CONFIG names them so, and they resolve inside a pod.
    chief_env = json.loads(t.kubectl("get", "pod", "quickstart-chief-0", "-o", "json").stdout)
    env = {e["name"]: e.get("value") for e in chief_env["spec"]["containers"][0]["env"]}
    tf_config = json.loads(env["TF_CONFIG"])
    peer = tf_config["cluster"]["ps"][1].rsplit(":", 1)[0]
    assert peer.startswith("quickstart-ps-1.quickstart.") and ".svc" in peer, peer
    resolved = t.kubectl(
        "exec", "quickstart-chief-0", "--", "python", "-c",
        f"import socket; print(socket.gethostbyname({peer!r}))",
    ).stdout.strip()  # fmt: skip
    ps_ip = t.kubectl("get", "pod", "quickstart-ps-1", "-o", "jsonpath={.status.podIP}").stdout
    assert resolved == ps_ip, (peer, resolved, ps_ip)

    # A worker pod deleted mid-way is replaced; training goes on.
    before = uid(t, "quickstart-worker-1")
    # A short grace: the replacement (same name) waits for the old pod to be gone.
    t.kubectl("delete", "pod", "quickstart-worker-1", "--grace-period=1", "--wait=false")
    wait_for(lambda: running_again(t, "quickstart-worker-1", before), 300, "worker-1 back", every=2)
    t.mark(f"worker-1 replaced, quickstart at step {step(t)}")

    # A ps process killed: the ps and the chief restart, the chief restores the checkpoint.
    wait_for(lambda: checkpointed(t) > 0, 600, "a checkpoint", every=2)
    at = step(t)
    assert at < STEPS * 2 // 3, f"step {at} of {STEPS} before the ps kill: make STEPS longer"
    restarts = status(t, "quickstart").get("restarts", 0)
    chief = uid(t, "quickstart-chief-0")
    before_kill = checkpointed(t)
    kill_containers(t, "quickstart-ps-0")
    t.mark(f"ps-0 killed at step {at}, checkpoint {before_kill}")
    wait_for(lambda: status(t, "quickstart").get("restarts", 0) > restarts, 300, "ps restart")
    t.mark("ps restart counted")
    wait_for(lambda: running_again(t, "quickstart-chief-0", chief), 300, "chief back", every=2)
    t.mark("chief running again")

    def restored_step() -> int | None:
        # The trainer logs {"event": "restored", "step": N} when it resumes a checkpoint.
        logs = t.kubectl("logs", "quickstart-chief-0", check=False).stdout.splitlines()
        events = [json.loads(x) for x in logs if x.startswith("{")]
        steps = [e["step"] for e in events if e.get("event") == "restored"]
        return steps[-1] if steps else None

    restored = wait_for(restored_step, 300, "the restarted chief to restore", every=2)
    # From the checkpoint volume: at least the checkpoint the status showed before the kill,
    # and the work lost at most the checkpoint interval plus one window of steps.
    assert restored >= before_kill, (restored, before_kill)
    every = quickstart["spec"]["checkpoint"]["everySteps"]
    window = quickstart["spec"]["training"]["stepsPerExecution"] * 8
    assert at - restored <= every + window, (at, restored)
    t.mark(f"chief restored step {restored}, quickstart at step {step(t)}")

    def oom_events() -> list[str]:
        selector = "involvedObject.name=oom,reason=OOMKilled"
        got = t.kubectl("get", "events", "--field-selector", selector, "-o", "json").stdout
        return [e["message"] for e in json.loads(got)["items"]]

    messages = wait_for(oom_events, 600, "an OOM kill of the worker", every=3)
    assert any("recreating it with memory limit" in m for m in messages), messages
    t.mark("oom: worker OOM-killed, recreated with more memory")

    wait_for(
        lambda: status(t, "quickstart").get("phase") in ("Succeeded", "Failed"),
        1800,
        "the job to finish",
        every=3,
    )
    t.mark("quickstart finished")
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
    # Stopped by their SIGTERM (143), as PID 1 of their containers, not by the kubelet's
    # SIGKILL (137) at the end of the grace period.
    ended = quickstart_watch.terminations()
    for i in range(len(tf_config["cluster"]["ps"])):
        last = [code for pod, code, _ in ended if pod == f"quickstart-ps-{i}"][-1:]
        assert last == [143], (i, ended)
    t.mark("quickstart's ps pods stopped by their SIGTERM")

    wait_for(
        lambda: status(t, "oom").get("phase") in ("Succeeded", "Failed"), 900, "oom job", every=3
    )
    t.mark("oom finished")
    assert status(t, "oom")["phase"] == "Succeeded", json.dumps(status(t, "oom"))[-2000:]
    limit = t.kubectl(
        "get", "pod", "oom-worker-0", "-o",
        "jsonpath={.spec.containers[0].resources.limits.memory}", check=False,
    ).stdout  # fmt: skip
    assert limit != "128Mi", limit
    # The kernel's kill as the real kubelet reports it: exit 137 (SIGKILL), OOMKilled.
    killed = oom_watch.terminations()
    assert ("oom-worker-0", 137, "OOMKilled") in killed, killed

    bad = quickstart_job("bad", claim)
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
    t.mark("uninstalled, nothing left")


def test_stopping_the_node_leaves_nothing(target: Target) -> None:
    """``etj cluster down`` leaves no containerd, shim, kubelet or CoreDNS process, socket
    directory, bridge, mount, iptables chain or kubepods cgroup (``KubeletNode.leftovers``)."""
    if target.node is None:
        pytest.skip("ETJ_E2E_KUBECONFIG names a cluster this suite did not start")
    state = target.node.cluster.state_dir.parent
    down = etj_cluster("down", "--state-dir", str(state), timeout=180)
    assert down.returncode == 0 and down.stdout.strip() == "stopped", down.stdout + down.stderr
    target.mark("etj cluster down")
    wait_for(lambda: not target.node.leftovers(), 30, "nothing left after down")  # type: ignore[union-attr]
    print("\n".join(target.marks))
