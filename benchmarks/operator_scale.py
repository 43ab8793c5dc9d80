"""Operator scale benchmark on the local control plane: what N jobs cost while nothing happens.

N jobs (default 1,000) of one worker each; 90 % run to completion, 10 % keep running with a
kubelet stand-in. Then, over a quiet minute: the API requests the operator makes per
second, its RSS and CPU, and after it the time until a newly submitted job's pod appears.

Attribution: ``apiserver_request_total`` has no user-agent label (Kubernetes 1.35: verb,
resource, code, ...), so the operator runs under its own ServiceAccount with its own
FlowSchema, and its requests are the API server's own count
``apiserver_flowcontrol_dispatched_requests_total{flow_schema="etj-operator"}`` (API
Priority and Fairness classifies every request; read from the apiserver's /metrics with
prometheus_client's parser). Its user agent is ``etj-operator/<version>`` (and kopf's for
the watches) for the audit log. The kubelet stand-in and the benchmark itself run as the
admin and are not counted.

    .venv/bin/python benchmarks/operator_scale.py [--jobs 1000] [--quiet-seconds 60]

Pair it with ``benchmarks/operator_burst.py`` (50 new jobs at once, beside the raw pod
create rate) for the burst figures.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kubernetes import client, watch  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402
from tests.integration.operator_helpers import OperatorProcess  # noqa: E402

from etj.controller.kube import load_config  # noqa: E402
from etj_testcluster import LocalCluster  # noqa: E402
from etj_testcluster.cluster import NODE_NAME  # noqa: E402
from operator_burst import timed_wait  # noqa: E402  (this directory: the tests' wait_for, timed)

NS = "scale"
GROUP, VERSION, PLURAL = "training.etj.dev", "v1alpha1", "embeddingtrainingjobs"
SA = "etj-operator"
ROOMY = {"cpu": "1k", "memory": "4Ti", "pods": "5k"}
PRODUCTION = ("--resync-seconds", "30", "--progress-seconds", "10")


def job(name: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "EmbeddingTrainingJob",
        "metadata": {"name": name},
        "spec": {
            "strategy": "MultiWorkerMirrored",
            "replicas": {
                "worker": {
                    "replicas": 1,
                    "resources": {
                        "requests": {"cpu": "10m", "memory": "64Mi"},
                        "limits": {"memory": "1Gi"},  # what the planner wants a worker to have
                    },
                }
            },
            "model": {"embeddings": [{"name": "user_id", "vocabularySize": 1000, "dimension": 8}]},
        },
    }


class WatchingKubelet:
    """Marks scheduled pods Running and confirms deletions, from one watch (a listing
    kubelet stand-in would itself load the API server with thousands of pods)."""

    def __init__(self, core: client.CoreV1Api):
        self.core = core
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                for ev in watch.Watch().stream(
                    self.core.list_namespaced_pod, NS, timeout_seconds=30
                ):
                    if self.stop.is_set():
                        return
                    self.handle(ev["object"])
            except Exception as exc:  # a broken watch: start another
                print(f"kubelet stand-in: {exc}", file=sys.stderr)

    def handle(self, pod: client.V1Pod) -> None:
        name = pod.metadata.name
        try:
            if pod.metadata.deletion_timestamp is not None:
                self.core.delete_namespaced_pod(name, NS, grace_period_seconds=0)
            elif pod.status.phase == "Pending" and pod.spec.node_name:
                self.set(name, "Running")
        except client.ApiException as exc:
            if exc.status not in (404, 409):
                raise

    def set(self, name: str, phase: str) -> None:
        running = phase == "Running"
        state = (
            {"running": {"startedAt": "2026-01-01T00:00:00Z"}}
            if running
            else {"terminated": {"exitCode": 0, "reason": "Completed"}}
        )
        self.core.patch_namespaced_pod_status(
            name,
            NS,
            {
                "status": {
                    "phase": phase,
                    "podIP": "127.0.0.1",
                    "conditions": [{"type": "Ready", "status": str(running)}],
                    "containerStatuses": [
                        {
                            "name": "trainer",
                            "ready": running,
                            "restartCount": 0,
                            "image": "x",
                            "imageID": "",
                            "state": state,
                        }
                    ],
                }
            },
        )


def operator_identity(cluster: LocalCluster, path: Path) -> Path:
    """A ServiceAccount for the operator, its own FlowSchema, and a kubeconfig as it."""
    cluster.kubectl("create", "serviceaccount", SA, "-n", NS)
    cluster.kubectl(
        "create",
        "clusterrolebinding",
        SA,
        "--clusterrole=cluster-admin",
        f"--serviceaccount={NS}:{SA}",
    )
    flow = {
        "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
        "kind": "FlowSchema",
        "metadata": {"name": SA},
        "spec": {
            "matchingPrecedence": 500,
            "priorityLevelConfiguration": {"name": "workload-high"},
            "distinguisherMethod": {"type": "ByUser"},
            "rules": [
                {
                    "subjects": [
                        {"kind": "ServiceAccount", "serviceAccount": {"name": SA, "namespace": NS}}
                    ],
                    "resourceRules": [
                        {
                            "verbs": ["*"],
                            "apiGroups": ["*"],
                            "resources": ["*"],
                            "clusterScope": True,
                            "namespaces": ["*"],
                        }
                    ],
                    "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
                }
            ],
        },
    }
    cluster.kubectl("apply", "-f", "-", input=json.dumps(flow))
    token = cluster.kubectl("create", "token", SA, "-n", NS, "--duration=2h").stdout.strip()
    config = json.loads(cluster.kubeconfig.read_text())
    config["users"] = [{"name": SA, "user": {"token": token}}]
    config["contexts"][0]["context"]["user"] = SA
    path.write_text(json.dumps(config))
    return path


def operator_requests(cluster: LocalCluster) -> float:
    text = cluster.kubectl("get", "--raw", "/metrics").stdout
    total = 0.0
    for family in text_string_to_metric_families(text):
        if family.name == "apiserver_flowcontrol_dispatched_requests":
            total += sum(s.value for s in family.samples if s.labels.get("flow_schema") == SA)
    return total


def proc_usage(pid: int) -> tuple[float, float]:
    """(RSS in MB, user+system CPU seconds) of a process, from /proc."""
    with open(f"/proc/{pid}/status") as fh:
        rss_kb = next(int(line.split()[1]) for line in fh if line.startswith("VmRSS:"))
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return rss_kb / 1024, (int(fields[11]) + int(fields[12])) / ticks


def phases(custom: client.CustomObjectsApi) -> dict[str, int]:
    counts: dict[str, int] = {}
    for item in custom.list_namespaced_custom_object(GROUP, VERSION, NS, PLURAL)["items"]:
        phase = (item.get("status") or {}).get("phase") or "-"
        counts[phase] = counts.get(phase, 0) + 1
    return counts


def all_running(custom: client.CustomObjectsApi, jobs: int) -> bool:
    counts = phases(custom)
    if counts.get("Failed"):
        raise SystemExit(f"jobs failed during the set-up: {counts}")
    return counts.get("Running", 0) == jobs


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--running", type=float, default=0.1, help="fraction left running")
    parser.add_argument("--quiet-seconds", type=float, default=60.0)
    parser.add_argument("--new-jobs", type=int, default=5, help="single jobs timed afterwards")
    args = parser.parse_args()
    n_running = round(args.jobs * args.running)

    with tempfile.TemporaryDirectory() as tmp:
        # Priority and Fairness on (the test cluster turns it off): it classifies, and so
        # counts, every request by who made it.
        cluster = LocalCluster(
            Path(tmp) / "cluster", apiserver_args=("--enable-priority-and-fairness=true",)
        ).start()
        op: OperatorProcess | None = None
        kubelet: WatchingKubelet | None = None
        try:
            cluster.apply_crds(sorted((ROOT / "crds").glob("*.yaml")))
            cluster.kubectl("create", "namespace", NS)
            timed_wait(
                lambda: (
                    cluster.kubectl("get", "sa", "default", "-n", NS, check=False).returncode == 0
                ),
                120,
                f"the default ServiceAccount of {NS}",
            )
            # Room on the one node for a thousand workers of the planned 769Mi each.
            cluster.kubectl(
                "patch",
                "node",
                NODE_NAME,
                "--subresource=status",
                "--type=merge",
                "-p",
                json.dumps({"status": {key: ROOMY for key in ("capacity", "allocatable")}}),
            )
            core = client.CoreV1Api(load_config(str(cluster.kubeconfig)))
            custom = client.CustomObjectsApi(core.api_client)
            kubeconfig = operator_identity(cluster, Path(tmp) / "operator.kubeconfig")
            # The operator's own defaults (the test helper's shorter periods overridden).
            op = OperatorProcess(
                cluster, NS, Path(tmp) / "operator.log", PRODUCTION, kubeconfig=kubeconfig
            ).start()
            assert op.proc is not None
            kubelet = WatchingKubelet(core)
            kubelet.thread.start()

            # 1. N jobs, all running.
            t0 = time.monotonic()
            names = [f"j{i:04d}" for i in range(args.jobs)]
            with ThreadPoolExecutor(8) as pool:
                list(
                    pool.map(
                        lambda n: custom.create_namespaced_custom_object(
                            GROUP, VERSION, NS, PLURAL, job(n)
                        ),
                        names,
                    )
                )
            timed_wait(lambda: all_running(custom, args.jobs), 1800, "every job Running", every=2)
            setup_running = time.monotonic() - t0
            # 2. All but n_running finish: their worker (the leader) exits 0.
            assert kubelet is not None
            with ThreadPoolExecutor(8) as pool:
                list(
                    pool.map(lambda n: kubelet.set(f"{n}-worker-0", "Succeeded"), names[n_running:])
                )
            timed_wait(
                lambda: phases(custom).get("Succeeded", 0) == args.jobs - n_running,
                1800,
                "the finishing jobs Succeeded",
                every=2,
            )
            setup_seconds = time.monotonic() - t0
            time.sleep(5)  # let the last status writes and events settle before measuring

            # 3. A quiet minute.
            req0, (_, cpu0), w0 = (
                operator_requests(cluster),
                proc_usage(op.proc.pid),
                time.monotonic(),
            )
            time.sleep(args.quiet_seconds)  # the quiet period being measured
            req1, (rss, cpu1), w1 = (
                operator_requests(cluster),
                proc_usage(op.proc.pid),
                time.monotonic(),
            )
            elapsed = w1 - w0

            # 4. New jobs, one at a time: submission -> its pod exists.
            latencies = []
            for i in range(args.new_jobs):
                name = f"new{i}"
                custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, job(name))

                def exists(pod: str = f"{name}-worker-0") -> bool:
                    try:
                        core.read_namespaced_pod(pod, NS)
                        return True
                    except client.ApiException:
                        return False

                latencies.append(timed_wait(exists, 120, "the new job's pod", every=0.01))
        finally:
            if kubelet is not None:
                kubelet.stop.set()
            if op is not None:
                op.stop()
            cluster.stop()

    report = {
        "jobs": args.jobs,
        "running": n_running,
        "finished": args.jobs - n_running,
        "setup_all_running_s": round(setup_running, 1),
        "setup_total_s": round(setup_seconds, 1),
        "quiet_seconds": round(elapsed, 1),
        # All the operator's requests since it started (set-up included): the attribution
        # works, the quiet figure is not a zero for want of counting.
        "operator_requests_total": int(req1),
        "operator_requests": int(req1 - req0),
        "operator_requests_per_s": round((req1 - req0) / elapsed, 3),
        "operator_rss_mb": round(rss, 1),
        "operator_cpu_percent": round(100 * (cpu1 - cpu0) / elapsed, 2),
        "new_job_pod_s_median": round(statistics.median(latencies), 3),
        "new_job_pod_s_max": round(max(latencies), 3),
    }
    print(json.dumps(report, indent=2))
    goals = {
        "requests <= 1/s": report["operator_requests_per_s"] <= 1.0,
        "RSS < 400 MB": report["operator_rss_mb"] < 400,
        "new job's pod <= 2 s": report["new_job_pod_s_max"] <= 2.0,
    }
    print(" ".join(f"[{'ok' if ok else 'MISSED'}] {goal}" for goal, ok in goals.items()))


if __name__ == "__main__":
    main()
