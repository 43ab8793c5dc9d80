"""Checkpoint storage and node loss on the real API server, with the operator and the
stand-in kubelet: a job naming a ReadWriteOnce claim is failed before any pod
(StorageNotShared), one on the emptyDir default is failed naming checkpoint.storage/uri/
volume; checkpoint.storage's claim is made ReadWriteMany and owned by the job (deleted
with it) unless retained; a node tainted unreachable has its replica evicted by the
taint manager (kube-controller-manager) after placement.nodeLossSeconds, and the operator
replaces it at once as a disruption, not a failure."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from etj.api.spec import CHECKPOINT_NOT_SHARED
from etj_testcluster import LocalCluster
from tests.integration.conftest import wait_for
from tests.integration.operator_helpers import (
    KubeletStandIn,
    OperatorProcess,
    events,
    job_status,
    live_pods,
    ps_job,
    ps_job_pods,
)

pytestmark = pytest.mark.integration

LOST = "etj-lost-node"


@pytest.fixture
def kubelet(crds: LocalCluster, namespace: str) -> Iterator[KubeletStandIn]:
    with KubeletStandIn(crds, namespace) as k:
        yield k


def apply(cluster: LocalCluster, namespace: str, doc: dict[str, Any]) -> None:
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(doc))


def failed(cluster: LocalCluster, namespace: str, name: str) -> dict[str, Any] | None:
    st = job_status(cluster, namespace, name)
    return next((c for c in st.get("conditions") or [] if c["type"] == "Failed"), None)


def claim(cluster: LocalCluster, namespace: str, name: str) -> dict[str, Any] | None:
    out = cluster.kubectl("get", "pvc", name, "-n", namespace, "-o", "json", check=False)
    return json.loads(out.stdout) if out.returncode == 0 else None


def test_a_read_write_once_claim_fails_the_job_before_any_pod(
    crds: LocalCluster, namespace: str, operator: OperatorProcess
):
    rwo = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "ckpt"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }
    apply(crds, namespace, rwo)
    volume = {"persistentVolumeClaim": {"claimName": "ckpt"}}
    apply(crds, namespace, ps_job("rwo", checkpoint={"volume": volume}))
    cond = wait_for(lambda: failed(crds, namespace, "rwo"), 120, "the job Failed")
    assert cond["reason"] == "StorageNotShared"
    assert cond["message"].startswith(
        "spec.checkpoint.volume: claim ckpt has accessModes ReadWriteOnce, so this job's 4 pods"
    )
    assert live_pods(crds, namespace) == {}
    assert any(e["reason"] == "StorageNotShared" for e in events(crds, namespace))


def test_a_ps_job_on_the_emptydir_default_is_failed_naming_the_choices(
    crds: LocalCluster, namespace: str, operator: OperatorProcess
):
    doc = ps_job("local")
    del doc["spec"]["checkpoint"]
    apply(crds, namespace, doc)  # the API server stores it: strategy and plan decide
    cond = wait_for(lambda: failed(crds, namespace, "local"), 120, "the job Failed")
    assert cond["reason"] == "InvalidSpec"
    assert cond["message"] == f"spec: {CHECKPOINT_NOT_SHARED}"
    assert live_pods(crds, namespace) == {}


def test_the_checkpoint_claim_is_read_write_many_and_goes_with_the_job_unless_retained(
    crds: LocalCluster, namespace: str, operator: OperatorProcess, kubelet: KubeletStandIn
):
    apply(crds, namespace, ps_job("owned", checkpoint={"storage": {"size": "1Gi"}}))
    apply(crds, namespace, ps_job("kept", checkpoint={"storage": {"size": "1Gi", "retain": True}}))
    owned = wait_for(lambda: claim(crds, namespace, "owned-checkpoints"), 120, "the claim")
    kept = wait_for(lambda: claim(crds, namespace, "kept-checkpoints"), 120, "the kept claim")
    assert owned["spec"]["accessModes"] == ["ReadWriteMany"]
    assert owned["spec"]["resources"]["requests"]["storage"] == "1Gi"
    (ref,) = owned["metadata"]["ownerReferences"]
    assert ref["kind"] == "EmbeddingTrainingJob" and ref["name"] == "owned"
    assert "ownerReferences" not in kept["metadata"]
    assert kept["metadata"]["labels"]["training.etj.dev/retained"] == "true"
    # Every pod mounts it (no provisioner here: they wait for it, unscheduled).
    pods = wait_for(
        lambda: (p := live_pods(crds, namespace)) and len(p) == 8 and p, 120, "the pods"
    )
    for name in ps_job_pods("owned"):
        vols = {v["name"]: v for v in pods[name]["spec"]["volumes"]}
        assert vols["checkpoints"]["persistentVolumeClaim"]["claimName"] == "owned-checkpoints"
    crds.kubectl("delete", "etj", "owned", "kept", "-n", namespace, "--wait=false")
    wait_for(lambda: claim(crds, namespace, "owned-checkpoints") is None, 120, "the claim GC")
    wait_for(lambda: live_pods(crds, namespace) == {}, 120, "every pod gone")
    assert claim(crds, namespace, "kept-checkpoints") is not None


def test_a_job_deleted_and_applied_again_at_once_gets_a_claim_of_its_own(
    crds: LocalCluster, namespace: str, operator: OperatorProcess, kubelet: KubeletStandIn
):
    """`kubectl delete` and `apply` again: the old claim, owned by the deleted job, goes
    with it (garbage collector, pvc-protection); the new job's pods must not be made
    against it (they would wait for a claim that no longer exists, for good)."""
    job = ps_job("again", checkpoint={"storage": {"size": "1Gi"}})
    apply(crds, namespace, job)
    old = wait_for(lambda: claim(crds, namespace, "again-checkpoints"), 120, "the claim")
    wait_for(lambda: len(live_pods(crds, namespace)) == 4 or None, 120, "the pods")
    crds.kubectl("delete", "etj", "again", "-n", namespace, "--wait=false")
    apply(crds, namespace, job)
    uid = json.loads(crds.kubectl("get", "etj", "again", "-n", namespace, "-o", "json").stdout)[
        "metadata"
    ]["uid"]
    assert uid != old["metadata"]["ownerReferences"][0]["uid"]

    def own_claim() -> dict[str, Any] | None:
        c = claim(crds, namespace, "again-checkpoints")
        ok = c and not c["metadata"].get("deletionTimestamp")
        return c if ok and c["metadata"]["ownerReferences"][0]["uid"] == uid else None

    wait_for(own_claim, 120, "a claim owned by the new job")

    def new_pods() -> dict[str, Any] | None:
        pods = live_pods(crds, namespace)
        mine = {n: p for n, p in pods.items() if p["metadata"]["ownerReferences"][0]["uid"] == uid}
        return mine if set(mine) == ps_job_pods("again") else None

    for pod in wait_for(new_pods, 120, "the new job's pods").values():
        vols = {v["name"]: v for v in pod["spec"]["volumes"]}
        assert vols["checkpoints"]["persistentVolumeClaim"]["claimName"] == "again-checkpoints"
    # The claim they mount is the new job's, still there.
    assert own_claim() is not None


def _add_node(cluster: LocalCluster) -> None:
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": LOST, "labels": {"kubernetes.io/hostname": LOST}},
    }
    cluster.kubectl("apply", "-f", "-", input=json.dumps(node))
    resources = {"cpu": "16", "memory": "64Gi", "pods": "110"}
    ready = {
        "type": "Ready",
        "status": "True",
        "reason": "KubeletReady",
        "message": "a stand-in",
        "lastHeartbeatTime": now,
        "lastTransitionTime": now,
    }
    status = {"status": {"conditions": [ready], "capacity": resources, "allocatable": resources}}
    cluster.kubectl(
        "patch", "node", LOST, "--subresource=status", "--type=merge", "-p", json.dumps(status)
    )
    # Admission taints a new node not-ready; no node-lifecycle controller runs here.
    cluster.kubectl("taint", "node", LOST, "node.kubernetes.io/not-ready:NoSchedule-", check=False)


def test_a_replica_on_an_unreachable_node_is_replaced_soon_as_a_disruption(
    crds: LocalCluster, namespace: str, operator: OperatorProcess, kubelet: KubeletStandIn
):
    _add_node(crds)
    try:
        # The pods prefer the node that will be lost (the other one is the cluster's own).
        prefer = {"weight": 100, "preference": {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [LOST]}]}}  # fmt: skip
        doc = ps_job(
            "lost",
            placement={"nodeLossSeconds": 2},
            podTemplate={
                "affinity": {
                    "nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [prefer]}
                }
            },
            runPolicy={"backoffLimit": 0, "restartBackoff": {"initialSeconds": 0}},
        )
        apply(crds, namespace, doc)
        wait_for(
            lambda: job_status(crds, namespace, "lost").get("phase") == "Running", 120, "Running"
        )
        first = live_pods(crds, namespace)
        on_lost = {n for n, p in first.items() if p["spec"]["nodeName"] == LOST}
        assert "lost-ps-0" in on_lost, {n: p["spec"]["nodeName"] for n, p in first.items()}
        # The node stops answering: its kubelet writes nothing more, and it is tainted as
        # the node-lifecycle controller taints an unreachable node (both effects).
        kubelet.lost_node = LOST
        lost_at = datetime.now(UTC)
        for effect in ("NoSchedule", "NoExecute"):
            crds.kubectl("taint", "node", LOST, f"node.kubernetes.io/unreachable:{effect}")
        lost = wait_for(
            lambda: [e for e in events(crds, namespace) if e["reason"] == "NodeLost"],
            120,
            "a NodeLost event",
        )
        assert f"lost with its node {LOST}" in lost[0]["message"]
        assert "without counting against backoffLimit" in lost[0]["message"]

        # Force-deleted (no kubelet will confirm it) and made again on the other node, well
        # before Kubernetes' default 300 s.
        def replaced() -> bool:
            now = live_pods(crds, namespace)
            return now.keys() == first.keys() and all(
                now[n]["metadata"]["uid"] != first[n]["metadata"]["uid"]
                and now[n]["spec"].get("nodeName") not in (None, LOST)
                for n in on_lost
            )

        wait_for(replaced, 120, "the lost replicas made again on another node")
        assert (datetime.now(UTC) - lost_at).total_seconds() < 90
        wait_for(
            lambda: job_status(crds, namespace, "lost").get("phase") == "Running",
            120,
            "Running again",
        )
        st = job_status(crds, namespace, "lost")
        # backoffLimit 0, yet running: a node loss is not the job's failure.
        assert st.get("restarts", 0) == 0
    finally:
        crds.kubectl("delete", "node", LOST, "--wait=false", check=False)
