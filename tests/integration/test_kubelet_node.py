"""The real node (``etj cluster up --node kubelet``): containerd + runc + CNI bridge + the
kubelet with a client certificate + CoreDNS. A pod from the built trainer image runs, finds
the ``kubernetes`` Service by its DNS name and reaches the API server through it, and its
logs come back through ``kubectl logs``. After ``stop()`` nothing is left: no containerd,
shim, kubelet or CoreDNS process, no bridge, no mount, no iptables chain, no kubepods cgroup.

Skips, saying why, where the node cannot start (not root, packages or binaries missing:
``make node-packages node-binaries images``).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from etj.local.procs import processes_naming
from etj.localcluster.cluster import NODE_NAME, LocalCluster
from etj.localcluster.kubelet_node import (
    BRIDGE,
    KUBELET_NODE_NAME,
    KubeletNode,
    _cgroup_dirs,
    _mounts_under,
    image_archives,
    leftover_rules,
    unavailable_reason,
)

from .conftest import require_binaries, wait_for

pytestmark = pytest.mark.integration

PROBE = """
import socket, ssl, urllib.request
print("dns", socket.gethostbyname("kubernetes.default.svc.cluster.local"), flush=True)
token = open("/var/run/secrets/kubernetes.io/serviceaccount/token").read()
ctx = ssl.create_default_context(cafile="/var/run/secrets/kubernetes.io/serviceaccount/ca.crt")
req = urllib.request.Request("https://kubernetes.default.svc/version",
                             headers={"Authorization": "Bearer " + token})
print("api", urllib.request.urlopen(req, context=ctx, timeout=10).status, flush=True)
"""


def leftovers(node: KubeletNode) -> list[str]:
    """What a stopped node must not leave behind."""
    found = [f"process {pid}" for pid in processes_naming(node.state, node.run_dir)]
    if node.run_dir.exists():
        found.append(f"socket directory {node.run_dir}")
    if subprocess.run(["ip", "link", "show", BRIDGE], capture_output=True).returncode == 0:
        found.append(f"bridge {BRIDGE}")
    found += [f"mount {m}" for m in _mounts_under([node.state, node.store, node.run_dir])]
    found += leftover_rules()
    found += [f"cgroup {c}" for c in _cgroup_dirs()]
    return found


@pytest.fixture
def real_node(tmp_path: Path) -> Iterator[KubeletNode]:
    bin_dir = require_binaries()
    reason = unavailable_reason(bin_dir)
    if reason is None and len(image_archives()) < 3:
        reason = "no built images (pause, operator, trainer): run `make images`"
    if reason:
        pytest.skip(f"real node not started: {reason}")
    cluster = LocalCluster(tmp_path / "cluster", pod_network=True).start()
    node = KubeletNode(cluster, images=image_archives())
    try:
        node.start()
        yield node
    finally:
        node.stop()
        cluster.stop()
    assert leftovers(node) == []


def test_a_pod_runs_resolves_and_reaches_the_api_server(real_node: KubeletNode) -> None:
    c = real_node.cluster
    nodes = json.loads(c.kubectl("get", "nodes", "-o", "json").stdout)["items"]
    assert [n["metadata"]["name"] for n in nodes] == [KUBELET_NODE_NAME]  # the fake is gone
    assert NODE_NAME not in c.kubectl("get", "nodes").stdout
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "probe", "namespace": "default"},
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "probe",
                    "image": "localhost/etj-trainer:dev",
                    "command": ["python", "-c", PROBE],
                }
            ],
        },
    }
    c.kubectl("apply", "-f", "-", input=json.dumps(pod))

    def finished() -> str | None:
        phase = c.kubectl("get", "pod", "probe", "-o", "jsonpath={.status.phase}").stdout
        return phase if phase in ("Succeeded", "Failed") else None

    phase = wait_for(finished, 180, "the probe pod to finish", every=1.0)
    logs = c.kubectl("logs", "probe", check=False)
    assert phase == "Succeeded", f"{logs.stdout}{logs.stderr}"
    assert "dns 10.0.0.1" in logs.stdout
    assert "api 200" in logs.stdout


def test_cli_up_kubelet_then_down_leaves_nothing(tmp_path: Path) -> None:
    from .test_cluster_lifecycle import etj_cluster

    bin_dir = require_binaries()
    reason = unavailable_reason(bin_dir)
    if reason:
        pytest.skip(f"real node not started: {reason}")
    state = tmp_path / "state"
    up = etj_cluster("up", "--node", "kubelet", "--state-dir", str(state), timeout=400)
    try:
        assert up.returncode == 0, up.stderr
        kubectl = [str(bin_dir / "kubectl"), "--kubeconfig", up.stdout.strip()]
        nodes = subprocess.run(
            [*kubectl, "get", "nodes", "-o", "name"], capture_output=True, text=True
        )
        assert nodes.stdout.split() == [f"node/{KUBELET_NODE_NAME}"]
    finally:
        down = etj_cluster("down", "--state-dir", str(state), timeout=120)
    assert down.returncode == 0, down.stderr
    node = KubeletNode(LocalCluster(state / "cluster"))
    wait_for(lambda: not leftovers(node), 30, f"nothing left after down: {leftovers(node)}")
