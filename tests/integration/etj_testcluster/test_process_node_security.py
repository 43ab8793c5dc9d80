"""The process-backed node honours a pod's securityContext as far as a process can
(etj_testcluster.pod_security): a restricted pod's process runs with no capabilities and
no_new_privs, and a container a kubelet would refuse (runAsNonRoot as root) never starts
and says why in its status."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from etj_testcluster import LocalCluster
from tests.integration.conftest import get_json, wait_for

pytestmark = pytest.mark.integration

# Exit 0 only when the process has no effective capability and cannot gain privileges.
CHECK = (
    "import sys; s = open('/proc/self/status').read(); "
    "sys.exit(0 if 'CapEff:\\t0000000000000000' in s and 'NoNewPrivs:\\t1' in s else 3)"
)


def pod(name: str, pod_sc: dict[str, Any], sc: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {
                "training.etj.dev/replica-type": "chief",
                "training.etj.dev/replica-index": "0",
            },
        },
        "spec": {
            "restartPolicy": "Never",
            "securityContext": pod_sc,
            "containers": [
                {
                    "name": "trainer",
                    "image": "unused",
                    "command": ["python", "-c", CHECK],
                    "securityContext": sc,
                }
            ],
        },
    }


RESTRICTED_POD = {
    "runAsNonRoot": True,
    "runAsUser": 1000,
    "seccompProfile": {"type": "RuntimeDefault"},
}
RESTRICTED_CONTAINER = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


@pytest.fixture
def node(cluster: LocalCluster, namespace: str, tmp_path: Path) -> Iterator[None]:
    with open(tmp_path / "node.log", "wb") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "etj_testcluster.process_node",
                "--kubeconfig",
                str(cluster.kubeconfig),
                "--state-dir",
                str(tmp_path / "node"),
                "--namespace",
                namespace,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        yield
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=120)


def create(cluster: LocalCluster, namespace: str, manifest: dict[str, Any]) -> None:
    cluster.kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(manifest))


def phase(cluster: LocalCluster, namespace: str, name: str) -> str:
    return str(get_json(cluster, "pod", name, "-n", namespace)["status"].get("phase"))


def test_a_restricted_pod_runs_without_capabilities_and_privilege_escalation(
    cluster: LocalCluster, namespace: str, node: None
):
    create(cluster, namespace, pod("locked-chief-0", RESTRICTED_POD, RESTRICTED_CONTAINER))
    create(cluster, namespace, pod("open-chief-0", {}, {}))
    wait_for(
        lambda: phase(cluster, namespace, "locked-chief-0") in ("Succeeded", "Failed"),
        120,
        "the restricted pod's end",
    )
    assert phase(cluster, namespace, "locked-chief-0") == "Succeeded"
    # The control: a pod asking for nothing keeps the node's privileges (when it has any).
    wait_for(
        lambda: phase(cluster, namespace, "open-chief-0") in ("Succeeded", "Failed"),
        120,
        "the open pod's end",
    )
    expected = "Failed" if os.geteuid() == 0 else "Succeeded"
    assert phase(cluster, namespace, "open-chief-0") == expected


def test_run_as_non_root_as_root_is_refused_and_never_runs(
    cluster: LocalCluster, namespace: str, node: None
):
    create(cluster, namespace, pod("root-chief-0", {"runAsNonRoot": True, "runAsUser": 0}, {}))

    def waiting() -> dict[str, Any]:
        statuses = get_json(cluster, "pod", "root-chief-0", "-n", namespace)["status"].get(
            "containerStatuses"
        ) or [{}]
        return dict(statuses[0].get("state", {}).get("waiting") or {})

    state = wait_for(waiting, 120, "the refusal in the pod's status")
    assert state["reason"] == "CreateContainerConfigError"
    assert "runAsUser breaks non-root policy" in state["message"]
    assert phase(cluster, namespace, "root-chief-0") == "Pending"
