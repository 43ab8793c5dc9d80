"""``etj cluster up`` (no flag) runs pods: the process-backed node comes up with the control
plane, runs a pod bound to it to Succeeded, and dies with ``etj cluster down``, taking its
pods' processes along. ``--node none`` keeps the control plane alone (pods never run)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from etj.local.launch import processes_naming
from tests.integration.conftest import require_binaries, wait_for
from tests.integration.etj_testcluster.test_cluster_lifecycle import etj_cluster

pytestmark = pytest.mark.integration


POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "name": "hello-chief-0",
        "labels": {"training.etj.dev/replica-type": "chief", "training.etj.dev/replica-index": "0"},
    },
    "spec": {
        "restartPolicy": "Never",
        "containers": [
            {"name": "trainer", "image": "unused", "command": ["python", "-c", "print('ran')"]}
        ],
    },
}


def test_default_up_runs_pods_on_the_process_node(tmp_path: Path) -> None:
    bin_dir = require_binaries()
    state = tmp_path / "state"
    up = etj_cluster("up", "--state-dir", str(state), timeout=240)
    try:
        assert up.returncode == 0, up.stderr
        kubectl = [str(bin_dir / "kubectl"), "--kubeconfig", up.stdout.strip()]
        node_procs = processes_naming(state / "node")
        assert node_procs, "no process-backed node runs after `etj cluster up`"
        subprocess.run([*kubectl, "apply", "-f", "-"], input=json.dumps(POD), check=True, text=True)

        def phase() -> str | None:
            got = subprocess.run(
                [*kubectl, "get", "pod", "hello-chief-0", "-o", "jsonpath={.status.phase}"],
                capture_output=True,
                text=True,
            )
            return got.stdout if got.stdout in ("Succeeded", "Failed") else None

        assert wait_for(phase, 120, "the pod to finish", every=0.5) == "Succeeded"
    finally:
        down = etj_cluster("down", "--state-dir", str(state))
    assert down.returncode == 0, down.stderr
    wait_for(lambda: not processes_naming(state), 120, "every node process to stop with `down`")


def test_up_node_none_runs_no_node(tmp_path: Path) -> None:
    require_binaries()
    state = tmp_path / "state"
    up = etj_cluster("up", "--node", "none", "--state-dir", str(state), timeout=240)
    try:
        assert up.returncode == 0, up.stderr
        assert not processes_naming(state / "node")
    finally:
        etj_cluster("down", "--state-dir", str(state))
