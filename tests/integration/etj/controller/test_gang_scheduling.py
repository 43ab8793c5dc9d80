"""Gang scheduling, proven by the real kube-scheduler of v1.35 with the Workload API
(``scheduling.k8s.io/v1alpha1``, feature gates GenericWorkload + GangScheduling): a job
whose gang does not fit the node binds no pod and says so in its Scheduled condition; the
node grows and every pod binds; a second job does not half-bind beside the first (the
deadlock of kubeflow/training-operator#1264), and takes the node once the first is done.

The cluster here is this module's own (the session's has no feature gates); a kubelet
stand-in marks bound pods Running, so no trainer runs: what is tested is placement.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from etj_testcluster import LocalCluster
from tests.integration.conftest import ROOT, require_binaries, wait_for
from tests.integration.operator_helpers import (
    KubeletStandIn,
    OperatorProcess,
    job_status,
    live_pods,
)

pytestmark = pytest.mark.integration

GATES = ("GenericWorkload=true", "GangScheduling=true")
ONE_CPU = {"requests": {"cpu": "1"}}
# A job of 4 pods (chief, 2 workers, 1 ps) of 1 cpu each.
JOB_CPUS = 4


def gang_job(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "training.etj.dev/v1alpha1",
        "kind": "EmbeddingTrainingJob",
        "metadata": {"name": name},
        "spec": {
            "strategy": "ParameterServer",
            "replicas": {
                "chief": {"replicas": 1, "resources": ONE_CPU},
                "worker": {"replicas": 2, "resources": ONE_CPU},
                "ps": {"replicas": 1, "resources": ONE_CPU},
            },
            "model": {"embeddings": [{"name": "user_id", "vocabularySize": 1000, "dimension": 8}]},
            # Several pods share checkpoints; these pods never run, nothing is written.
            "checkpoint": {"uri": "/shared/etj-checkpoints"},
            "runPolicy": {"schedulingPolicy": {"gangScheduler": "Workload"}},
        },
    }


@pytest.fixture(scope="module")
def gang_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    c = LocalCluster(
        tmp_path_factory.mktemp("gang-cluster"),
        require_binaries(),
        feature_gates=GATES,
        apiserver_args=("--runtime-config=scheduling.k8s.io/v1alpha1=true",),
    )
    c.start()
    try:
        for path in sorted((ROOT / "crds").glob("*.yaml")):
            c.kubectl("apply", "--server-side", "-f", str(path))
        wait_for(
            lambda: (
                c.kubectl(
                    "wait",
                    "--for=condition=Established",
                    "--timeout=30s",
                    "crd",
                    "--all",
                    check=False,
                ).returncode
                == 0
            ),
            120,
            "the CRDs Established",
        )
        yield c
    finally:
        c.stop()


@pytest.fixture
def ns(gang_cluster: LocalCluster) -> Iterator[str]:
    name = f"g-{uuid.uuid4().hex[:8]}"
    gang_cluster.kubectl("create", "namespace", name)
    wait_for(
        lambda: (
            gang_cluster.kubectl(
                "get", "serviceaccount", "default", "-n", name, check=False
            ).returncode
            == 0
        ),
        120,
        "the default ServiceAccount",
    )
    yield name
    # No kubelet confirms the deletion of these pods once the test's stand-in is gone:
    # forced, so the next test has the node's cpu to itself.
    gang_cluster.kubectl(
        "delete", "pods", "--all", "-n", name, "--grace-period=0", "--force", check=False
    )
    gang_cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture
def operator(gang_cluster: LocalCluster, ns: str, tmp_path: Path) -> Iterator[OperatorProcess]:
    op = OperatorProcess(gang_cluster, ns, tmp_path / "operator.log").start()
    try:
        yield op
    finally:
        op.stop()


@pytest.fixture
def kubelet(gang_cluster: LocalCluster, ns: str) -> Iterator[KubeletStandIn]:
    with KubeletStandIn(gang_cluster, ns) as k:
        yield k


def apply(cluster: LocalCluster, ns: str, doc: dict[str, Any]) -> None:
    cluster.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(doc))


def job_pods(cluster: LocalCluster, ns: str, job: str) -> dict[str, dict[str, Any]]:
    return {
        n: p
        for n, p in live_pods(cluster, ns).items()
        if p["metadata"]["labels"].get("training.etj.dev/job-name") == job
    }


def bound(cluster: LocalCluster, ns: str, job: str) -> int:
    """The job's pods holding a place on the node: bound and not finished."""
    return sum(
        1
        for p in job_pods(cluster, ns, job).values()
        if p["spec"].get("nodeName") and p["status"].get("phase") not in ("Succeeded", "Failed")
    )


