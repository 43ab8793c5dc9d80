"""A Kueue preemption does not end an etj job: on the local control plane with a real Kueue
(etj_testcluster.kueue, built by `make kueue`) and the process-backed node running real
trainers, a ClusterQueue with room for one job runs a low-priority job to a checkpoint; a
high-priority job preempts it. The low job is not Failed: Kueue requeues its Workload,
etj says "Preempted" and recreates its pods, which Kueue holds at its gate while the high
job runs to Succeeded; then Kueue admits the low job again and it resumes from a
checkpoint at or after the last one it wrote before, to Succeeded. Both Workloads end
Finished (their quota freed).

Skipped with the reason when Kueue is not built (it is not part of `make binaries`)."""

from __future__ import annotations

import copy
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from etj.api.constants import KUEUE_PRIORITY_CLASS_LABEL, KUEUE_QUEUE_NAME_LABEL
from etj_testcluster import LocalCluster
from tests.integration.conftest import create_namespace, wait_for
from tests.integration.etj.controller.test_kueue_labels import QUEUE
from tests.integration.etj_testcluster.test_kueue_admission import (
    condition,
    preemptible_queue,
    requeued,
    running_kueue,
    workload_of,
)
from tests.integration.operator_helpers import (
    OperatorProcess,
    events,
    job_status,
    live_pods,
    process_node,
)

pytestmark = [pytest.mark.integration, pytest.mark.trainer, pytest.mark.slow]

# The trainer runs some 50-150 steps a second here, and the low job is preempted some
# 40 s after its first checkpoint: long enough to be preempted mid-way; the high one short.
LOW_STEPS, HIGH_STEPS, EVERY = 12000, 1000, 500
# Each job: two workers of one CPU each; the ClusterQueue has two CPUs: room for one job.
JOB: dict[str, Any] = {
    "apiVersion": "training.etj.dev/v1alpha1",
    "kind": "EmbeddingTrainingJob",
    "metadata": {"name": "low"},
    "spec": {
        "strategy": "MultiWorkerMirrored",
        "replicas": {
            "worker": {
                "replicas": 2,
                "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
            }
        },
        "model": {
            "embeddings": [{"name": "user_id", "vocabularySize": 5000, "dimension": 8}],
            "denseFeatures": 4,
            "hiddenUnits": [16],
        },
        "training": {
            "batchSizePerReplica": 128,
            "steps": 1600,
            "stepsPerExecution": 20,
            "optimizer": "sgd",
            "learningRate": 0.1,
        },
        "runPolicy": {"backoffLimit": 0},
    },
}


def submit(
    cluster: LocalCluster, namespace: str, shared: Path, name: str, priority: str, steps: int
) -> None:
    doc = copy.deepcopy(JOB)
    doc["metadata"] = {
        "name": name,
        "labels": {KUEUE_QUEUE_NAME_LABEL: QUEUE, KUEUE_PRIORITY_CLASS_LABEL: priority},
    }
    doc["spec"]["training"]["steps"] = steps
    # On the process node every pod is a process of this host: one directory for all.
    doc["spec"]["checkpoint"] = {"uri": str(shared / "ckpt"), "everySteps": EVERY, "keep": 5}
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(doc))


def trainer_events(node: Path, namespace: str, pod: str, kind: str) -> list[dict[str, Any]]:
    log = node / "logs" / namespace / f"{pod}.log"
    if not log.exists():
        return []
    docs = [json.loads(x) for x in log.read_text().splitlines() if x.startswith("{")]
    return [d for d in docs if d.get("event") == kind]


def checkpointed(shared: Path, namespace: str, job: str) -> int:
    """The newest checkpoint's step, from the CheckpointManager's index file."""
    index = shared / "ckpt" / namespace / job / "checkpoint"
    text = index.read_text() if index.exists() else ""
    match = re.search(r'^model_checkpoint_path: ".*-(\d+)"', text, re.M)
    return int(match.group(1)) if match else 0


@pytest.fixture(scope="module")
def kueue_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A cluster of its own: Kueue's pod webhook fails closed for every pod it sees."""
    with running_kueue(tmp_path_factory) as c:
        yield c


