"""``etj cluster up --node kubelet`` then ``etj cluster down``, through the command line:
the cluster comes up with only the real node (containerd + runc + CNI bridge + the kubelet
with a client certificate + CoreDNS; the fake node is gone), and after ``down`` nothing is
left: no containerd, shim, kubelet or CoreDNS process, no bridge, no mount, no iptables
chain, no kubepods cgroup (``KubeletNode.leftovers``).

What a pod on that node does (runs from the built trainer image, resolves peers and the
``kubernetes`` Service by DNS, reaches the API server through it, logs through ``kubectl
logs``, is OOM-killed by the kernel) is checked by the end-to-end flow on the same node,
tests/e2e/test_real_node.py, which also checks that stopping its node leaves nothing: one
real-node cluster for all of it instead of one per check.

Skips, saying why, where the node cannot start (not root, packages or binaries missing:
``make node-packages node-binaries``).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from etj.localcluster.cluster import LocalCluster
from etj.localcluster.kubelet_node import KUBELET_NODE_NAME, KubeletNode, unavailable_reason

from .conftest import require_binaries, wait_for

pytestmark = pytest.mark.integration


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
        assert nodes.stdout.split() == [f"node/{KUBELET_NODE_NAME}"]  # the fake one is gone
    finally:
        down = etj_cluster("down", "--state-dir", str(state), timeout=120)
    assert down.returncode == 0, down.stderr
    node = KubeletNode(LocalCluster(state / "cluster"))
    wait_for(lambda: not node.leftovers(), 30, f"nothing left after down: {node.leftovers()}")
