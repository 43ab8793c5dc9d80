"""Elastic workers on the local control plane's real API server, with the process-backed
node running real trainers: ``kubectl scale etj/NAME --replicas=N`` (the CRD's scale
subresource) on a running job.

ParameterServer, 2 -> 4 -> 1 workers: each time the chief is stopped first and checkpoints
(its ``terminated`` step), the new chief names the new cluster and restores exactly that
step (no step lost: the step after is at least the step the job showed before), training
goes on past it, the job has the spec's worker pods, and neither ``restarts`` nor any
role's restart count moves. The scale subresource reads the count back. One ``Scaled``
Event per change, and the ``Scaling`` condition ends ``Scaled``.

MultiWorkerMirrored (extended): 2 -> 3 workers; the leader checkpoints first, all workers
restart together and resume from that checkpoint.

Both take minutes here (every change restarts a TensorFlow chief): extended. The fast
sibling runs the same changes with a stand-in kubelet (no trainers): which pods go, which
stay, in what order, and what the job says.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from etj_testcluster import LocalCluster
from tests.integration.conftest import wait_for
from tests.integration.operator_helpers import (
    KubeletStandIn,
    OperatorProcess,
    events,
    job_status,
    live_pods,
    pods,
    ps_job,
)

pytestmark = [pytest.mark.integration, pytest.mark.trainer, pytest.mark.slow]

# Never reached: the job trains while the test scales it (the namespace goes with the test).
STEPS = 1_000_000


def job(name: str, strategy: str, workers: int, checkpoints: Path) -> dict[str, Any]:
    replicas: dict[str, Any] = {"worker": {"replicas": workers}}
    if strategy == "ParameterServer":
        replicas["ps"] = {"replicas": 1}
    return {
        "apiVersion": "training.etj.dev/v1alpha1",
        "kind": "EmbeddingTrainingJob",
        "metadata": {"name": name},
        "spec": {
            "strategy": strategy,
            "replicas": replicas,
            "model": {
                "embeddings": [{"name": "user_id", "vocabularySize": 5000, "dimension": 8}],
                "denseFeatures": 4,
                "hiddenUnits": [16],
            },
            "training": {
                "batchSizePerReplica": 128,
                "steps": STEPS,
                "stepsPerExecution": 10,
                "optimizer": "sgd",
                "learningRate": 0.1,
            },
            # On the process node every pod is a process of this host: one directory.
            "checkpoint": {"uri": str(checkpoints), "everySteps": 200, "keep": 3},
            "runPolicy": {"backoffLimit": 0},
        },
    }


def trainer_events(node: Path, namespace: str, pod: str, kind: str) -> list[dict[str, Any]]:
    """The trainer's JSON events of ``kind`` in the pod's log (every incarnation's)."""
    log = node / "logs" / namespace / f"{pod}.log"
    if not log.exists():
        return []
    docs = [json.loads(x) for x in log.read_text().splitlines() if x.startswith('{"')]
    return [d for d in docs if d.get("event") == kind]


def step(cluster: LocalCluster, namespace: str, name: str) -> int:
    return int((job_status(cluster, namespace, name).get("progress") or {}).get("step") or 0)


def workers(cluster: LocalCluster, namespace: str, name: str) -> list[str]:
    return sorted(n for n in live_pods(cluster, namespace) if n.startswith(f"{name}-worker-"))


def scale(cluster: LocalCluster, namespace: str, name: str, replicas: int) -> None:
    cluster.kubectl("scale", f"etj/{name}", "-n", namespace, f"--replicas={replicas}")


def scale_subresource(cluster: LocalCluster, namespace: str, name: str) -> dict[str, Any]:
    out = cluster.kubectl("get", "etj", name, "-n", namespace, "--subresource=scale", "-o", "json")
    return dict(json.loads(out.stdout))


def scaled_events(cluster: LocalCluster, namespace: str, name: str) -> list[dict[str, Any]]:
    return [
        e
        for e in events(cluster, namespace)
        if e["involvedObject"]["name"] == name and e["reason"] == "Scaled"
    ]


def check_scaled(
    cluster: LocalCluster, namespace: str, node: Path, name: str, leader: str, to: int, n: int
) -> dict[str, float]:
    """Scale to ``to`` workers (the ``n``th change); check no step is lost and none counted."""
    started = time.monotonic()
    before = step(cluster, namespace, name)
    restores = len(trainer_events(node, namespace, leader, "restored"))
    scale(cluster, namespace, name, to)
    # The leader checkpoints as it stops, and its successor restores exactly that step.
    restored = wait_for(
        lambda: (r := trainer_events(node, namespace, leader, "restored"))[restores:] and r[-1],
        180,
        f"the new {leader} to restore",
        every=0.5,
    )
    stopped = trainer_events(node, namespace, leader, "terminated")
    assert stopped, "the leader was not stopped gracefully (no checkpoint taken first)"
    assert restored["step"] == stopped[-1]["step"] >= before > 0
    connected = trainer_events(node, namespace, leader, "connecting")
    if connected:  # ParameterServer: the coordinator names its cluster
        assert len(connected[-1]["cluster"]["worker"]) == to
    phases = {"restored": time.monotonic() - started}
    wait_for(lambda: len(workers(cluster, namespace, name)) == to, 120, f"{to} worker pods")
    # Training goes on past the restored step.
    wait_for(
        lambda: step(cluster, namespace, name) > restored["step"],
        120,
        "training to go on after the change",
        every=0.5,
    )
    phases["training again"] = time.monotonic() - started
    status = wait_for(
        lambda: (s := job_status(cluster, namespace, name))["phase"] == "Running" and s,
        120,
        "the job Running again",
    )
    assert status.get("restarts", 0) == 0
    assert all(r.get("restarts", 0) == 0 for r in status["replicaStatuses"].values())
    scaled = wait_for(
        lambda: (
            c
            if (
                c := next(
                    x
                    for x in job_status(cluster, namespace, name)["conditions"]
                    if x["type"] == "Scaling"
                )
            )["status"]
            == "False"
            else None
        ),
        120,
        "the Scaling condition to end",
    )
    assert scaled["reason"] == "Scaled"
    got = scale_subresource(cluster, namespace, name)
    assert got["spec"]["replicas"] == to
    wait_for(
        lambda: scale_subresource(cluster, namespace, name)["status"].get("replicas") == to,
        120,
        "the scale's status.replicas",
    )
    assert "training.etj.dev/replica-type=worker" in got["status"]["selector"]
    said = wait_for(
        lambda: len(s := scaled_events(cluster, namespace, name)) >= n and s, 120, "Scaled event"
    )
    assert len(said) == n  # one per change
    return phases


def uids(cluster: LocalCluster, namespace: str) -> dict[str, str]:
    return {n: p["metadata"]["uid"] for n, p in live_pods(cluster, namespace).items()}


def change_without_trainers(c: LocalCluster, namespace: str, name: str, n: int, to: int) -> None:
    """The ``n``th change, to ``to`` workers, of a job whose pods a stand-in kubelet runs."""
    chief = f"{name}-chief-0"
    before = uids(c, namespace)
    scale(c, namespace, name, to)
    wait_for(
        lambda: (
            len(workers(c, namespace, name)) == to
            and uids(c, namespace).get(chief) not in (None, before[chief])
            and job_status(c, namespace, name).get("phase") == "Running"
        ),
        120,
        f"{to} workers and a new chief",
    )
    after = uids(c, namespace)
    # Only the chief was made again; the ps and the remaining workers kept running.
    kept = {k: v for k, v in before.items() if k in after and k != chief}
    assert kept and all(after[k] == v for k, v in kept.items())
    pod = pods(c, namespace)[chief]
    assert pod["metadata"]["annotations"]["training.etj.dev/cluster-workers"] == str(to)
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert len(json.loads(env["TF_CONFIG"])["cluster"]["worker"]) == to

    def changed() -> dict[str, Any] | None:
        s = job_status(c, namespace, name)
        scaling = next((x for x in s.get("conditions", []) if x["type"] == "Scaling"), {})
        return s if s.get("workerReplicas") == to and scaling.get("status") == "False" else None

    status = wait_for(changed, 120, "the status of the change")
    assert status.get("restarts", 0) == 0
    assert all(r.get("restarts", 0) == 0 for r in status["replicaStatuses"].values())
    got = scale_subresource(c, namespace, name)
    assert got["spec"]["replicas"] == got["status"]["replicas"] == to
    assert got["status"]["selector"] == (
        f"app.kubernetes.io/managed-by=etj,training.etj.dev/job-name={name},"
        "training.etj.dev/replica-type=worker"
    )
    said = wait_for(
        lambda: e if len(e := scaled_events(c, namespace, name)) >= n else None,
        120,
        "the Scaled Event",
    )
    assert len(said) == n  # one per change (listed in no particular order)
    assert any(f"-> {to}:" in e["message"] for e in said)


def test_kubectl_scale_with_a_stand_in_kubelet(
    crds: LocalCluster, namespace: str, operator: OperatorProcess
):
    """The fast sibling: 2 -> 4 -> 1 workers on the real API server, no trainers."""
    c, name = crds, "fast"
    with KubeletStandIn(c, namespace):
        c.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(ps_job(name)))
        wait_for(lambda: job_status(c, namespace, name).get("phase") == "Running", 120, "Running")
        change_without_trainers(c, namespace, name, 1, 4)
        change_without_trainers(c, namespace, name, 2, 1)
        # ParameterServer needs a worker: the API server says so, the job is untouched.
        refused = c.kubectl("scale", f"etj/{name}", "-n", namespace, "--replicas=0", check=False)
        assert refused.returncode != 0 and "worker" in refused.stderr


