"""End to end without Docker: `kubectl apply` a job -> the operator creates pods -> the
process-backed node runs real TensorFlow trainers -> a replica is killed -> the operator
applies the strategy's restart rule -> training resumes -> the job Succeeds."""

from __future__ import annotations

import copy
import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from etj_testcluster import LocalCluster
from tests.integration.conftest import wait_for
from tests.integration.operator_helpers import (
    OperatorProcess,
    events,
    job_status,
    live_pods,
    pods,
)

pytestmark = [pytest.mark.integration, pytest.mark.trainer, pytest.mark.slow]

JOB: dict[str, Any] = {
    "apiVersion": "training.etj.dev/v1alpha1",
    "kind": "EmbeddingTrainingJob",
    "metadata": {"name": "e2e"},
    "spec": {
        "strategy": "ParameterServer",
        "replicas": {"worker": {"replicas": 2}, "ps": {"replicas": 2}},
        "model": {
            "embeddings": [
                {"name": "user_id", "vocabularySize": 50000, "dimension": 8},
                {"name": "item_id", "vocabularySize": 5000, "dimension": 8, "idsPerExample": 2},
            ],
            "denseFeatures": 4,
            "hiddenUnits": [16],
        },
        "training": {
            "batchSizePerReplica": 256,
            "steps": 4000,
            "stepsPerExecution": 20,
            "optimizer": "adagrad",
        },
        "sharding": {"maxShardBytes": "1Mi"},
        "runPolicy": {"backoffLimit": 4},
    },
}


def submit(cluster: LocalCluster, namespace: str, shared: Path, **spec: Any) -> None:
    doc = copy.deepcopy(JOB)
    # On the process node every pod is a process of this host: an absolute path is one
    # directory for all of them (on a cluster: checkpoint.storage, or a RWX volume).
    doc["spec"]["checkpoint"] = {
        "uri": str(shared / "ckpt"),
        "everySteps": 400,
        "keep": 3,
    }
    for key, value in spec.items():
        doc["spec"][key] = value
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(doc))


def step(cluster: LocalCluster, namespace: str) -> int:
    return int((job_status(cluster, namespace, "e2e").get("progress") or {}).get("step") or 0)


def wait_checkpoint(cluster: LocalCluster, namespace: str, at_least: int, timeout: float) -> None:
    """Until the job's status shows a checkpoint at ``at_least`` or later."""

    def last() -> int:
        progress = job_status(cluster, namespace, "e2e").get("progress") or {}
        return int(progress.get("lastCheckpointStep") or 0)

    wait_for(lambda: last() >= at_least, timeout, f"a checkpoint at {at_least}+", every=1)


def wait_succeeded(cluster: LocalCluster, namespace: str) -> dict[str, Any]:
    """Until the job Succeeded; its status."""
    wait_for(
        lambda: job_status(cluster, namespace, "e2e").get("phase") == "Succeeded",
        400,
        "Succeeded",
        every=1,
    )
    return job_status(cluster, namespace, "e2e")


def kill_replica(cluster: LocalCluster, namespace: str, name: str) -> str:
    pod = pods(cluster, namespace)[name]
    os.kill(int(pod["metadata"]["annotations"]["training.etj.dev/local-pid"]), signal.SIGKILL)
    return str(pod["metadata"]["uid"])


@pytest.mark.extended  # make test-all (minutes; see the extended marker)
def test_ps_job_survives_a_killed_worker(
    crds: LocalCluster, namespace: str, node: Path, operator: OperatorProcess, shared_dir: Path
):
    submit(crds, namespace, shared_dir)
    wait_for(lambda: step(crds, namespace) >= 800, 240, "training to pass step 800", every=1)
    old = kill_replica(crds, namespace, "e2e-worker-1")
    wait_for(
        lambda: (
            (p := live_pods(crds, namespace).get("e2e-worker-1")) and p["metadata"]["uid"] != old
        ),
        120,
        "worker-1 replaced",
    )
    st = wait_succeeded(crds, namespace)
    assert st["progress"]["step"] == 4000
    assert st["replicaStatuses"]["worker"]["restarts"] == 1 and st["restarts"] == 1
    assert st["progress"]["loss"] < 0.69  # below the loss of a coin flip: it learned
    wait_for(lambda: not any("-ps-" in n for n in live_pods(crds, namespace)), 120, "ps stopped")