def scheduled(cluster: LocalCluster, ns: str, job: str) -> dict[str, Any]:
    conditions = job_status(cluster, ns, job).get("conditions") or []
    return next((c for c in conditions if c["type"] == "Scheduled"), {})


def test_a_gang_that_does_not_fit_binds_no_pod_until_the_node_grows(
    gang_cluster: LocalCluster, ns: str, operator: OperatorProcess, kubelet: KubeletStandIn
) -> None:
    cluster = gang_cluster
    cluster.resize_node({"cpu": str(JOB_CPUS - 1)})
    apply(cluster, ns, gang_job("big"))

    def unschedulable() -> dict[str, Any] | None:
        # At every look, before and while the job says so: not one pod bound.
        assert bound(cluster, ns, "big") == 0, "a pod of a gang that cannot fit was bound"
        c = scheduled(cluster, ns, "big")
        return c if c.get("reason") == "GangUnschedulable" else None

    condition = wait_for(unschedulable, 120, "Scheduled=False/GangUnschedulable")
    assert condition["status"] == "False"
    assert "Insufficient cpu" in condition["message"], condition
    assert len(job_pods(cluster, ns, "big")) == JOB_CPUS
    assert bound(cluster, ns, "big") == 0

    # The gang object: owned by the job, sized from the plan; every pod points at it.
    workload = json.loads(
        cluster.kubectl("get", "workloads.scheduling.k8s.io", "big", "-n", ns, "-o", "json").stdout
    )
    owner = workload["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["controller"]) == (
        "EmbeddingTrainingJob",
        "big",
        True,
    )
    assert workload["spec"]["podGroups"][0]["policy"]["gang"]["minCount"] == JOB_CPUS
    for pod in job_pods(cluster, ns, "big").values():
        assert pod["spec"]["workloadRef"]["name"] == "big"

    cluster.resize_node({"cpu": str(JOB_CPUS)})
    wait_for(lambda: bound(cluster, ns, "big") == JOB_CPUS, 120, "every pod bound")
    placed = wait_for(
        lambda: (c := scheduled(cluster, ns, "big")).get("status") == "True" and c,
        120,
        "Scheduled=True",
    )
    assert placed["reason"] == "GangScheduled"
    wait_for(lambda: job_status(cluster, ns, "big").get("phase") == "Running", 120, "Running")

    # A worker fails and is replaced (ParameterServer: that pod alone): the new pod joins
    # the gang whose other members are bound, and binds at once.
    before = job_pods(cluster, ns, "big")["big-worker-0"]["metadata"]["uid"]
    kubelet.terminate("big-worker-0", 137)
    wait_for(
        lambda: (
            (p := job_pods(cluster, ns, "big").get("big-worker-0")) is not None
            and p["metadata"]["uid"] != before
            and p["spec"].get("nodeName")
        ),
        120,
        "the replaced worker bound",
    )


