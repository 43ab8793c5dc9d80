"""The Helm chart: lint and template clean; installed on a locked-down API server
(OpenShift's OwnerReferencesPermissionEnforcement, Pod Security ``restricted`` on the
release's and the job's namespaces), its ServiceAccount's permissions are exactly enough
for the operator's whole lifecycle, one permission fewer breaks it, and every pod the
chart and the operator create passes ``restricted``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from etj_testcluster import LocalCluster
from tests.integration.conftest import (
    ROOT,
    apply_crds,
    create_namespace,
    require_binaries,
    wait_for,
)
from tests.integration.etj.controller.test_operator import PS_PODS, apply, job, phase
from tests.integration.operator_helpers import (
    KubeletStandIn,
    OperatorProcess,
    job_status,
    live_pods,
)

pytestmark = pytest.mark.integration
CHART = str(ROOT / "charts" / "etj")
RELEASE, RELEASE_NS = "etj", "etj-system"
# What the chart passes with replicaCount > 1.
LEADER_ARGS = (f"--leader-election={RELEASE_NS}/{RELEASE}",)
# Pod Security admission's strictest level, enforced at the newest policy version.
RESTRICTED = {
    "pod-security.kubernetes.io/enforce": "restricted",
    "pod-security.kubernetes.io/enforce-version": "latest",
}


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


def test_lint_and_template(locked: LocalCluster):
    cluster = locked
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
        # No host access, privilege or identity through a job (test_admission_policy.py):
        # no-host-access and no-borrowed-identity.
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "ValidatingAdmissionPolicyBinding",
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
    # Checkpoint claims: created for checkpoint.storage, read (access modes) for a claim
    # a job names; the cluster-wide class and the node-loss seconds as operator settings.
    role = next(d for d in cluster_wide if d and d["kind"] == "ClusterRole")
    assert {"apiGroups": [""], "resources": ["persistentvolumeclaims"], "verbs": ["get", "create"]} in role["rules"]  # fmt: skip
    # Kueue: a queued group's Workload is read (its owners), never written.
    assert {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads"], "verbs": ["get"]} in role["rules"]  # fmt: skip
    assert "--node-loss-seconds=30" in _args(single)
    assert not any(a.startswith("--checkpoint-storage-class") for a in _args(single))
    classed = yaml.safe_load_all(
        helm(cluster, "template", "etj", CHART, "--set", "checkpointStorageClass=efs-sc").stdout
    )
    deployment = next(d for d in classed if d and d["kind"] == "Deployment")["spec"]
    assert "--checkpoint-storage-class=efs-sc" in _args(deployment)


def _template(*values: str) -> list[dict]:
    """``helm template`` of the chart with ``values`` set (no cluster needed)."""
    import subprocess

    sets = [arg for v in values for arg in ("--set", v)]
    result = subprocess.run(
        [str(require_binaries() / "helm"), "template", RELEASE, CHART, *sets],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return [d for d in yaml.safe_load_all(result.stdout) if d]


def test_tensorboard_is_off_by_default_and_reads_the_log_dir_it_is_given():
    assert not [d for d in _template() if "tensorboard" in d["metadata"]["name"]]
    docs = _template(
        "tensorboard.enabled=true",
        "tensorboard.namespace=team-a",
        "tensorboard.claimName=ctr-checkpoints",
        "tensorboard.logDir=/var/lib/etj/checkpoints/ctr/tensorboard",
    )
    board = {d["kind"]: d for d in docs if "tensorboard" in d["metadata"]["name"]}
    assert sorted(board) == ["Deployment", "Service"]
    assert {d["metadata"]["namespace"] for d in board.values()} == {"team-a"}
    pod = board["Deployment"]["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    assert "--logdir=/var/lib/etj/checkpoints/ctr/tensorboard" in container["args"]
    assert {"name": "logs", "mountPath": "/var/lib/etj/checkpoints", "readOnly": True} in (
        container["volumeMounts"]
    )
    claims = [
        v["persistentVolumeClaim"] for v in pod["spec"]["volumes"] if "persistentVolumeClaim" in v
    ]
    assert claims == [{"claimName": "ctr-checkpoints", "readOnly": True}]
    # The Service selects the TensorBoard pod, not the operator's.
    service = board["Service"]["spec"]
    assert service["selector"] == pod["metadata"]["labels"]
    assert service["selector"]["app.kubernetes.io/component"] == "tensorboard"
    assert service["ports"] == [{"name": "http", "port": 6006, "targetPort": "http"}]
    # A gs:// log dir with a key: mounted as a file, named by GOOGLE_APPLICATION_CREDENTIALS.
    (gcs,) = [
        d
        for d in _template(
            "tensorboard.enabled=true",
            "tensorboard.logDir=gs://bucket/tb/team-a",
            "tensorboard.credentialsSecret.name=gcs-key",
        )
        if d["kind"] == "Deployment" and "tensorboard" in d["metadata"]["name"]
    ]
    (container,) = gcs["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["GOOGLE_APPLICATION_CREDENTIALS"] == "/var/run/secrets/etj/gcs/key.json"
    assert not [
        v for v in gcs["spec"]["template"]["spec"]["volumes"] if "persistentVolumeClaim" in v
    ]


def _args(deployment_spec: dict) -> list[str]:
    return list(deployment_spec["template"]["spec"]["containers"][0]["args"])


@pytest.fixture(scope="module")
def locked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A control plane of its own that admits as a locked-down cluster does."""
    c = LocalCluster(tmp_path_factory.mktemp("locked"), require_binaries(), locked_down=True)
    c.start()
    try:
        yield apply_crds(c)
    finally:
        c.stop()