@pytest.mark.extended  # make test-all (minutes); its fast sibling is in test_kueue_admission.py
def test_a_preempted_job_is_requeued_and_resumes_from_its_checkpoint(
    kueue_cluster: LocalCluster, tmp_path: Path, shared_dir: Path
):
    c = kueue_cluster
    namespace = create_namespace(c)
    preemptible_queue(c, namespace, cpus=2)  # two workers of one CPU: room for one job
    started = time.monotonic()
    phases: dict[str, float] = {}
    with process_node(c, tmp_path / "node", [namespace], tmp_path / "node.log") as node:
        op = OperatorProcess(c, namespace, tmp_path / "op.log").start()
        try:
            submit(c, namespace, shared_dir, "low", "low", steps=LOW_STEPS)
            wait_for(
                lambda: checkpointed(shared_dir, namespace, "low") >= EVERY,
                300,
                "low's checkpoint",
                every=1,
            )
            phases["low checkpointed"] = time.monotonic() - started
            low_uids = {n: p["metadata"]["uid"] for n, p in live_pods(c, namespace).items()}
            submit(c, namespace, shared_dir, "high", "high", steps=HIGH_STEPS)

            # Kueue preempts the low job and requeues its Workload; etj says so and
            # recreates its pods, which wait at Kueue's gate.
            w = wait_for(
                lambda: (w := workload_of(c, namespace, "low")) and requeued(w) and w,
                120,
                "low's Workload requeued",
            )
            before = checkpointed(shared_dir, namespace, "low")
            phases["low requeued"] = time.monotonic() - started
            assert not condition(w, "Finished")
            evicted = next(x for x in w["status"]["conditions"] if x["type"] == "Evicted")
            assert evicted["reason"] == "Preempted"
            wait_for(
                lambda: any(
                    e.get("reason") == "Preempted" and e["involvedObject"]["name"] == "low"
                    for e in events(c, namespace)
                ),
                120,
                "the Preempted Event",
            )
            gated = wait_for(
                lambda: (
                    p
                    if len(
                        p := {
                            n: x for n, x in live_pods(c, namespace).items() if n.startswith("low-")
                        }
                    )
                    == 2
                    and all(p[n]["metadata"]["uid"] != low_uids.get(n) for n in p)
                    else None
                ),
                120,
                "low's pods recreated",
            )
            for pod in gated.values():
                assert not pod["spec"].get("nodeName")  # held at Kueue's gate
            status = job_status(c, namespace, "low")
            assert status["phase"] not in ("Failed", "Succeeded")
            assert status.get("restarts", 0) == 0  # a disruption: not counted (backoffLimit 0)
            assert any(
                x["type"] == "Restarting" and x["reason"] == "Preempted"
                for x in status["conditions"]
            )

            # The high job runs and finishes; its Workload is Finished, freeing the quota.
            wait_for(
                lambda: job_status(c, namespace, "high").get("phase") == "Succeeded",
                300,
                "high Succeeded",
                every=1,
            )
            phases["high succeeded"] = time.monotonic() - started
            wait_for(
                lambda: (w := workload_of(c, namespace, "high")) and condition(w, "Finished"),
                120,
                "high's Workload Finished",
            )
            # Kueue admits the low job again; it resumes from its checkpoint and finishes.
            wait_for(
                lambda: (w := workload_of(c, namespace, "low")) and condition(w, "Admitted"),
                120,
                "low re-admitted",
            )
            wait_for(
                lambda: job_status(c, namespace, "low").get("phase") in ("Succeeded", "Failed"),
                400,
                "low finished",
                every=1,
            )
            phases["low succeeded"] = time.monotonic() - started
            status = job_status(c, namespace, "low")
            assert status["phase"] == "Succeeded", status.get("message")
            assert status["progress"]["step"] == LOW_STEPS and status.get("restarts", 0) == 0
            restored = trainer_events(node, namespace, "low-worker-0", "restored")
            assert restored, "the low job did not restore a checkpoint"
            assert restored[0]["step"] >= before >= EVERY
            # ... and it was preempted mid-way: the restore is well before the end.
            assert restored[0]["step"] < LOW_STEPS
            wait_for(
                lambda: (w := workload_of(c, namespace, "low")) and condition(w, "Finished"),
                120,
                "low's Workload Finished",
            )
            print("kueue preemption phases (s):", {k: round(v) for k, v in phases.items()})
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n--- operator ---\n{op.tail(40)}") from exc
        finally:
            op.stop()