def test_a_second_job_does_not_deadlock_the_first(
    gang_cluster: LocalCluster, ns: str, operator: OperatorProcess, kubelet: KubeletStandIn
) -> None:
    cluster = gang_cluster
    # Room for one job, not two: without a gang, the second would take the first's last
    # places and both would hold half a job each.
    cluster.resize_node({"cpu": str(JOB_CPUS + JOB_CPUS // 2)})
    apply(cluster, ns, gang_job("first"))
    wait_for(lambda: len(job_pods(cluster, ns, "first")) == JOB_CPUS, 120, "first's pods")
    apply(cluster, ns, gang_job("second"))

    def whole_or_none(job: str) -> int:
        n = bound(cluster, ns, job)
        assert n in (0, JOB_CPUS), f"a half-bound gang: {job} {n}"
        return n

    def one_whole_job() -> str | None:
        # At every look while both wait to be placed: each job all bound or not at all.
        placed = [job for job in ("first", "second") if whole_or_none(job) == JOB_CPUS]
        return placed[0] if placed else None

    winner = wait_for(one_whole_job, 120, "one job wholly bound")
    other = "second" if winner == "first" else "first"
    wait_for(
        lambda: (
            len(job_pods(cluster, ns, other)) == JOB_CPUS
            and scheduled(cluster, ns, other).get("reason") == "GangUnschedulable"
        ),
        120,
        f"{other} waiting as a whole (GangUnschedulable)",
    )
    assert bound(cluster, ns, other) == 0

    # The placed job finishes (its chief exits 0; the operator stops the rest): the
    # other takes the node, every pod of it. The finished job's pods go one delete at a
    # time (the other's gang may bind before its last one goes: there is room): only the
    # gang being placed must be whole at every look.
    kubelet.terminate(f"{winner}-chief-0", 0, reason="Completed")
    wait_for(
        lambda: job_status(cluster, ns, winner).get("phase") == "Succeeded", 120, "winner done"
    )
    wait_for(
        lambda: whole_or_none(other) == JOB_CPUS and bound(cluster, ns, winner) == 0,
        120,
        f"{other} wholly bound once {winner} is done",
    )


def test_the_charts_rbac_allows_exactly_the_workload_gang(
    gang_cluster: LocalCluster, ns: str, tmp_path: Path
) -> None:
    """Under the chart's ServiceAccount the operator makes the Workload and remakes it when
    the plan grows; without the one verb a remake needs (delete), the job says why."""
    from tests.integration.charts.test_chart import (
        CHART,
        RELEASE,
        RELEASE_NS,
        helm,
        service_account_kubeconfig,
    )

    cluster = gang_cluster
    cluster.resize_node({"cpu": "64"})
    helm(cluster, "install", RELEASE, CHART, "-n", RELEASE_NS, "--create-namespace", "--skip-crds")
    kubeconfig = service_account_kubeconfig(cluster, tmp_path / "sa.kubeconfig")
    op = OperatorProcess(cluster, ns, tmp_path / "op.log", kubeconfig=kubeconfig).start()
    try:
        with KubeletStandIn(cluster, ns):
            apply(cluster, ns, gang_job("ctr"))
            wait_for(lambda: bound(cluster, ns, "ctr") == JOB_CPUS, 120, "every pod bound")

            def min_count() -> int:
                workload = json.loads(
                    cluster.kubectl(
                        "get", "workloads.scheduling.k8s.io", "ctr", "-n", ns, "-o", "json"
                    ).stdout
                )
                return int(workload["spec"]["podGroups"][0]["policy"]["gang"]["minCount"])

            assert min_count() == JOB_CPUS
            # One more worker: the plan has 5 pods, and the Workload (immutable pod
            # groups) is remade for 5.
            patch = {"spec": {"replicas": {"worker": {"replicas": 3}}}}
            cluster.kubectl(
                "patch", "etj", "ctr", "-n", ns, "--type=merge", "-p", json.dumps(patch)
            )
            wait_for(lambda: min_count() == JOB_CPUS + 1, 120, "the Workload remade for 5")
            wait_for(lambda: bound(cluster, ns, "ctr") == JOB_CPUS + 1, 120, "5 pods bound")
            assert "forbidden" not in op.tail(400).lower()

            # The chart's rule without delete: the next remake is refused, and said so.
            role = json.loads(cluster.kubectl("get", "clusterrole", RELEASE, "-o", "json").stdout)
            for rule in role["rules"]:
                if rule["resources"] == ["workloads"]:
                    rule["verbs"] = [v for v in rule["verbs"] if v != "delete"]
            role["metadata"].pop("resourceVersion", None)
            cluster.kubectl("replace", "-f", "-", input=json.dumps(role))
            patch = {"spec": {"replicas": {"worker": {"replicas": 4}}}}
            cluster.kubectl(
                "patch", "etj", "ctr", "-n", ns, "--type=merge", "-p", json.dumps(patch)
            )
            refused = wait_for(
                lambda: (
                    (c := scheduled(cluster, ns, "ctr")).get("reason") == "GangSchedulerUnavailable"
                    and c
                ),
                120,
                "Scheduled=False/GangSchedulerUnavailable",
            )
            assert "not allowed" in refused["message"], refused
            assert "ctr-worker-3" not in job_pods(cluster, ns, "ctr")
    finally:
        op.stop()
        helm(cluster, "uninstall", RELEASE, "-n", RELEASE_NS, check=False)


# No Volcano scheduler runs here (nor scheduler-plugins'): a stand-in CRD of its PodGroup,
# schema left open, shows what the operator makes of a Volcano gang on a real API server.
VOLCANO_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "podgroups.scheduling.volcano.sh"},
    "spec": {
        "group": "scheduling.volcano.sh",
        "names": {"kind": "PodGroup", "plural": "podgroups", "singular": "podgroup"},
        "scope": "Namespaced",
        "versions": [
            {
                "name": "v1beta1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "x-kubernetes-preserve-unknown-fields": True,
                    }
                },
            }
        ],
    },
}