@pytest.fixture(scope="module")
def installed(locked: LocalCluster) -> Iterator[LocalCluster]:
    release_ns = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": RELEASE_NS, "labels": RESTRICTED},
    }
    locked.kubectl("create", "-f", "-", input=json.dumps(release_ns))
    helm(
        locked,
        "install",
        RELEASE,
        CHART,
        "--namespace",
        RELEASE_NS,
        "--skip-crds",
        # Two replicas: the chart adds the leader Lease and its Role, which the operator
        # below then uses under the chart's ServiceAccount.
        "--set",
        "replicaCount=2",
    )
    try:
        yield locked
    finally:
        helm(locked, "uninstall", RELEASE, "--namespace", RELEASE_NS, check=False)


@pytest.fixture
def restricted(locked: LocalCluster) -> Iterator[str]:
    """A job namespace on the locked-down cluster with Pod Security ``restricted``."""
    name = create_namespace(locked, RESTRICTED)
    yield name
    locked.kubectl("delete", "namespace", name, "--wait=false", check=False)


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
    wait_for(lambda: phase(cluster, namespace) == "Running", 120, "Running")
    before = live_pods(cluster, namespace)["ctr-worker-0"]["metadata"]["uid"]
    kubelet.terminate("ctr-worker-0", 137)
    wait_for(
        lambda: (
            (p := live_pods(cluster, namespace).get("ctr-worker-0")) is not None
            and p["metadata"]["uid"] != before
        ),
        120,
        "worker-0 replaced",
    )
    wait_for(lambda: phase(cluster, namespace) == "Running", 120, "Running again")
    kubelet.terminate("ctr-chief-0", 0)
    wait_for(lambda: phase(cluster, namespace) == "Succeeded", 120, "Succeeded")
    wait_for(lambda: job_status(cluster, namespace, "ctr") == {}, 120, "the TTL deletion")


def test_operator_under_the_chart_service_account_runs_a_whole_lifecycle(
    installed: LocalCluster, restricted: str, tmp_path: Path
):
    namespace = restricted
    kubeconfig = service_account_kubeconfig(installed, tmp_path / "sa.kubeconfig")
    op = OperatorProcess(
        installed, namespace, tmp_path / "op.log", LEADER_ARGS, kubeconfig=kubeconfig
    ).start()
    try:
        with KubeletStandIn(installed, namespace) as kubelet:
            try:
                lifecycle(installed, namespace, kubelet)
            except AssertionError as exc:
                raise AssertionError(f"{exc}\n--- the operator's log ---\n{op.tail(30)}") from exc
        lease = json.loads(
            installed.kubectl("get", "lease", RELEASE, "-n", RELEASE_NS, "-o", "json").stdout
        )
        assert lease["spec"]["holderIdentity"]  # it ran as the elected leader
        assert "Forbidden" not in op.tail(400) and "forbidden" not in op.tail(400)
        assert set() == set(live_pods(installed, namespace)) - PS_PODS
    finally:
        op.stop()


def _without_delete_on_pods(rules: list[dict]) -> list[dict]:
    return [
        {**r, "verbs": [v for v in r["verbs"] if v != "delete"]}
        if r["resources"] == ["pods"]
        else r
        for r in rules
    ]


