"""Faults of the control plane, on the real API server: the operator (a separate process)
recovers by itself.

- kube-apiserver down for 30 s in the middle of a burst of jobs, then back on the same port
  with the same etcd: every job ends with exactly its pods, and a replica that failed just
  before the outage is restarted once (counted once).
- A watch that expires: the operator is frozen (SIGSTOP, as behind a partition) while a pod
  fails, etcd is compacted past every resourceVersion it saw and the API server restarts
  (its watch cache starts afresh), so kopf's resumed watch gets 410 Gone. The operator
  relists and restarts the failed replica — with resync and progress polling off, so only
  the watch can have told it.
- etcd alone down and back: the API server serves the same data again.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from etj_testcluster import LocalCluster
from tests.integration.conftest import wait_for
from tests.integration.operator_helpers import (
    KubeletStandIn,
    OperatorProcess,
    job_status,
    live_pods,
    pods,
    ps_job,
    ps_job_pods,
)

pytestmark = [pytest.mark.integration, pytest.mark.extended]

APISERVER = "kube-apiserver"
OUTAGE_SECONDS = 30.0
BURST = 6


def apply(cluster: LocalCluster, namespace: str, *docs: dict[str, Any]) -> None:
    body = {"apiVersion": "v1", "kind": "List", "items": list(docs)}
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(body))


def restarts(cluster: LocalCluster, namespace: str, name: str) -> int | None:
    status = job_status(cluster, namespace, name)
    return status.get("restarts") if status else None


def pods_created(op: OperatorProcess) -> float:
    match = re.search(r"^etj_pods_created_total ([0-9.e+]+)$", op.metrics(), re.M)
    return float(match.group(1)) if match else 0.0


@pytest.fixture
def kubelet(crds: LocalCluster, namespace: str) -> Iterator[KubeletStandIn]:
    with KubeletStandIn(crds, namespace) as k:
        yield k


@pytest.fixture
def api_server_back(crds: LocalCluster) -> Iterator[LocalCluster]:
    """Whatever the test does, the session's API server runs again afterwards, and the
    controllers behind it work again (their watches back off up to 30 s while it is
    down): a new namespace gets its default ServiceAccount, as the next test needs."""
    try:
        yield crds
    finally:
        for component in ("etcd", APISERVER):
            if component not in crds.procs:
                crds.start_component(component)
        probe = f"probe-{uuid.uuid4().hex[:8]}"
        crds.kubectl("create", "namespace", probe)
        wait_for(
            lambda: crds.kubectl("get", "sa", "default", "-n", probe, check=False).returncode == 0,
            180,
            "the controller-manager serving again",
        )
        crds.kubectl("delete", "namespace", probe, "--wait=false", check=False)


def test_api_server_down_30s_mid_burst_every_job_ends_with_exactly_its_pods(
    api_server_back: LocalCluster, namespace: str, kubelet: KubeletStandIn, tmp_path: Path
):
    cluster = api_server_back
    op = OperatorProcess(cluster, namespace, tmp_path / "operator.log").start()
    try:
        names = [f"b{i}" for i in range(BURST)]
        apply(cluster, namespace, ps_job(names[0], runPolicy={"backoffLimit": 5}))
        wait_for(
            lambda: job_status(cluster, namespace, names[0]).get("phase") == "Running",
            120,
            "the first job Running",
        )
        # The rest of the burst, a replica failing, and the API server gone: the operator
        # is in the middle of creating pods and of handling the failure.
        apply(cluster, namespace, *(ps_job(n) for n in names[1:]))
        failed = f"{names[0]}-worker-1"
        failed_uid = pods(cluster, namespace)[failed]["metadata"]["uid"]
        kubelet.terminate(failed, 1)
        cluster.stop_component(APISERVER)
        outage_end = time.monotonic() + OUTAGE_SECONDS
        while time.monotonic() < outage_end:  # the outage itself, not a wait for a condition
            assert op.proc is not None and op.proc.poll() is None, op.tail()
            time.sleep(1)
        cluster.start_component(APISERVER)

        want = set().union(*(ps_job_pods(n) for n in names))
        wait_for(
            lambda: (
                set(live := live_pods(cluster, namespace)) == want
                and live[failed]["metadata"]["uid"] != failed_uid
            ),
            120,
            "every job's pods, the failed one replaced",
        )
        wait_for(
            lambda: all(job_status(cluster, namespace, n).get("phase") == "Running" for n in names),
            120,
            "every job Running",
        )
        wait_for(lambda: restarts(cluster, namespace, names[0]) == 1, 120, "one restart of b0")
        # Settled: further passes (resync every 5 s) create, delete and count nothing more.
        uids = {n: p["metadata"]["uid"] for n, p in live_pods(cluster, namespace).items()}
        baseline = _reconciles(op)
        wait_for(lambda: _reconciles(op) >= baseline + 2 * BURST, 120, "two more passes a job")
        assert {n: p["metadata"]["uid"] for n, p in live_pods(cluster, namespace).items()} == uids
        assert {n: restarts(cluster, namespace, n) for n in names} == {
            n: (1 if n == names[0] else 0) for n in names
        }
        # At most one creation per replica plus the replacement (a create whose answer the
        # outage swallowed is not counted; its retry finds the pod there).
        assert pods_created(op) <= len(want) + 1
        assert all(
            len(p["metadata"]["ownerReferences"]) == 1 for p in pods(cluster, namespace).values()
        )
    finally:
        op.stop()


def _reconciles(op: OperatorProcess) -> float:
    """Total reconcile passes (ok and error) the operator has made."""
    pattern = r'^etj_reconciles_total\{result="\w+"\} ([0-9.e+]+)$'
    return sum(float(v) for v in re.findall(pattern, op.metrics(), re.M))


def test_expired_watch_is_resumed_without_missing_a_pod_failure(
    api_server_back: LocalCluster, namespace: str, kubelet: KubeletStandIn, tmp_path: Path
):
    cluster = api_server_back
    # No periodic passes: only a watch event can tell the operator a pod failed.
    quiet = ("--resync-seconds", "3600", "--progress-seconds", "3600", "--verbose")
    op = OperatorProcess(cluster, namespace, tmp_path / "operator.log", extra=quiet).start()
    try:
        apply(cluster, namespace, ps_job("w"))
        wait_for(lambda: set(live_pods(cluster, namespace)) == ps_job_pods("w"), 120, "pods")
        wait_for(
            lambda: job_status(cluster, namespace, "w").get("phase") == "Running", 120, "Running"
        )
        before = pods(cluster, namespace)["w-worker-1"]["metadata"]["uid"]
        assert op.proc is not None
        os.killpg(op.proc.pid, signal.SIGSTOP)
        try:
            kubelet.terminate("w-worker-1", 1)
            cluster.stop_component(APISERVER)
            compacted = cluster.compact_etcd()
            cluster.start_component(APISERVER)
        finally:
            os.killpg(op.proc.pid, signal.SIGCONT)
        wait_for(
            lambda: (
                (p := live_pods(cluster, namespace).get("w-worker-1"))
                and p["metadata"]["uid"] != before
            ),
            120,
            "worker 1 replaced",
        )
        wait_for(lambda: restarts(cluster, namespace, "w") == 1, 120, "one restart counted")
        assert set(live_pods(cluster, namespace)) == ps_job_pods("w")
        # The resumed pod watch really expired (the operator's own pod watch logs it).
        log = op.log.read_text(errors="replace")
        assert "Restarting the watch-stream for pods" in log, op.tail(80)
        assert compacted > 0
    finally:
        op.stop()


def _ready(cluster: LocalCluster) -> bool:
    return cluster.kubectl("get", "--raw", "/readyz", check=False, timeout=120).returncode == 0


def test_etcd_down_and_back_keeps_the_data(api_server_back: LocalCluster, namespace: str):
    cluster = api_server_back
    cluster.kubectl("create", "configmap", "kept", "-n", namespace, "--from-literal=k=v")
    cluster.stop_component("etcd")
    wait_for(lambda: not _ready(cluster), 120, "the API server not ready without etcd")
    cluster.start_component("etcd")
    # The API server reconnects to etcd by itself; the data is the same.
    wait_for(lambda: _ready(cluster), 120, "the API server ready again")
    got = json.loads(
        cluster.kubectl("get", "configmap", "kept", "-n", namespace, "-o", "json").stdout
    )
    assert got["data"] == {"k": "v"}
