"""Operator scale benchmark on the local control plane: what N jobs cost while nothing happens.

N jobs (default 1,000) of one worker each, submitted in waves (``--wave``, 250): each wave
runs (a kubelet stand-in marks pods Running), then all but its share of the ``--running``
jobs complete. Over a quiet minute: the API requests the operator makes per second, its
RSS and CPU. Then two bursts of new jobs at once (50, then 200): the time from the first
submission until every pod exists, per job. Printed against #43's thresholds: idle
requests/s <= 0.1, RSS < 400 MB, the 200-job burst's seconds per job no worse than the
50-job burst's (ratio <= 1).

Attribution: ``apiserver_request_total`` has no user-agent label (Kubernetes 1.35: verb,
resource, code, ...), so the operator runs under its own ServiceAccount with its own
FlowSchema, and its requests are the API server's own count
``apiserver_flowcontrol_dispatched_requests_total{flow_schema="etj-operator"}`` (API
Priority and Fairness classifies every request; read from the apiserver's /metrics with
prometheus_client's parser): the control plane's own requests are not in it. The kubelet
stand-in and the benchmark itself run as the admin and are not counted.

    .venv/bin/python benchmarks/operator_scale.py [--jobs 1000] [--running 0.1] [--quiet-seconds 60]
    .venv/bin/python benchmarks/operator_scale.py --jobs 10200 --running 200  # #43's 10,000
"""

from __future__ import annotations

import argparse
import json
import os
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
    kubelet stand-in would itself load the API server with thousands of pods); ``seen``:
    the time each pod was first seen.

    The watch is taken up from the last resourceVersion it delivered (bookmarks included),
    not started afresh: a fresh watch begins by replaying every existing pod as ADDED, and
    with thousands of pods that replay outlasted the watch's own timeout, so pods late in
    its order (and any created meanwhile) were never seen at all (a wave once waited
    forever for one). Only an expired version (410) lists again."""

    def __init__(self, core: client.CoreV1Api):
        self.core = core
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.seen: dict[str, float] = {}
        self.pool = ThreadPoolExecutor(8)
        self.version = ""

    def relist(self) -> None:
        token = None
        while True:
            page = self.core.list_namespaced_pod(NS, limit=500, _continue=token)
            for pod in page.items:
                self.handle(pod)
            self.version = self.version or page.metadata.resource_version
            token = page.metadata._continue
            if not token:
                return

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                if not self.version:
                    self.relist()
                w = watch.Watch()
                for ev in w.stream(
                    self.core.list_namespaced_pod,
                    NS,
                    resource_version=self.version,
                    allow_watch_bookmarks=True,
                    timeout_seconds=300,
                ):
                    if self.stop.is_set():
                        return
                    self.version = w.resource_version or self.version
                    if ev["type"] != "BOOKMARK":
                        self.handle(ev["object"])
            except client.ApiException as exc:
                if exc.status == 410:
                    self.version = ""  # expired: list again
                print(f"kubelet stand-in: {exc.status} {exc.reason}", file=sys.stderr)
            except Exception as exc:  # a broken watch: take it up again
                print(f"kubelet stand-in: {exc}", file=sys.stderr)

    def act_or_report(self, pod: client.V1Pod) -> None:
        try:
            self.act(pod)
        except Exception as exc:  # noted: a pod left Pending is why a wave would wait
            print(f"kubelet stand-in: {pod.metadata.name}: {exc}", file=sys.stderr)

    def handle(self, pod: client.V1Pod) -> None:
        """Note the pod as seen now, and act on it in a worker: a watch that waited for each
        write would see a burst's pods as late as its backlog of writes made it."""
        self.seen.setdefault(pod.metadata.name, time.monotonic())
        self.pool.submit(self.act_or_report, pod)

    def act(self, pod: client.V1Pod) -> None:
        name = pod.metadata.name
        for attempt in range(5):
            try:
                if pod.metadata.deletion_timestamp is not None:
                    self.core.delete_namespaced_pod(name, NS, grace_period_seconds=0)
                elif pod.status.phase == "Pending" and pod.spec.node_name:
                    self.set(name, "Running")
                return
            except client.ApiException as exc:
                if exc.status in (404, 409):
                    return
                # A loaded API server (429, 5xx): the event would be lost with the watch.
                if exc.status not in (429, 500, 503, 504) or attempt == 4:
                    raise
                time.sleep(0.5 * (attempt + 1))  # a retry's back-off

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


def wait_phase(
    custom: client.CustomObjectsApi, names: list[str], phase: str, seconds: float
) -> float:
    """Until every job of ``names`` is in ``phase`` (each read until it is: a LIST of
    thousands of jobs every poll would load the API server being measured)."""
    left = set(names)

    def done() -> bool:
        for name in sorted(left):
            got = custom.get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, name)
            now = (got.get("status") or {}).get("phase")
            if now == "Failed":
                raise SystemExit(f"{name} failed during the set-up: {got.get('status')}")
            if now == phase:
                left.discard(name)
        return not left

    return timed_wait(done, seconds, f"{len(left)} jobs {phase}", every=2)