def test_a_volcano_gang_is_a_pod_group_the_pods_name_and_it_follows_the_plan(
    gang_cluster: LocalCluster, ns: str, operator: OperatorProcess, kubelet: KubeletStandIn
) -> None:
    cluster = gang_cluster
    cluster.kubectl("apply", "-f", "-", input=json.dumps(VOLCANO_CRD))
    cluster.kubectl(
        "wait",
        "--for=condition=Established",
        "--timeout=30s",
        "crd/podgroups.scheduling.volcano.sh",
    )
    doc = gang_job("vc")
    doc["spec"]["runPolicy"]["schedulingPolicy"] = {
        "gangScheduler": "Volcano",
        "queue": "research",
    }
    apply(cluster, ns, doc)

    def pod_group() -> dict[str, Any] | None:
        got = cluster.kubectl(
            "get", "podgroups.scheduling.volcano.sh", "vc", "-n", ns, "-o", "json", check=False
        )
        return json.loads(got.stdout) if got.returncode == 0 else None

    group = wait_for(pod_group, 120, "the PodGroup")
    assert group["spec"] == {
        "minMember": JOB_CPUS,
        "minResources": {
            "cpu": f"{JOB_CPUS * 1000}m",
            "memory": group["spec"]["minResources"]["memory"],
        },
        "queue": "research",
    }
    assert group["metadata"]["ownerReferences"][0]["name"] == "vc"
    wait_for(lambda: len(job_pods(cluster, ns, "vc")) == JOB_CPUS, 120, "the pods")
    for pod in job_pods(cluster, ns, "vc").values():
        assert pod["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == "vc"
        assert pod["spec"]["schedulerName"] == "volcano"
    # Nobody is "volcano" here: the pods wait, and so does the job.
    waiting = wait_for(
        lambda: (c := scheduled(cluster, ns, "vc")).get("reason") == "GangWaiting" and c,
        120,
        "Scheduled=False/GangWaiting",
    )
    assert "Volcano gang of 4" in waiting["message"]
    assert bound(cluster, ns, "vc") == 0
    # One more worker: the PodGroup is patched to the new plan.
    patch = {"spec": {"replicas": {"worker": {"replicas": 3}}}}
    cluster.kubectl("patch", "etj", "vc", "-n", ns, "--type=merge", "-p", json.dumps(patch))
    wait_for(
        lambda: (g := pod_group()) is not None and g["spec"]["minMember"] == JOB_CPUS + 1,
        120,
        "minMember 5",
    )
