"""A real Kueue (etj_testcluster.kueue, built by `make kueue`) admits an etj job as one
plain-Pod group on the local control plane: the pods wait gated while their LocalQueue is
missing, start once it exists, and when the job succeeds (its ps stopped by etj) Kueue
counts the group's Workload finished. A running job preempted by a higher-priority one is
requeued (not Failed, not Finished), its pods made again wait at Kueue's gate, and it is
admitted again and succeeds once the other has finished.

Skipped with the reason when Kueue is not built (it is not part of `make binaries`)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from etj.api.constants import (
    KUEUE_ADMISSION_GATE,
    KUEUE_MANAGED_LABEL,
    KUEUE_PRIORITY_CLASS_LABEL,
    KUEUE_QUEUE_NAME_LABEL,
)
from etj_testcluster import LocalCluster
from etj_testcluster.kueue import KUEUE_API, LocalKueue, missing
from tests.integration.conftest import (
    apply_crds,
    create_namespace,
    get_json,
    require_binaries,
    wait_for,
)
from tests.integration.etj.controller.test_kueue_labels import QUEUE, queued_job
from tests.integration.etj.controller.test_operator import apply, phase
from tests.integration.operator_helpers import (
    KubeletStandIn,
    OperatorProcess,
    events,
    job_status,
    live_pods,
)

pytestmark = pytest.mark.integration


class Kubelet(KubeletStandIn):
    """Writes a deleted pod's end (143: SIGTERM) before confirming the deletion, as a
    kubelet does for a pod on its node: Kueue counts a group finished by its pods' phases,
    and Kueue's finalizer keeps a deleted pod until then."""

    def _confirm_deletion(self, name: str) -> None:
        pod = self.core.read_namespaced_pod(name, self.namespace)
        if pod.spec.node_name and pod.status.phase not in ("Succeeded", "Failed"):
            self.terminate(name, 143)
        super()._confirm_deletion(name)


@pytest.fixture(scope="module")
def kueue_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A cluster of its own: Kueue's pod webhook fails closed for every pod it sees."""
    with running_kueue(tmp_path_factory) as c:
        yield c