@pytest.mark.extended  # make test-all; CI kills the chief on the node in test_custom_tower_node (restore checked) and a ps on the kind cluster in tests/e2e
def test_ps_chief_kill_resumes_from_the_last_checkpoint(
    crds: LocalCluster, namespace: str, node: Path, operator: OperatorProcess, shared_dir: Path
):
    submit(crds, namespace, shared_dir)
    wait_checkpoint(crds, namespace, 800, timeout=240)
    before = job_status(crds, namespace, "e2e")["progress"]
    kill_replica(crds, namespace, "e2e-chief-0")
    wait_for(lambda: job_status(crds, namespace, "e2e").get("restarts", 0) >= 1, 120, "the restart")
    log = node / "logs" / namespace / "e2e-chief-0.log"

    def restored_step() -> int | None:
        # The trainer logs {"event": "restored", "step": N} when it resumes a checkpoint.
        events = [json.loads(x) for x in log.read_text().splitlines() if x.startswith("{")]
        steps = [e["step"] for e in events if e.get("event") == "restored"]
        return steps[-1] if steps else None

    restored = wait_for(restored_step, 240, "the new chief to restore", every=1)
    assert restored >= before["lastCheckpointStep"]
    # Steps lost: at most the checkpoint interval plus one window of scheduled functions.
    assert before["step"] - restored <= 400 + 20 * 8
    wait_succeeded(crds, namespace)


@pytest.mark.extended  # make test-all (minutes; see the extended marker)
def test_ps_hung_worker_restarts_the_whole_job_which_then_finishes(
    crds: LocalCluster, namespace: str, node: Path, operator: OperatorProcess, shared_dir: Path
):
    """A worker stops answering (SIGSTOP: no error, no exit). The chief's watchdog stops it
    and says why in its termination message; the node puts that in the pod's status, the
    operator restarts every replica, and the job finishes: one restart, nothing lost."""
    submit(crds, namespace, shared_dir, runPolicy={"backoffLimit": 4, "watchdogSeconds": 30})
    wait_checkpoint(crds, namespace, 400, timeout=240)
    before = {n: p["metadata"]["uid"] for n, p in live_pods(crds, namespace).items()}
    pod = pods(crds, namespace)["e2e-worker-0"]
    os.kill(int(pod["metadata"]["annotations"]["training.etj.dev/local-pid"]), signal.SIGSTOP)

    def all_new() -> bool:
        now = live_pods(crds, namespace)
        return set(now) == set(before) and all(
            now[n]["metadata"]["uid"] != before[n] for n in before
        )

    wait_for(all_new, 180, "every replica recreated", every=1)
    restarting = [e for e in events(crds, namespace) if e["reason"] == "Restarting"]
    assert len(restarting) == 1, restarting
    why = "e2e-chief-0 failed with exit code 138 (Error, WatchdogTimeout)"
    assert why in restarting[0]["message"]
    st = wait_succeeded(crds, namespace)
    assert st["restarts"] == 1 and st["progress"]["step"] == 4000


@pytest.mark.extended  # make test-all (minutes; see the extended marker)
def test_mirrored_job_restarts_all_workers_and_resumes(
    crds: LocalCluster, namespace: str, node: Path, operator: OperatorProcess, shared_dir: Path
):
    replicas = {"worker": {"replicas": 2}}
    submit(
        crds,
        namespace,
        shared_dir,
        strategy="MultiWorkerMirrored",
        replicas=replicas,
        training={
            "batchSizePerReplica": 256,
            "steps": 2400,
            "stepsPerExecution": 20,
            "optimizer": "sgd",
            "learningRate": 0.1,
        },
    )
    wait_checkpoint(crds, namespace, 400, timeout=300)
    checkpoint = job_status(crds, namespace, "e2e")["progress"]["lastCheckpointStep"]
    uids = {n: p["metadata"]["uid"] for n, p in pods(crds, namespace).items()}
    kill_replica(crds, namespace, "e2e-worker-1")

    def all_replaced() -> bool:
        now = live_pods(crds, namespace)
        return set(now) == set(uids) and all(now[n]["metadata"]["uid"] != uids[n] for n in uids)

    wait_for(all_replaced, 120, "both workers recreated")
    st = wait_succeeded(crds, namespace)
    assert st["replicaStatuses"]["worker"]["restarts"] == 2 and st["restarts"] == 1
    assert st["progress"]["step"] == 2400 and checkpoint >= 400
    # Worker 0 (the chief) came back from a checkpoint at or after the one seen before the
    # kill, and the loss after the restart is below the first one reported.
    log = (node / "logs" / namespace / "e2e-worker-0.log").read_text().splitlines()
    events = [json.loads(x) for x in log if x.startswith("{")]
    restored = [e["step"] for e in events if e.get("event") == "restored"]
    assert restored and restored[-1] >= checkpoint
    losses = [
        e["loss"] for e in events if e.get("event") == "progress" and e.get("loss") is not None
    ]
    assert losses[-1] < losses[0]
