"""The Helm chart: lint and template clean; installed on the real API server, its
ServiceAccount's permissions are exactly enough for the operator's whole lifecycle, and
one verb fewer breaks it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from etj.localcluster import LocalCluster

from .conftest import ROOT, wait_for
from .operator_helpers import KubeletStandIn, OperatorProcess, job_status, live_pods
from .test_operator import PS_PODS, apply, job, phase

pytestmark = pytest.mark.integration
CHART = str(ROOT / "charts" / "etj")
RELEASE, RELEASE_NS = "etj", "etj-system"
# What the chart passes with replicaCount > 1.
LEADER_ARGS = (f"--leader-election={RELEASE_NS}/{RELEASE}",)


def helm(cluster: LocalCluster, *args: str, check: bool = True):  # type: ignore[no-untyped-def]
    import subprocess

    result = subprocess.run(
        [str(cluster.bin_dir / "helm"), "--kubeconfig", str(cluster.kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if check:
        assert result.returncode == 0, result.stderr
    return result


def test_lint_and_template(cluster: LocalCluster):
    lint = helm(cluster, "lint", CHART, "--strict")
    assert "0 chart(s) failed" in lint.stdout
    cluster_wide = list(yaml.safe_load_all(helm(cluster, "template", "etj", CHART).stdout))
    kinds = sorted(d["kind"] for d in cluster_wide if d)
    assert kinds == [
        "ClusterRole",
        "ClusterRoleBinding",
        "Deployment",
        "Pod",  # the `helm test` pod (a test hook)
        "Service",
        "ServiceAccount",
    ]
    scoped = [
        d
        for d in yaml.safe_load_all(
            helm(
                cluster,
                "template",
                "etj",
                CHART,
                "--set",
                "watchNamespaces={a,b}",
                "--set",
                "replicaCount=2",
            ).stdout
        )
        if d
    ]
    # A Role per watched namespace, and one for the leader Lease in the release's namespace.
    roles = [d for d in scoped if d["kind"] == "Role"]
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["a", "b", "default"]
    lease_role = next(r for r in roles if r["metadata"]["name"] == "etj-leader")
    assert {tuple(r["verbs"]) for r in lease_role["rules"]} == {("create",), ("get", "update")}
    deployment = next(d for d in scoped if d["kind"] == "Deployment")["spec"]
    args = deployment["template"]["spec"]["containers"][0]["args"]
    assert "--namespace=a" in args and "--leader-election=default/etj" in args
    assert "strategy" not in deployment  # several replicas: a rolling update is safe
    single = next(d for d in cluster_wide if d and d["kind"] == "Deployment")["spec"]
    assert single["strategy"] == {"type": "Recreate"}
    assert not any(a.startswith("--leader-election") for a in _args(single))
    bad = helm(cluster, "template", "etj", CHART, "--set", "replicaCount=-1", check=False)
    assert bad.returncode != 0 and "replicaCount" in bad.stderr


def _args(deployment_spec: dict) -> list[str]:
    return list(deployment_spec["template"]["spec"]["containers"][0]["args"])


@pytest.fixture(scope="module")
def installed(crds: LocalCluster) -> Iterator[LocalCluster]:
    helm(
        crds,
        "install",
        RELEASE,
        CHART,
        "--namespace",
        RELEASE_NS,
        "--create-namespace",
        "--skip-crds",
        # Two replicas: the chart adds the leader Lease and its Role, which the operator
        # below then uses under the chart's ServiceAccount.
        "--set",
        "replicaCount=2",
    )
    try:
        yield crds
    finally:
        helm(crds, "uninstall", RELEASE, "--namespace", RELEASE_NS, check=False)


def service_account_kubeconfig(cluster: LocalCluster, path: Path) -> Path:
    """A kubeconfig authenticating as the chart's ServiceAccount (a TokenRequest token)."""
    token = cluster.kubectl(
        "create", "token", RELEASE, "-n", RELEASE_NS, "--duration=1h"
    ).stdout.strip()
    admin = json.loads(cluster.kubeconfig.read_text())
    admin["users"] = [{"name": "etj-operator", "user": {"token": token}}]
    admin["contexts"][0]["context"]["user"] = "etj-operator"
    path.write_text(json.dumps(admin))
    return path


def lifecycle(cluster: LocalCluster, namespace: str, kubelet: KubeletStandIn) -> None:
    apply(cluster, namespace, job(ttlSecondsAfterFinished=2))
    wait_for(lambda: phase(cluster, namespace) == "Running", 60, "Running")
    before = live_pods(cluster, namespace)["ctr-worker-0"]["metadata"]["uid"]
    kubelet.terminate("ctr-worker-0", 137)
    wait_for(
        lambda: (
            (p := live_pods(cluster, namespace).get("ctr-worker-0")) is not None
            and p["metadata"]["uid"] != before
        ),
        30,
        "worker-0 replaced",
    )
    wait_for(lambda: phase(cluster, namespace) == "Running", 60, "Running again")
    kubelet.terminate("ctr-chief-0", 0)
    wait_for(lambda: phase(cluster, namespace) == "Succeeded", 30, "Succeeded")
    wait_for(lambda: job_status(cluster, namespace, "ctr") == {}, 60, "the TTL deletion")


def test_operator_under_the_chart_service_account_runs_a_whole_lifecycle(
    installed: LocalCluster, namespace: str, tmp_path: Path
):
    kubeconfig = service_account_kubeconfig(installed, tmp_path / "sa.kubeconfig")
    op = OperatorProcess(
        installed, namespace, tmp_path / "op.log", LEADER_ARGS, kubeconfig=kubeconfig
    ).start()
    try:
        with KubeletStandIn(installed, namespace) as kubelet:
            lifecycle(installed, namespace, kubelet)
        lease = json.loads(
            installed.kubectl("get", "lease", RELEASE, "-n", RELEASE_NS, "-o", "json").stdout
        )
        assert lease["spec"]["holderIdentity"]  # it ran as the elected leader
        assert "Forbidden" not in op.tail(400) and "forbidden" not in op.tail(400)
        assert set() == set(live_pods(installed, namespace)) - PS_PODS
    finally:
        op.stop()


def test_a_removed_verb_breaks_the_lifecycle(
    installed: LocalCluster, namespace: str, tmp_path: Path
):
    role = json.loads(installed.kubectl("get", "clusterrole", RELEASE, "-o", "json").stdout)
    original = json.dumps(role)
    for rule in role["rules"]:
        if rule["resources"] == ["pods"]:
            rule["verbs"] = [v for v in rule["verbs"] if v != "delete"]
    role["metadata"].pop("resourceVersion", None)
    installed.kubectl("replace", "-f", "-", input=json.dumps(role))
    kubeconfig = service_account_kubeconfig(installed, tmp_path / "sa.kubeconfig")
    op = OperatorProcess(installed, namespace, tmp_path / "op.log", kubeconfig=kubeconfig).start()
    try:
        with (
            KubeletStandIn(installed, namespace) as kubelet,
            pytest.raises(AssertionError, match="worker-0 replaced"),
        ):
            lifecycle(installed, namespace, kubelet)
        assert "forbidden" in op.tail(400).lower()
    finally:
        op.stop()
        restored = json.loads(original)
        restored["metadata"].pop("resourceVersion", None)
        installed.kubectl("replace", "-f", "-", input=json.dumps(restored))
