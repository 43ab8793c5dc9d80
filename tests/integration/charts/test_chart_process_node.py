"""The README's no-Docker path as a user takes it: a local cluster with its process-backed
node, `helm install` of the chart — the operator then runs *in its pod*, on the node, under
the chart's ServiceAccount (a bound token, as a kubelet gives one) — and
examples/quickstart.yaml with its checkpoints on a host path (`checkpoint.uri`, as the
README's line does it: no provisioner here), which reaches Succeeded with its step in
`kubectl get etj`.
`helm uninstall` then stops the operator's process."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from etj.local.launch import free_port, processes_under
from etj_testcluster import LocalCluster
from tests.integration.charts.test_chart import CHART, helm
from tests.integration.conftest import ROOT, wait_for
from tests.integration.operator_helpers import job_status, process_node

# make test-all; CI's kind e2e installs the chart and runs the quickstart to Succeeded on real
# nodes, and test_chart.py runs the operator under the chart's ServiceAccount here.
pytestmark = [pytest.mark.integration, pytest.mark.trainer, pytest.mark.slow, pytest.mark.extended]
RELEASE_NS = "etj-pn"


@pytest.fixture
def node_for(crds: LocalCluster, namespace: str, tmp_path: Path) -> Iterator[Path]:
    """A process-backed node serving the job's namespace and the release's."""
    crds.kubectl("create", "namespace", RELEASE_NS)
    try:
        with process_node(
            crds, tmp_path / "node", [namespace, RELEASE_NS], tmp_path / "node.log"
        ) as state:
            yield state
            helm(crds, "uninstall", "etj", "--namespace", RELEASE_NS, check=False)
    finally:
        crds.kubectl("delete", "namespace", RELEASE_NS, "--wait=false", check=False)


def _operator_pod(cluster: LocalCluster) -> dict[str, Any] | None:
    selector = "app.kubernetes.io/component=operator"
    out = cluster.kubectl("get", "pods", "-n", RELEASE_NS, "-l", selector, "-o", "json").stdout
    items = json.loads(out)["items"]
    return items[0] if items else None


def test_helm_install_then_the_quickstart_succeeds_on_the_process_node(
    crds: LocalCluster, namespace: str, node_for: Path, shared_dir: Path
):
    helm(
        crds,
        "install",
        "etj",
        CHART,
        "--namespace",
        RELEASE_NS,
        "--skip-crds",
        "--set",
        f"watchNamespaces={{{namespace}}}",
        # Every pod of this node shares the host's ports: free ones for this operator.
        "--set",
        f"metrics.port={free_port()}",
        "--set",
        f"livenessPort={free_port()}",
        "--set",
        "progressSeconds=2",
    )
    pod = wait_for(
        lambda: (p := _operator_pod(crds)) and p["status"].get("phase") == "Running" and p,
        120,
        "the operator's pod Running",
    )
    doc = yaml.safe_load((ROOT / "examples" / "quickstart.yaml").read_text())
    # The quickstart as it is, shortened: 1000 steps (two checkpoints) instead of 6000.
    doc["spec"]["training"]["steps"] = 1000
    # The process node has no storage provisioner for checkpoint.storage's claim; its pods
    # are processes of this host, so an absolute path is one directory for all of them.
    del doc["spec"]["checkpoint"]["storage"]
    doc["spec"]["checkpoint"]["uri"] = str(shared_dir / "ckpt")
    crds.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(doc))
    wait_for(
        lambda: job_status(crds, namespace, "quickstart").get("phase") in ("Succeeded", "Failed"),
        420,
        "the quickstart to finish",
        every=1,
    )
    st = job_status(crds, namespace, "quickstart")
    assert st["phase"] == "Succeeded", st.get("message")
    assert st["progress"]["step"] == 1000
    table = crds.kubectl("get", "etj", "quickstart", "-n", namespace).stdout
    assert "Succeeded" in table and "1000" in table
    # No operator runs here but the one in the pod, on the chart's account (its token in
    # the kubeconfig the node wrote), and nothing it did was refused.
    pod_dir = node_for / "pods" / pod["metadata"]["uid"]
    account = json.loads((pod_dir / "serviceaccount.kubeconfig").read_text())
    assert account["contexts"][0]["context"]["namespace"] == RELEASE_NS
    text = (node_for / "logs" / RELEASE_NS / f"{pod['metadata']['name']}.log").read_text()
    assert "Initial authentication has finished" in text and "orbidden" not in text
    helm(crds, "uninstall", "etj", "--namespace", RELEASE_NS)
    wait_for(lambda: _operator_pod(crds) is None, 120, "the operator's pod gone")
    wait_for(lambda: not processes_under(pod_dir), 120, "the operator's process to end")