def _without_finalizers(rules: list[dict]) -> list[dict]:
    return [r for r in rules if r["resources"] != ["embeddingtrainingjobs/finalizers"]]


@pytest.mark.extended  # make test-all (minutes; see the extended marker)
@pytest.mark.parametrize(
    ("cut", "stuck_at", "error"),
    [
        # A failed worker is never replaced: its pod cannot be deleted.
        (_without_delete_on_pods, "worker-0 replaced", "forbidden"),
        # OwnerReferencesPermissionEnforcement: no object with blockOwnerDeletion is created.
        (_without_finalizers, "Running", "cannot set blockOwnerDeletion"),
    ],
    ids=["delete-pods", "update-finalizers"],
)
def test_a_removed_permission_breaks_the_lifecycle(
    installed: LocalCluster, restricted: str, tmp_path: Path, cut, stuck_at: str, error: str
):
    namespace = restricted
    role = json.loads(installed.kubectl("get", "clusterrole", RELEASE, "-o", "json").stdout)
    original = json.dumps(role)
    role["rules"] = cut(role["rules"])
    assert role["rules"] != json.loads(original)["rules"]
    role["metadata"].pop("resourceVersion", None)
    installed.kubectl("replace", "-f", "-", input=json.dumps(role))
    kubeconfig = service_account_kubeconfig(installed, tmp_path / "sa.kubeconfig")
    op = OperatorProcess(installed, namespace, tmp_path / "op.log", kubeconfig=kubeconfig).start()
    try:
        with (
            KubeletStandIn(installed, namespace) as kubelet,
            pytest.raises(AssertionError, match=stuck_at),
        ):
            lifecycle(installed, namespace, kubelet)
        assert error in op.tail(400)
    finally:
        op.stop()
        restored = json.loads(original)
        restored["metadata"].pop("resourceVersion", None)
        installed.kubectl("replace", "-f", "-", input=json.dumps(restored))


def test_every_pod_of_the_chart_passes_restricted_pod_security(installed: LocalCluster):
    # The operator's Deployment: its ReplicaSet could create both pods in a namespace that
    # enforces `restricted` (a violating pod is refused at admission: no pod, FailedCreate).
    selector = f"app.kubernetes.io/instance={RELEASE},app.kubernetes.io/component=operator"
    wait_for(
        lambda: (
            len(
                json.loads(
                    installed.kubectl(
                        "get", "pods", "-n", RELEASE_NS, "-l", selector, "-o", "json"
                    ).stdout
                )["items"]
            )
            == 2
        ),
        120,
        "the operator's two pods",
    )
    # The `helm test` pod, admitted by the real server (a dry run stores nothing).
    test_pod = helm(
        installed,
        "template",
        RELEASE,
        CHART,
        "--namespace",
        RELEASE_NS,
        "--show-only",
        "templates/tests/test-metrics.yaml",
    ).stdout
    dry_run = installed.kubectl(
        "create", "--dry-run=server", "-n", RELEASE_NS, "-f", "-", input=test_pod, check=False
    )
    assert dry_run.returncode == 0, dry_run.stderr
    assert "would violate" not in dry_run.stderr
    # The optional TensorBoard's pod (tensorboard.enabled), as its Deployment would make it.
    board = helm(
        installed,
        "template",
        RELEASE,
        CHART,
        "--namespace",
        RELEASE_NS,
        "--set",
        "tensorboard.enabled=true",
        "--set",
        "tensorboard.claimName=ctr-checkpoints",
        "--show-only",
        "templates/tensorboard.yaml",
    ).stdout
    deployment = next(d for d in yaml.safe_load_all(board) if d and d["kind"] == "Deployment")
    board_pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "tensorboard", **deployment["spec"]["template"]["metadata"]},
        "spec": deployment["spec"]["template"]["spec"],
    }
    dry_run = installed.kubectl(
        "create",
        "--dry-run=server",
        "-n",
        RELEASE_NS,
        "-f",
        "-",
        input=json.dumps(board_pod),
        check=False,
    )
    assert dry_run.returncode == 0, dry_run.stderr
    assert "would violate" not in dry_run.stderr
    # The control: the namespace does enforce it.
    bare = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "bare"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }
    refused = installed.kubectl(
        "create",
        "--dry-run=server",
        "-n",
        RELEASE_NS,
        "-f",
        "-",
        input=json.dumps(bare),
        check=False,
    )
    assert refused.returncode != 0 and 'violates PodSecurity "restricted' in refused.stderr