def submit(custom: client.CustomObjectsApi, names: list[str]) -> None:
    with ThreadPoolExecutor(16) as pool:
        list(
            pool.map(
                lambda n: custom.create_namespaced_custom_object(
                    GROUP, VERSION, NS, PLURAL, job(n)
                ),
                names,
            )
        )


def burst(custom: client.CustomObjectsApi, kubelet: WatchingKubelet, size: int, tag: str) -> float:
    """``size`` new jobs at once: seconds from the first submission until every one's pod
    exists (as the kubelet stand-in's watch sees it)."""
    names = [f"{tag}{i:04d}" for i in range(size)]
    pods = [f"{n}-worker-0" for n in names]
    t0 = time.monotonic()
    submit(custom, names)
    timed_wait(lambda: all(p in kubelet.seen for p in pods), 600, f"the {size}-job burst's pods")
    return max(kubelet.seen[p] for p in pods) - t0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument(
        "--running", type=float, default=0.1, help="left running: a fraction, or a count (>= 1)"
    )
    parser.add_argument("--wave", type=int, default=250, help="jobs submitted at a time")
    parser.add_argument("--quiet-seconds", type=float, default=60.0)
    parser.add_argument("--bursts", default="50,200", help="sizes of the bursts timed after")
    args = parser.parse_args()
    n_running = int(args.running) if args.running >= 1 else round(args.jobs * args.running)
    bursts = [int(b) for b in args.bursts.split(",") if b]

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
            # Room on the one node for thousands of workers of the planned 769Mi each.
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

            # 1. N jobs in waves: each wave runs, then all but its running share finish
            # (their worker, the leader, exits 0).
            t0 = time.monotonic()
            names = [f"j{i:05d}" for i in range(args.jobs)]
            step = max(1, args.jobs // max(1, n_running))
            stay = set(names[::step][:n_running]) if n_running else set()
            for w in range(0, args.jobs, args.wave):
                wave = names[w : w + args.wave]
                submit(custom, wave)
                wait_phase(custom, wave, "Running", 1800)
                done = [n for n in wave if n not in stay]
                with ThreadPoolExecutor(8) as pool:
                    list(pool.map(lambda n: kubelet.set(f"{n}-worker-0", "Succeeded"), done))
                wait_phase(custom, done, "Succeeded", 1800)
                rss_now, _ = proc_usage(op.proc.pid)
                print(
                    f"wave {w // args.wave + 1}: {w + len(wave)} jobs, "
                    f"{time.monotonic() - t0:.0f} s, operator RSS {rss_now:.0f} MB",
                    file=sys.stderr,
                    flush=True,
                )
            setup_seconds = time.monotonic() - t0
            time.sleep(5)  # let the last status writes and events settle before measuring

            # 2. A quiet period.
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

            # 3. Bursts of new jobs at once: submission -> every pod exists.
            timed = {size: burst(custom, kubelet, size, f"b{size}-") for size in bursts}
            rss_after, _ = proc_usage(op.proc.pid)
        finally:
            if kubelet is not None:
                kubelet.stop.set()
            if op is not None:
                op.stop()
            cluster.stop()

    report: dict[str, Any] = {
        "jobs": args.jobs,
        "running": n_running,
        "finished": args.jobs - n_running,
        "setup_s": round(setup_seconds, 1),
        "quiet_seconds": round(elapsed, 1),
        # All the operator's requests since it started (set-up included): the attribution
        # works, the quiet figure is not a zero for want of counting.
        "operator_requests_total": int(req1),
        "operator_requests": int(req1 - req0),
        "operator_requests_per_s": round((req1 - req0) / elapsed, 3),
        "operator_rss_mb": round(rss, 1),
        "operator_rss_mb_after_bursts": round(rss_after, 1),
        "operator_cpu_percent": round(100 * (cpu1 - cpu0) / elapsed, 2),
        **{f"burst_{n}_s": round(t, 2) for n, t in timed.items()},
        **{f"burst_{n}_s_per_job": round(t / n, 4) for n, t in timed.items()},
    }
    print(json.dumps(report, indent=2))
    goals = {
        f"idle requests/s {report['operator_requests_per_s']} <= 0.1": (
            report["operator_requests_per_s"] <= 0.1
        ),
        f"RSS {report['operator_rss_mb']} MB < 400 MB": report["operator_rss_mb"] < 400,
    }
    if len(bursts) >= 2:
        small, large = min(bursts), max(bursts)
        ratio = (timed[large] / large) / (timed[small] / small)
        report["burst_ratio"] = round(ratio, 3)
        goals[f"burst {large} / burst {small} per job {ratio:.2f} <= 1"] = ratio <= 1.0
    for goal, ok in goals.items():
        print(f"[{'ok' if ok else 'MISSED'}] {goal}")


if __name__ == "__main__":
    main()
