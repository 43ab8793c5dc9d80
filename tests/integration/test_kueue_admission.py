"""A real Kueue (etj_testcluster.kueue, built by `make kueue`) admits an etj job as one
plain-Pod group on the local control plane: the pods wait gated while their LocalQueue is
missing, start once it exists, and when the job succeeds (its ps stopped by etj) Kueue
counts the group's Workload finished.

Skipped with the reason when Kueue is not built (it is not part of `make binaries`)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from etj.api.constants import KUEUE_ADMISSION_GATE, KUEUE_MANAGED_LABEL
from etj_testcluster import LocalCluster
from etj_testcluster.kueue import KUEUE_API, LocalKueue, missing

from .conftest import apply_crds, create_namespace, get_json, require_binaries, wait_for
from .operator_helpers import KubeletStandIn, OperatorProcess, live_pods
from .test_kueue_labels import QUEUE, queued_job
from .test_operator import apply, phase

pytestmark = pytest.mark.integration


class Kubelet(KubeletStandIn):
    """Writes a deleted pod's end (143: SIGTERM) before confirming the deletion, as a
    kubelet does: Kueue counts a group finished by its pods' phases, and Kueue's finalizer
    keeps a deleted pod until then."""

    def _confirm_deletion(self, name: str) -> None:
        pod = self.core.read_namespaced_pod(name, self.namespace)
        if pod.status.phase not in ("Succeeded", "Failed"):
            self.terminate(name, 143)
        super()._confirm_deletion(name)


@pytest.fixture(scope="module")
def kueue_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A cluster of its own: Kueue's pod webhook fails closed for every pod it sees."""
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
                60,
                "the group's pods",
            )
            for pod in gated.values():
                assert pod["metadata"]["labels"][KUEUE_MANAGED_LABEL] == "true"
                gates = [g["name"] for g in pod["spec"].get("schedulingGates") or []]
                assert KUEUE_ADMISSION_GATE in gates and not pod["spec"].get("nodeName")
            (workload,) = wait_for(lambda: workloads(c, namespace), 30, "the group's Workload")
            assert not condition(workload, "Admitted")
            create(c, kueue_object("LocalQueue", QUEUE, {"clusterQueue": "cq"}, namespace))
            wait_for(
                lambda: any(condition(w, "Admitted") for w in workloads(c, namespace)),
                60,
                "Kueue's admission",
            )
            wait_for(lambda: phase(c, namespace) == "Running", 60, "Running")
            kubelet.terminate("ctr-chief-0", 0)
            for i in range(2):
                kubelet.terminate(f"ctr-worker-{i}", 0)
            wait_for(lambda: phase(c, namespace) == "Succeeded", 30, "Succeeded")
            wait_for(
                lambda: all(condition(w, "Finished") for w in workloads(c, namespace)),
                60,
                "the Workload Finished",
            )
    finally:
        op.stop()