@pytest.mark.extended  # make test-all: each change restarts a TensorFlow chief (~3 min here)
def test_parameter_server_job_scaled_up_and_down(
    crds: LocalCluster, namespace: str, node: Path, operator: OperatorProcess, shared_dir: Path
):
    c, name = crds, "el"
    started = time.monotonic()
    c.kubectl(
        "apply",
        "-n",
        namespace,
        "-f",
        "-",
        input=json.dumps(job(name, "ParameterServer", 2, shared_dir / "ckpt")),
    )
    wait_for(lambda: step(c, namespace, name) > 0, 180, "training to start", every=0.5)
    phases = {"training": time.monotonic() - started}
    for n, to in enumerate((4, 1), start=1):
        took = check_scaled(c, namespace, node, name, f"{name}-chief-0", to, n)
        phases |= {f"{to} workers {k}": v for k, v in took.items()}
    # The ps served throughout: made once.
    assert len(trainer_events(node, namespace, f"{name}-ps-0", "serving")) == 1
    print("elastic ParameterServer job:", {k: round(v, 1) for k, v in phases.items()})


@pytest.mark.extended  # make test-all: two clusters of mirrored workers start, one after another
def test_mirrored_job_scaled_resumes_from_the_checkpoint_taken_first(
    crds: LocalCluster, namespace: str, node: Path, operator: OperatorProcess, shared_dir: Path
):
    c, name = crds, "em"
    c.kubectl(
        "apply",
        "-n",
        namespace,
        "-f",
        "-",
        input=json.dumps(job(name, "MultiWorkerMirrored", 2, shared_dir / "ckpt")),
    )
    wait_for(lambda: step(c, namespace, name) > 0, 180, "training to start", every=0.5)
    check_scaled(c, namespace, node, name, f"{name}-worker-0", 3, 1)
