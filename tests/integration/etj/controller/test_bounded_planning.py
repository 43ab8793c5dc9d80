"""One bad job never stalls the operator (issue 16), on the real API server.

A schema-valid job with a 2^40 x 8192 table is Failed with a PlanTooLarge reason at once;
an ordinary job applied right after it gets all its pods at once; the operator's memory
stays small. Also: ``etj operator --kubeconfig PATH`` with no KUBECONFIG runs a job's
lifecycle. The time bounds here are generous (the measured times are in the issue's
closing note); what they guard against is the minutes-long stall the issue reported.
"""

from __future__ import annotations

import copy
import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from etj_testcluster import LocalCluster
from tests.integration.conftest import wait_for
from tests.integration.operator_helpers import (
    ETJ,
    KubeletStandIn,
    OperatorProcess,
    job_status,
    live_pods,
    ps_job,
    ps_job_pods,
)

pytestmark = pytest.mark.integration

HUGE: dict[str, Any] = {
    "apiVersion": "training.etj.dev/v1alpha1",
    "kind": "EmbeddingTrainingJob",
    "metadata": {"name": "huge"},
    "spec": {
        "model": {"embeddings": [{"name": "big", "vocabularySize": 2**40, "dimension": 8192}]},
    },
}
# chief + 3 workers + 2 ps: the 6-pod job.
ORDINARY = ps_job("ordinary", workers=3, ps=2)
ORDINARY_PODS = ps_job_pods("ordinary", workers=3, ps=2)
# What the acceptance asks; the test allows more (the machine is shared), the note says more.
FAILED_WITHIN = 5.0
PODS_WITHIN = 5.0
RSS_LIMIT = 300 << 20


def apply(cluster: LocalCluster, namespace: str, doc: dict[str, Any]) -> None:
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(doc))


@pytest.fixture
def kubelet(crds: LocalCluster, namespace: str) -> Iterator[KubeletStandIn]:
    with KubeletStandIn(crds, namespace) as k:
        yield k


def test_huge_job_fails_at_once_and_does_not_delay_an_ordinary_one(
    crds: LocalCluster, namespace: str, kubelet: KubeletStandIn, tmp_path: Path
):
    op = OperatorProcess(crds, namespace, tmp_path / "operator.log").start()
    try:
        applied = time.monotonic()
        apply(crds, namespace, HUGE)
        apply(crds, namespace, ORDINARY)
        ordinary_applied = time.monotonic()
        status = wait_for(
            lambda: (s := job_status(crds, namespace, "huge")).get("phase") == "Failed" and s,
            4 * FAILED_WITHIN,
            "the huge job Failed",
            every=0.05,
        )
        failed_after = time.monotonic() - applied
        wait_for(
            lambda: set(live_pods(crds, namespace)) == ORDINARY_PODS,
            4 * PODS_WITHIN,
            "the ordinary job's six pods",
            every=0.05,
        )
        pods_after = time.monotonic() - ordinary_applied
        assert "PlanTooLarge" in status["message"]
        assert "spec.model.embeddings[0]" in status["message"]
        assert "maxShardBytes" in status["message"]
        failed = next(c for c in status["conditions"] if c["type"] == "Failed")
        assert failed["status"] == "True" and failed["reason"] == "InvalidSpec"
        # Nothing was created for the huge job; the ordinary one runs.
        assert not any(name.startswith("huge-") for name in live_pods(crds, namespace))
        wait_for(
            lambda: job_status(crds, namespace, "ordinary").get("phase") == "Running",
            120,
            "the ordinary job Running",
        )
        peak = op.memory_bytes("VmHWM")
        print(
            f"huge job Failed after {failed_after:.2f}s; ordinary pods after {pods_after:.2f}s; "
            f"operator peak RSS {peak / 2**20:.0f} MiB"
        )
        assert peak < RSS_LIMIT, f"operator peak RSS {peak / 2**20:.0f} MiB"
    finally:
        op.stop()


def test_validate_answers_on_the_huge_job_at_once(tmp_path: Path):
    path = tmp_path / "huge.yaml"
    path.write_text(json.dumps(HUGE))
    started = time.monotonic()
    proc = subprocess.run([ETJ, "validate", str(path)], capture_output=True, text=True, timeout=120)
    took = time.monotonic() - started
    print(f"etj validate on the 2^40 x 8192 job: {took:.2f}s")
    assert proc.returncode == 2
    assert "spec.model.embeddings[0]: PlanTooLarge:" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_operator_with_kubeconfig_flag_and_no_kubeconfig_variable_runs_a_job(
    crds: LocalCluster, namespace: str, kubelet: KubeletStandIn, tmp_path: Path
):
    op = OperatorProcess(crds, namespace, tmp_path / "operator.log", kubeconfig_flag=True)
    op.start()
    try:
        doc = copy.deepcopy(ORDINARY)
        apply(crds, namespace, doc)
        wait_for(lambda: set(live_pods(crds, namespace)) == ORDINARY_PODS, 120, "the six pods")
        wait_for(
            lambda: job_status(crds, namespace, "ordinary").get("phase") == "Running",
            120,
            "phase Running",
        )
        kubelet.terminate("ordinary-chief-0", 0, reason="Completed")
        wait_for(
            lambda: job_status(crds, namespace, "ordinary").get("phase") == "Succeeded",
            120,
            "phase Succeeded",
        )
        # cleanPodPolicy Running: the ps (which never exit) are stopped.
        wait_for(
            lambda: not any("-ps-" in n for n in live_pods(crds, namespace)),
            120,
            "the ps stopped",
        )
        assert "Ran out of valid credentials" not in op.tail(200)
    finally:
        op.stop()