@contextlib.contextmanager
def running_kueue(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A local cluster with the CRDs and Kueue running; skips when Kueue is not built."""
    why = missing()
    if why:
        pytest.skip(why)
    c = LocalCluster(tmp_path_factory.mktemp("kueue-cluster"), require_binaries())
    c.start()
    kueue = LocalKueue(c, tmp_path_factory.mktemp("kueue"))
    try:
        apply_crds(c)
        kueue.start()
        yield c
    finally:
        kueue.stop()
        c.stop()


def kueue_object(kind: str, name: str, spec: dict[str, Any], namespace: str | None = None):  # type: ignore[no-untyped-def]
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    return {"apiVersion": KUEUE_API, "kind": kind, "metadata": meta, "spec": spec}


def create(cluster: LocalCluster, doc: dict[str, Any]) -> None:
    cluster.kubectl("apply", "-f", "-", input=json.dumps(doc))


def workloads(cluster: LocalCluster, namespace: str) -> list[dict[str, Any]]:
    return list(get_json(cluster, "workloads.kueue.x-k8s.io", "-n", namespace)["items"])


def condition(obj: dict[str, Any], kind: str) -> bool:
    return any(
        c["type"] == kind and c["status"] == "True"
        for c in obj.get("status", {}).get("conditions", [])
    )


def test_kueue_admits_the_group_and_counts_it_finished(kueue_cluster: LocalCluster, tmp_path: Path):
    c = kueue_cluster
    namespace = create_namespace(c)
    create(c, kueue_object("ResourceFlavor", "default", {}))
    quota = [
        {"name": "cpu", "nominalQuota": "64"},
        {"name": "memory", "nominalQuota": "256Gi"},
    ]
    create(
        c,
        kueue_object(
            "ClusterQueue",
            "cq",
            {
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu", "memory"],
                        "flavors": [{"name": "default", "resources": quota}],
                    }
                ],
            },
        ),
    )
    op = OperatorProcess(c, namespace, tmp_path / "op.log").start()
    try:
        with Kubelet(c, namespace) as kubelet:
            apply(c, namespace, queued_job())
            # No LocalQueue yet: Kueue holds every pod at its gate, unscheduled.
            gated = wait_for(
                lambda: (p := live_pods(c, namespace)) and len(p) >= 4 and p,
                120,
                "the group's pods",
            )
            for pod in gated.values():
                assert pod["metadata"]["labels"][KUEUE_MANAGED_LABEL] == "true"
                gates = [g["name"] for g in pod["spec"].get("schedulingGates") or []]
                assert KUEUE_ADMISSION_GATE in gates and not pod["spec"].get("nodeName")
            (workload,) = wait_for(lambda: workloads(c, namespace), 120, "the group's Workload")
            assert not condition(workload, "Admitted")
            create(c, kueue_object("LocalQueue", QUEUE, {"clusterQueue": "cq"}, namespace))
            wait_for(
                lambda: any(condition(w, "Admitted") for w in workloads(c, namespace)),
                120,
                "Kueue's admission",
            )
            wait_for(lambda: phase(c, namespace) == "Running", 120, "Running")
            kubelet.terminate("ctr-chief-0", 0)
            for i in range(2):
                kubelet.terminate(f"ctr-worker-{i}", 0)
            wait_for(lambda: phase(c, namespace) == "Succeeded", 120, "Succeeded")
            wait_for(
                lambda: all(condition(w, "Finished") for w in workloads(c, namespace)),
                120,
                "the Workload Finished",
            )
    finally:
        op.stop()


def preemptible_queue(cluster: LocalCluster, namespace: str, cpus: int) -> None:
    """A LocalQueue ``team-a`` on a ClusterQueue of ``cpus`` CPUs where a workload of a
    higher WorkloadPriorityClass (``high`` over ``low``) preempts a lower one."""
    create(cluster, kueue_object("ResourceFlavor", "default", {}))
    quota = [{"name": "cpu", "nominalQuota": str(cpus)}, {"name": "memory", "nominalQuota": "64Gi"}]
    spec = {
        "namespaceSelector": {},
        "preemption": {"withinClusterQueue": "LowerPriority"},
        "resourceGroups": [
            {
                "coveredResources": ["cpu", "memory"],
                "flavors": [{"name": "default", "resources": quota}],
            }
        ],
    }
    create(cluster, kueue_object("ClusterQueue", f"preempting-{namespace}", spec))
    create(
        cluster,
        kueue_object("LocalQueue", QUEUE, {"clusterQueue": f"preempting-{namespace}"}, namespace),
    )
    for name, value in (("low", 10), ("high", 1000)):
        meta = {"name": name}
        create(
            cluster,
            {
                "apiVersion": KUEUE_API,
                "kind": "WorkloadPriorityClass",
                "metadata": meta,
                "value": value,
            },
        )


def workload_of(cluster: LocalCluster, namespace: str, job: str) -> dict[str, Any] | None:
    """The job's Workload: Kueue names a pod group's after the group (`<job>-<uid[:8]>`)."""
    uid = get_json(cluster, "etj", job, "-n", namespace)["metadata"]["uid"]
    name = f"{job}-{uid[:8]}"
    return next((w for w in workloads(cluster, namespace) if w["metadata"]["name"] == name), None)


def requeued(w: dict[str, Any] | None) -> bool:
    return w is not None and condition(w, "Requeued") and not condition(w, "QuotaReserved")


def test_a_preempted_job_is_requeued_and_admitted_again(
    kueue_cluster: LocalCluster, tmp_path: Path
):
    """The fast sibling of test_kueue_preemption.py (there with real trainers resuming from
    their checkpoint): the pods are the stand-in kubelet's."""
    c = kueue_cluster
    namespace = create_namespace(c)
    preemptible_queue(c, namespace, cpus=2)  # two workers of one CPU: room for one job

    def submit(name: str, priority: str) -> None:
        doc = queued_job()
        doc["metadata"] = {
            "name": name,
            "labels": {KUEUE_QUEUE_NAME_LABEL: QUEUE, KUEUE_PRIORITY_CLASS_LABEL: priority},
        }
        doc["spec"]["replicas"]["worker"]["resources"] = {"requests": {"cpu": "1"}}
        doc["spec"]["runPolicy"]["backoffLimit"] = 0
        apply(c, namespace, doc)

    def finish(name: str, kubelet: Kubelet) -> None:
        wait_for(lambda: phase(c, namespace, name) == "Running", 120, f"{name} Running")
        for pod in (f"{name}-chief-0", f"{name}-worker-0", f"{name}-worker-1"):
            kubelet.terminate(pod, 0)
        wait_for(lambda: phase(c, namespace, name) == "Succeeded", 120, f"{name} Succeeded")
        wait_for(
            lambda: (w := workload_of(c, namespace, name)) and condition(w, "Finished"),
            120,
            f"{name}'s Workload Finished",
        )

    op = OperatorProcess(c, namespace, tmp_path / "op.log").start()
    try:
        with Kubelet(c, namespace) as kubelet:
            submit("low", "low")
            wait_for(lambda: phase(c, namespace, "low") == "Running", 120, "low Running")
            first = {n: p["metadata"]["uid"] for n, p in live_pods(c, namespace).items()}
            submit("high", "high")
            w = wait_for(
                lambda: (w := workload_of(c, namespace, "low")) and requeued(w) and w,
                120,
                "low's Workload requeued",
            )
            assert not condition(w, "Finished")
            assert (
                next(x for x in w["status"]["conditions"] if x["type"] == "Evicted")["reason"]
                == "Preempted"
            )
            # etj: a disruption (backoffLimit 0 and not Failed), said as Preempted; the
            # pods made again wait at Kueue's gate.
            again = wait_for(
                lambda: (
                    p
                    if len(p := {n: x for n, x in live_pods(c, namespace).items() if n in first})
                    == len(first)
                    and all(x["metadata"]["uid"] != first[n] for n, x in p.items())
                    else None
                ),
                120,
                "low's pods made again",
            )
            for pod in again.values():
                gates = [g["name"] for g in pod["spec"].get("schedulingGates") or []]
                assert KUEUE_ADMISSION_GATE in gates and not pod["spec"].get("nodeName")
            status = job_status(c, namespace, "low")
            assert status["phase"] == "Restarting" and status.get("restarts", 0) == 0
            restarting = next(x for x in status["conditions"] if x["type"] == "Restarting")
            assert restarting["reason"] == "Preempted"
            assert [
                e["reason"]
                for e in events(c, namespace)
                if e["involvedObject"]["name"] == "low" and e["reason"] == "Preempted"
            ] == ["Preempted"]
            finish("high", kubelet)
            # Capacity is back: Kueue admits the low job's group again.
            wait_for(
                lambda: (w := workload_of(c, namespace, "low")) and condition(w, "Admitted"),
                120,
                "low admitted again",
            )
            finish("low", kubelet)
            assert job_status(c, namespace, "low").get("restarts", 0) == 0
            # The same Workload throughout: etj let go of the last old pod only once Kueue
            # named the new ones its owners (else the garbage collector deletes it).
            final = workload_of(c, namespace, "low")
            assert final is not None and final["metadata"]["uid"] == w["metadata"]["uid"]
    finally:
        op.stop()


def test_a_job_deleted_while_running_leaves_no_pod_and_no_quota_behind(
    kueue_cluster: LocalCluster, tmp_path: Path
):
    """Its pods, retriable while it ran, are marked as the job goes: Kueue counts the group
    finished, frees its quota and lets the pods go."""
    c = kueue_cluster
    namespace = create_namespace(c)
    preemptible_queue(c, namespace, cpus=2)
    op = OperatorProcess(c, namespace, tmp_path / "op.log").start()
    try:
        with Kubelet(c, namespace):
            apply(c, namespace, queued_job())
            wait_for(lambda: phase(c, namespace) == "Running", 120, "Running")
            (w,) = workloads(c, namespace)
            c.kubectl("delete", "etj", "ctr", "-n", namespace, "--wait=false")
            wait_for(
                lambda: not live_pods(c, namespace) and not _any_pod(c, namespace),
                120,
                "no pod left",
            )
            wait_for(
                lambda: all(
                    x["metadata"]["uid"] != w["metadata"]["uid"] or condition(x, "Finished")
                    for x in workloads(c, namespace)
                ),
                120,
                "the Workload finished or gone",
            )
    finally:
        op.stop()


def _any_pod(cluster: LocalCluster, namespace: str) -> bool:
    return bool(get_json(cluster, "pods", "-n", namespace)["items"])
