"""The operator, as a separate process, against the real API server: creation without
duplicates across operator restarts, strategy-aware restarts, restart policies and
backoffLimit, completion and TTL, suspend/resume, invalid specs, progress, metrics."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from threading import Thread
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
    utc_now,
)

pytestmark = pytest.mark.integration

PS_JOB: dict[str, Any] = {
    "apiVersion": "training.etj.dev/v1alpha1",
    "kind": "EmbeddingTrainingJob",
    "metadata": {"name": "ctr"},
    "spec": {
        "strategy": "ParameterServer",
        "replicas": {"worker": {"replicas": 2}, "ps": {"replicas": 2}},
        "model": {"embeddings": [{"name": "user_id", "vocabularySize": 100000, "dimension": 16}]},
        "sharding": {"maxShardBytes": "4Mi"},
        # Several pods share checkpoints; with the stand-in kubelet nothing is written.
        "checkpoint": {"uri": "/shared/etj-checkpoints"},
        # A short back-off keeps these tests quick; its doubling is shown in unit tests.
        "runPolicy": {"backoffLimit": 3, "restartBackoff": {"initialSeconds": 1}},
    },
}
PS_PODS = {"ctr-chief-0", "ctr-worker-0", "ctr-worker-1", "ctr-ps-0", "ctr-ps-1"}


def job(strategy: str = "ParameterServer", **run_policy: Any) -> dict[str, Any]:
    doc = copy.deepcopy(PS_JOB)
    if strategy == "MultiWorkerMirrored":
        doc["spec"]["strategy"] = strategy
        del doc["spec"]["replicas"]["ps"]
        doc["spec"]["replicas"]["worker"]["replicas"] = 3
    doc["spec"]["runPolicy"].update(run_policy)
    return doc


@pytest.fixture
def kubelet(crds: LocalCluster, namespace: str) -> Iterator[KubeletStandIn]:
    with KubeletStandIn(crds, namespace) as k:
        yield k


@pytest.fixture(autouse=True)
def _operator_log_on_failure(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed and "operator" in request.fixturenames:
        print("---- operator log ----\n" + request.getfixturevalue("operator").tail(120))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):  # type: ignore[no-untyped-def]
    outcome = yield
    setattr(item, f"rep_{outcome.get_result().when}", outcome.get_result())


def apply(cluster: LocalCluster, namespace: str, doc: dict[str, Any]) -> None:
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(doc))


def phase(cluster: LocalCluster, namespace: str, name: str = "ctr") -> str | None:
    return job_status(cluster, namespace, name).get("phase")


def test_ps_job_creates_service_config_map_and_pods_without_duplicates_across_restarts(
    crds: LocalCluster, namespace: str, operator: OperatorProcess, kubelet: KubeletStandIn
):
    apply(crds, namespace, job())
    wait_for(lambda: set(live_pods(crds, namespace)) == PS_PODS, 120, "the five pods")
    all_pods = pods(crds, namespace)
    configs = {
        n: json.loads(p["spec"]["containers"][0]["env"][0]["value"]) for n, p in all_pods.items()
    }
    clusters = {json.dumps(c["cluster"], sort_keys=True) for c in configs.values()}
    assert len(clusters) == 1
    cluster_spec = next(iter(configs.values()))["cluster"]
    assert cluster_spec["ps"] == [f"ctr-ps-{i}.ctr.{namespace}.svc:2222" for i in range(2)]
    svc = json.loads(crds.kubectl("get", "svc", "ctr", "-n", namespace, "-o", "json").stdout)
    assert svc["spec"]["clusterIP"] == "None" and svc["spec"]["publishNotReadyAddresses"] is True
    cm = json.loads(
        crds.kubectl("get", "cm", "ctr-trainer-config", "-n", namespace, "-o", "json").stdout
    )
    assert json.loads(cm["data"]["trainer.json"])["shardPlan"]["psReplicas"] == 2
    uids = {n: p["metadata"]["uid"] for n, p in all_pods.items()}
    wait_for(lambda: phase(crds, namespace) == "Running", 120, "phase Running")

    # Kill the operator mid-way and start it again: nothing is created twice.
    operator.kill()
    operator.start()
    wait_for(lambda: "etj_reconciles_total" in operator.metrics(), 120, "a reconcile after restart")
    wait_for(lambda: 'etj_reconciles_total{result="ok"}' in operator.metrics(), 120, "a reconcile")
    after = pods(crds, namespace)
    assert set(after) == PS_PODS
    assert {n: p["metadata"]["uid"] for n, p in after.items()} == uids
    status = job_status(crds, namespace, "ctr")
    assert status["workers"] == "2/2" and status["shardPlan"]["psReplicas"] == 2
    assert any(e["reason"] == "Created" for e in events(crds, namespace))


def test_ps_worker_failure_replaces_only_that_worker_and_count_survives_operator_restart(
    crds: LocalCluster, namespace: str, operator: OperatorProcess, kubelet: KubeletStandIn
):
    apply(crds, namespace, job())
    wait_for(lambda: phase(crds, namespace) == "Running", 120, "Running")
    before = {n: p["metadata"]["uid"] for n, p in pods(crds, namespace).items()}
    kubelet.terminate("ctr-worker-1", 137, "Error")
    wait_for(
        lambda: job_status(crds, namespace, "ctr").get("restarts") == 1, 120, "one restart counted"
    )

    def replaced() -> bool:
        now = live_pods(crds, namespace)
        return (
            set(now) == PS_PODS and now["ctr-worker-1"]["metadata"]["uid"] != before["ctr-worker-1"]
        )

    wait_for(replaced, 120, "worker-1 replaced")
    now = pods(crds, namespace)
    for name in PS_PODS - {"ctr-worker-1"}:
        assert now[name]["metadata"]["uid"] == before[name], f"{name} must not be touched"
    wait_for(lambda: phase(crds, namespace) == "Running", 120, "Running again")
    st = job_status(crds, namespace, "ctr")
    assert st["replicaStatuses"]["worker"]["restarts"] == 1
    assert any(
        e["reason"] == "Restarting" and "ctr-worker-1" in e["message"]
        for e in events(crds, namespace)
    )

    operator.kill()
    operator.start()
    wait_for(lambda: 'etj_reconciles_total{result="ok"}' in operator.metrics(), 120, "a reconcile")
    assert job_status(crds, namespace, "ctr")["restarts"] == 1
    assert (
        'etj_replica_restarts_total{role="worker"}' not in operator.metrics()
    )  # a new process counts anew


def test_ps_chief_stopped_by_its_watchdog_restarts_every_replica(
    crds: LocalCluster, namespace: str, operator: OperatorProcess, kubelet: KubeletStandIn
):
    """Some worker or ps is hung: the whole job restarts from its checkpoint, counted once."""
    apply(crds, namespace, job())
    wait_for(lambda: phase(crds, namespace) == "Running", 120, "Running")
    before = {n: p["metadata"]["uid"] for n, p in pods(crds, namespace).items()}
    assert set(before) == PS_PODS
    kubelet.terminate(
        "ctr-chief-0",
        138,
        message="WatchdogTimeout: watchdog: no training step completed for 600s",
    )

    def all_new() -> bool:
        now = live_pods(crds, namespace)
        return set(now) == PS_PODS and all(now[n]["metadata"]["uid"] != before[n] for n in PS_PODS)

    wait_for(all_new, 120, "every replica recreated")
    st = job_status(crds, namespace, "ctr")
    assert st["restarts"] == 1
    restarting = [e for e in events(crds, namespace) if e["reason"] == "Restarting"]
    assert len(restarting) == 1 and "WatchdogTimeout" in restarting[0]["message"]


def test_ps_chief_failure_restarts_the_chief_with_its_workers_and_keeps_the_ps(
    crds: LocalCluster, namespace: str, operator: OperatorProcess, kubelet: KubeletStandIn
):
    """A new chief gets new workers (a worker still in a chunk of the chief before could
    hold the new chief's first chunk, issue 39); the ps keep their tables, counted once."""
    apply(crds, namespace, job())
    wait_for(lambda: phase(crds, namespace) == "Running", 120, "Running")
    before = {n: p["metadata"]["uid"] for n, p in pods(crds, namespace).items()}
    assert set(before) == PS_PODS
    kubelet.terminate("ctr-chief-0", 137)
    renewed = {n for n in PS_PODS if "-ps-" not in n}

    def chief_and_workers_new() -> bool:
        now = live_pods(crds, namespace)
        return set(now) == PS_PODS and all(now[n]["metadata"]["uid"] != before[n] for n in renewed)

    wait_for(chief_and_workers_new, 120, "the chief and every worker recreated")
    now = pods(crds, namespace)
    for name in PS_PODS - renewed:
        assert now[name]["metadata"]["uid"] == before[name], f"{name} must not be touched"
    st = job_status(crds, namespace, "ctr")
    assert st["restarts"] == 1
    restarting = [e for e in events(crds, namespace) if e["reason"] == "Restarting"]
    assert len(restarting) == 1 and all(n in restarting[0]["message"] for n in renewed)


def test_a_full_checkpoint_volume_fails_the_job_with_its_condition_not_a_crash_loop(
    crds: LocalCluster, namespace: str, operator: OperatorProcess, kubelet: KubeletStandIn
):
    """The chief's save found the volume full (its termination message): the job is Failed
    at once under OnFailure, its CheckpointStorageFull condition says what to do, and no
    replica is made again."""
    apply(crds, namespace, job())
    wait_for(lambda: phase(crds, namespace) == "Running", 120, "Running")
    said = (
        "the checkpoint volume at /var/lib/etj/checkpoints/ctr is full: saving step 600 "
        "failed; it holds 1.00 GiB, 12.00 KiB free; the last checkpoint (ckpt-400) took "
        "300.00 MiB; with checkpoint.keep 3 the volume needs at least 1.17 GiB"
    )
    kubelet.terminate("ctr-chief-0", 2, message=f"CheckpointStorageFull: {said}")
    wait_for(lambda: phase(crds, namespace) == "Failed", 120, "Failed")
    st = job_status(crds, namespace, "ctr")
    full = [c for c in st["conditions"] if c["type"] == "CheckpointStorageFull"]
    assert len(full) == 1 and full[0]["status"] == "True", st["conditions"]
    assert full[0]["reason"] == "CheckpointStorageFull"
    assert full[0]["message"] == f"ctr-chief-0: {said}"
    assert st["restarts"] == 0
    assert not [e for e in events(crds, namespace) if e["reason"] == "Restarting"]


def test_mirrored_worker_failure_replaces_all_workers(
    crds: LocalCluster, namespace: str, operator: OperatorProcess, kubelet: KubeletStandIn
):
    apply(crds, namespace, job("MultiWorkerMirrored"))
    names = {"ctr-worker-0", "ctr-worker-1", "ctr-worker-2"}
    wait_for(lambda: phase(crds, namespace) == "Running", 120, "Running")
    before = {n: p["metadata"]["uid"] for n, p in pods(crds, namespace).items()}
    assert set(before) == names
    kubelet.terminate("ctr-worker-2", 137)

    def all_new() -> bool:
        now = live_pods(crds, namespace)
        return set(now) == names and all(now[n]["metadata"]["uid"] != before[n] for n in names)

    wait_for(all_new, 120, "all three workers recreated")
    st = job_status(crds, namespace, "ctr")
    assert st["restarts"] == 1 and st["replicaStatuses"]["worker"]["restarts"] == 3


def test_exit_code_one_under_exit_code_policy_fails_the_job_and_cleans_pods(
    crds: LocalCluster, namespace: str, operator: OperatorProcess, kubelet: KubeletStandIn
):
    apply(crds, namespace, job(restartPolicy="ExitCode"))
    wait_for(lambda: phase(crds, namespace) == "Running", 120, "Running")
    kubelet.terminate("ctr-worker-0", 1)
    wait_for(lambda: phase(crds, namespace) == "Failed", 120, "Failed")
    st = job_status(crds, namespace, "ctr")
    failed = next(c for c in st["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "ReplicaFailed" and "exit code 1" in failed["message"]
    assert st["completionTime"]
    # cleanPodPolicy Running: only the failed pod stays, for its logs.
    wait_for(
        lambda: set(live_pods(crds, namespace)) == {"ctr-worker-0"}, 120, "running pods cleaned"
    )


def test_backoff_limit_exhausted_fails_with_reason(
    crds: LocalCluster, namespace: str, operator: OperatorProcess, kubelet: KubeletStandIn
):
    apply(crds, namespace, job(backoffLimit=1))
    wait_for(lambda: phase(crds, namespace) == "Running", 120, "Running")
    kubelet.terminate("ctr-worker-0", 137)
    wait_for(lambda: job_status(crds, namespace, "ctr").get("restarts") == 1, 120, "first restart")
    wait_for(lambda: phase(crds, namespace) == "Running", 120, "Running after the restart")
    # A second fault ends after the restart of the first was decided (container times are
    # whole seconds: an end in the same second would be part of the first fault).
    counted = job_status(crds, namespace, "ctr")["lastRestartTime"]
    wait_for(lambda: utc_now() > counted, 120, "a second past the counted restart")
    kubelet.terminate("ctr-worker-0", 137)
    wait_for(lambda: phase(crds, namespace) == "Failed", 120, "Failed")
    failed = next(
        c for c in job_status(crds, namespace, "ctr")["conditions"] if c["type"] == "Failed"
    )
    assert failed["reason"] == "BackoffLimitExceeded" and "backoffLimit 1" in failed["message"]


def test_chief_success_succeeds_stops_ps_and_ttl_deletes_everything(
    crds: LocalCluster, namespace: str, operator: OperatorProcess, kubelet: KubeletStandIn
):
    apply(crds, namespace, job(ttlSecondsAfterFinished=3))
    wait_for(lambda: phase(crds, namespace) == "Running", 120, "Running")
    kubelet.terminate("ctr-chief-0", 0, "Completed")
    wait_for(lambda: phase(crds, namespace) == "Succeeded", 120, "Succeeded")
    assert job_status(crds, namespace, "ctr")["completionTime"]
    wait_for(lambda: not any("-ps-" in n for n in live_pods(crds, namespace)), 120, "ps pods gone")
    # TTL: the job goes, and garbage collection takes every child with it.
    wait_for(
        lambda: crds.kubectl("get", "etj", "ctr", "-n", namespace, check=False).returncode != 0,
        120,
        "the job deleted by TTL",
    )
    wait_for(lambda: not pods(crds, namespace), 120, "pods garbage-collected")
    for kind, name in (("svc", "ctr"), ("cm", "ctr-trainer-config")):
        wait_for(
            lambda k=kind, n=name: (
                crds.kubectl("get", k, n, "-n", namespace, check=False).returncode != 0
            ),
            120,
            f"{kind} gone",
        )


def test_suspend_deletes_pods_and_resume_recreates_them(
    crds: LocalCluster, namespace: str, operator: OperatorProcess, kubelet: KubeletStandIn
):
    apply(crds, namespace, job())
    wait_for(lambda: phase(crds, namespace) == "Running", 120, "Running")
    started = job_status(crds, namespace, "ctr")["startTime"]
    crds.kubectl(
        "patch",
        "etj",
        "ctr",
        "-n",
        namespace,
        "--type=merge",
        "-p",
        '{"spec": {"runPolicy": {"suspend": true}}}',
    )
    wait_for(lambda: phase(crds, namespace) == "Suspended", 120, "Suspended")
    wait_for(lambda: not pods(crds, namespace), 120, "no pods")
    # startTime has second resolution: resume in a later second than the first start.
    wait_for(
        lambda: datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ") > started, 120, "a new second"
    )
    crds.kubectl(
        "patch",
        "etj",
        "ctr",
        "-n",
        namespace,
        "--type=merge",
        "-p",
        '{"spec": {"runPolicy": {"suspend": false}}}',
    )
    wait_for(lambda: set(live_pods(crds, namespace)) == PS_PODS, 120, "pods back")
    wait_for(lambda: phase(crds, namespace) == "Running", 120, "Running again")
    assert job_status(crds, namespace, "ctr")["restarts"] == 0
    # activeDeadlineSeconds counts from the resume, not from the first start.
    assert job_status(crds, namespace, "ctr")["startTime"] > started


def test_unplannable_spec_fails_with_message_and_no_pods(
    crds: LocalCluster, namespace: str, operator: OperatorProcess, kubelet: KubeletStandIn
):
    doc = job()
    doc["spec"]["model"]["embeddings"][0]["vocabularySize"] = 50_000_000
    doc["spec"]["model"]["embeddings"][0]["dimension"] = 64
    doc["spec"]["sharding"]["maxShardBytes"] = "512Mi"  # 4Mi would be 6104 shards: too many
    doc["spec"]["replicas"]["ps"] = {
        "replicas": "auto",
        "maxReplicas": 2,
        "resources": {"limits": {"memory": "2Gi"}},
    }
    apply(crds, namespace, doc)
    wait_for(lambda: phase(crds, namespace) == "Failed", 120, "Failed")
    failed = next(
        c for c in job_status(crds, namespace, "ctr")["conditions"] if c["type"] == "Failed"
    )
    assert failed["reason"] == "InvalidSpec" and "spec.replicas.ps" in failed["message"]
    assert pods(crds, namespace) == {}
    assert crds.kubectl("get", "svc", "ctr", "-n", namespace, check=False).returncode != 0


def test_other_manager_is_left_alone(
    crds: LocalCluster, namespace: str, operator: OperatorProcess, kubelet: KubeletStandIn
):
    apply(crds, namespace, job(managedBy="kueue.x-k8s.io/multikueue"))
    apply(crds, namespace, {**job(), "metadata": {"name": "mine"}})
    wait_for(lambda: phase(crds, namespace, "mine") == "Running", 120, "the other job Running")
    assert job_status(crds, namespace, "ctr") == {}
    assert not any(n.startswith("ctr-") for n in pods(crds, namespace))


class _Metrics(BaseHTTPRequestHandler):
    page = b""

    def do_GET(self) -> None:
        self.send_response(200)
        self.end_headers()
        self.wfile.write(self.page)

    def log_message(self, *args: Any) -> None:
        pass


def test_progress_from_the_chief_metrics_reaches_status_and_kubectl_get(
    crds: LocalCluster, namespace: str, operator: OperatorProcess, kubelet: KubeletStandIn
):
    # Stands in for the trainer chief's metrics endpoint until the process-backed node
    # runs real trainers (the end-to-end tests); the page uses the trainer's metric names.
    _Metrics.page = (
        b"etj_trainer_step 4200\netj_trainer_examples_per_second 51200.5\n"
        b"etj_trainer_loss 0.4375\netj_trainer_last_checkpoint_step 4000\n"
    )
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Metrics)
    Thread(target=server.serve_forever, daemon=True).start()
    try:
        kubelet.metrics_address = f"127.0.0.1:{server.server_address[1]}"
        apply(crds, namespace, job())
        wait_for(
            lambda: (job_status(crds, namespace, "ctr").get("progress") or {}).get("step") == 4200,
            120,
            "progress",
        )
        progress = job_status(crds, namespace, "ctr")["progress"]
        assert progress["lastCheckpointStep"] == 4000 and progress["loss"] == 0.4375
        row = crds.kubectl("get", "etj", "ctr", "-n", namespace).stdout.splitlines()[1].split()
        assert row[5] == "4200"
    finally:
        server.shutdown()


def test_oom_killed_replica_comes_back_with_a_larger_memory_limit(
    crds: LocalCluster, namespace: str, operator: OperatorProcess, kubelet: KubeletStandIn
):
    doc = job()
    doc["spec"]["replicas"]["worker"]["resources"] = {"limits": {"memory": "1Gi"}}
    doc["spec"]["runPolicy"]["maxMemoryOnOOM"] = "4Gi"
    apply(crds, namespace, doc)
    wait_for(lambda: phase(crds, namespace) == "Running", 120, "Running")
    before = pods(crds, namespace)["ctr-worker-1"]["metadata"]["uid"]
    kubelet.terminate("ctr-worker-1", 137, "OOMKilled")

    def limit() -> str | None:
        pod = live_pods(crds, namespace).get("ctr-worker-1")
        if pod is None or pod["metadata"]["uid"] == before:
            return None
        return str(pod["spec"]["containers"][0]["resources"]["limits"]["memory"])

    assert wait_for(limit, 120, "worker-1 recreated") == "1536Mi"
    assert (
        live_pods(crds, namespace)["ctr-worker-0"]["spec"]["containers"][0]["resources"]["limits"][
            "memory"
        ]
        == "1Gi"
    )
    assert job_status(crds, namespace, "ctr")["memoryLimits"] == {"ctr-worker-1": 1536 * 2**20}
    assert any(
        e["reason"] == "OOMKilled" and "1.50 GiB" in e["message"] for e in events(crds, namespace)
    )
