"""Operator burst benchmark on the local control plane.

Creates N jobs at once (1 chief, 4 workers, 2 ps each) and reports the time until all
their pods exist, the pod-failure -> replacement latency (p50/p99) and the operator's
CPU-seconds over the burst (user + system of its process, from /proc, from the first job
submitted to the last replacement), beside the raw pod-create rate of a tight client loop
against the same API server in the same run, and the operator's passes (all, and those
that found the world unchanged) and full resyncs from its metrics. A kubelet stand-in marks
pods Running and confirms deletions (there is no kubelet). The operator runs with its
shipped resync and progress intervals (30 s, 10 s; ``--test-intervals``: the integration
tests' 5 s and 1 s, which reconcile every job every second, so the CPU then grows with the
burst's wall time).

    .venv/bin/python benchmarks/operator_burst.py [--jobs 50] [--failures 20]
    # before/after on one API server, alternating, with py-spy profiles of each operator:
    git worktree add --detach /tmp/before main
    .venv/bin/python benchmarks/operator_burst.py --baseline /tmp/before --rounds 2 \
        --profile /tmp/burst

"All pods" is counted from the first job submitted and from the last; pods are counted
from the raw list answer (building client models of hundreds of pods per poll would
measure the benchmark's own poll). Take the CPU-seconds from /proc as the measure and
py-spy's ``--gil`` shares (``--profile``) only as where to look: on a loaded machine they
over-count long GIL holds (a process waiting for a core while holding it).

Not a test: nothing is asserted. Results, dated: ``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kubernetes import client  # noqa: E402
from tests.integration.operator_helpers import KubeletStandIn, OperatorProcess  # noqa: E402

from etj.controller.kube import load_config  # noqa: E402
from etj_testcluster import LocalCluster  # noqa: E402
from etj_testcluster.waiting import wait_for  # noqa: E402

PODS_PER_JOB = 7
# ``etj operator``'s own defaults (OperatorProcess passes the tests' 5 s and 1 s first; the
# last value of an option wins).
SHIPPED_INTERVALS = ("--resync-seconds", "30", "--progress-seconds", "10")


def job(name: str) -> dict:
    return {
        "apiVersion": "training.etj.dev/v1alpha1",
        "kind": "EmbeddingTrainingJob",
        "metadata": {"name": name},
        "spec": {
            "strategy": "ParameterServer",
            "replicas": {
                "chief": {"replicas": 1},
                "worker": {"replicas": 4},
                "ps": {"replicas": 2},
            },
            "model": {
                "embeddings": [{"name": "user_id", "vocabularySize": 100000, "dimension": 16}]
            },
            # Where every pod sees the checkpoints (a multi-pod job on each pod's own
            # emptyDir is refused); a bucket path needs no object in the API.
            "checkpoint": {"uri": "gs://etj-bench/checkpoints"},
            # The replacement latency measured is the operator's, not the restart back-off.
            "runPolicy": {"restartBackoff": {"initialSeconds": 0}},
        },
    }


def raw_pod(name: str, ns: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }


def timed_wait(
    predicate: Callable[[], Any], timeout: float, what: str, every: float = 0.05
) -> float:
    """Seconds until ``predicate`` holds, polled every ``every`` seconds by the tests' one
    deadline-bounded wait (``etj_testcluster.waiting.wait_for``; the deadline is a net
    against a hang)."""
    start = time.monotonic()
    wait_for(predicate, timeout, what, every)
    return time.monotonic() - start


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def counts(op: OperatorProcess) -> dict[str, int]:
    """The operator's reconcile passes (etj_reconciles_total, all results), those of them
    that found an unchanged world and decided nothing (result "unchanged") and full resyncs
    from the API (etj_resyncs_total) so far."""
    text = op.metrics().splitlines()

    def total(prefix: str) -> int:
        return round(sum(float(s.rsplit(" ", 1)[1]) for s in text if s.startswith(prefix)))

    return {
        "passes": total("etj_reconciles_total{"),
        "unchanged": total('etj_reconciles_total{result="unchanged"}'),
        "resyncs": total("etj_resyncs_total "),
    }


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process (all its threads), from /proc."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextlib.contextmanager
def operator_tree(tree: Path | None) -> Iterator[None]:
    """The operator process imports etj from ``tree`` (another checkout's source, e.g.
    ``git worktree add --detach /tmp/before main``) instead of this one's; None: this tree."""
    if tree is None:
        yield
        return
    old = os.environ.get("PYTHONPATH")
    # Ahead of the editable install's path entry in site-packages.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(tree / "operator"), str(tree / "trainer_image"), *([old] if old else [])]
    )
    try:
        yield
    finally:
        if old is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = old


def burst(
    cluster: LocalCluster,
    ns: str,
    jobs: int,
    failures: int,
    log: Path,
    tree: Path | None = None,
    profile: Path | None = None,
    intervals: tuple[str, ...] = (),
) -> dict[str, Any]:
    """N jobs at once into a fresh namespace until every pod exists, then ``failures``
    worker failures one after another; the operator's CPU over both, from /proc."""
    core = client.CoreV1Api(load_config(str(cluster.kubeconfig)))
    custom = client.CustomObjectsApi(core.api_client)
    make_namespace(cluster, ns)
    total = jobs * PODS_PER_JOB
    with operator_tree(tree):
        op = OperatorProcess(cluster, ns, log, extra=intervals).start()
    assert op.proc is not None
    pid = op.proc.pid
    spy = None
    if profile is not None:
        # py-spy samples the operator's Python stacks (only threads on a CPU: no --idle).
        spy = subprocess.Popen(
            [
                str(Path(sys.executable).parent / "py-spy"),
                "record",
                "--pid",
                str(pid),
                "--rate",
                "200",
                "--format",
                "raw",
                "--nonblocking",
                "--gil",  # only the thread holding the GIL: where Python spends CPU
                "-o",
                str(profile),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    try:
        with KubeletStandIn(cluster, ns):
            counts0 = counts(op)  # before the CPU is read: the scrape costs the operator
            cpu0 = cpu_seconds(pid)
            start = time.monotonic()
            for i in range(jobs):
                custom.create_namespaced_custom_object(
                    "training.etj.dev", "v1alpha1", ns, "embeddingtrainingjobs", job(f"j{i:03d}")
                )
            create_seconds = time.monotonic() - start

            def all_pods() -> bool:
                # Counted from the raw answer: building 350 V1Pod models per poll took this
                # process up to seconds under load, and "all pods" measured the poll.
                resp = core.list_namespaced_pod(ns, _preload_content=False)
                return len(json.loads(resp.data)["items"]) >= total

            burst_seconds = timed_wait(all_pods, 600, "every pod of the burst")
            cpu_pods = cpu_seconds(pid) - cpu0

            def running(name: str) -> bool:
                obj = custom.get_namespaced_custom_object(
                    "training.etj.dev", "v1alpha1", ns, "embeddingtrainingjobs", name
                )
                return (obj.get("status") or {}).get("phase") == "Running"

            for i in range(failures):
                timed_wait(lambda n=f"j{i:03d}": running(n), 300, f"j{i:03d} Running")

            # Failure -> replacement latency: a worker exits 137; time until a new pod of
            # the same name exists.
            latencies = []
            for i in range(failures):
                name = f"j{i:03d}-worker-1"
                old = core.read_namespaced_pod(name, ns).metadata.uid
                core.patch_namespaced_pod_status(
                    name,
                    ns,
                    {
                        "status": {
                            "phase": "Failed",
                            "containerStatuses": [
                                {
                                    "name": "trainer",
                                    "ready": False,
                                    "restartCount": 0,
                                    "image": "x",
                                    "imageID": "",
                                    "state": {"terminated": {"exitCode": 137, "reason": "Error"}},
                                }
                            ],
                        }
                    },
                )
                t0 = time.monotonic()

                def replaced(name: str = name, old: str = old) -> bool:
                    try:
                        pod = core.read_namespaced_pod(name, ns)
                    except client.ApiException:
                        return False
                    return pod.metadata.uid != old and pod.metadata.deletion_timestamp is None

                timed_wait(replaced, 120, f"{name} replaced", every=0.01)
                latencies.append(time.monotonic() - t0)
            cpu_burst = cpu_seconds(pid) - cpu0
            counts1 = counts(op)
            wall = time.monotonic() - start
    except BaseException:
        print(f"the operator's log ends:\n{op.tail()}", file=sys.stderr)
        raise
    finally:
        if spy is not None:
            spy.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
            spy.wait(timeout=60)
        op.stop()
    # The next burst starts with the node empty: without a kubelet to confirm it, a pod
    # deleted gracefully would hold its place on the node (1,000 pods) for good.
    cluster.kubectl(
        "delete", "pods", "--all", "-n", ns, "--grace-period=0", "--force", "--wait=false"
    )
    cluster.kubectl("delete", "namespace", ns, "--wait=false")
    return {
        "jobs_submitted_s": round(create_seconds, 2),
        "all_pods_created_s": round(burst_seconds, 2),  # after the last job was submitted
        "all_pods_since_first_job_s": round(create_seconds + burst_seconds, 2),
        "operator_pods_per_s": round(total / burst_seconds, 1),
        "replacement_p50_s": round(statistics.median(latencies), 3),
        "replacement_p99_s": round(pct(latencies, 0.99), 3),
        "operator_cpu_s_until_all_pods": round(cpu_pods, 2),
        "operator_cpu_s_burst": round(cpu_burst, 2),
        "reconcile_passes": counts1["passes"] - counts0["passes"],
        # Of them, those that found the world unchanged (0 for an operator that does not
        # tell them apart).
        "unchanged_passes": counts1["unchanged"] - counts0["unchanged"],
        # The baseline's operator may not count them (0 then).
        "resyncs": counts1["resyncs"] - counts0["resyncs"],
        "burst_wall_s": round(wall, 1),
    }


def make_namespace(cluster: LocalCluster, ns: str) -> None:
    cluster.kubectl("create", "namespace", ns)
    timed_wait(
        lambda: cluster.kubectl("get", "sa", "default", "-n", ns, check=False).returncode == 0,
        120,
        f"the default ServiceAccount of {ns}",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=50)
    parser.add_argument("--failures", type=int, default=20)
    parser.add_argument(
        "--baseline",
        type=Path,
        help="another checkout (e.g. `git worktree add --detach /tmp/before main`): its operator "
        "runs the same burst on the same API server, alternating with this tree's",
    )
    parser.add_argument("--rounds", type=int, default=1, help="bursts per tree")
    parser.add_argument(
        "--test-intervals",
        action="store_true",
        help="run the operator with the integration tests' resync (5 s) and progress (1 s) "
        "intervals instead of its shipped defaults (30 s, 10 s): every job is then reconciled "
        "every second, and the CPU per burst grows with the burst's wall time",
    )
    parser.add_argument(
        "--profile",
        type=Path,
        help="write py-spy's raw (collapsed) stacks of each operator to PATH.<tree>.<round>",
    )
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        cluster = LocalCluster(Path(tmp) / "cluster").start()
        try:
            cluster.apply_crds(sorted((ROOT / "crds").glob("*.yaml")))
            core = client.CoreV1Api(load_config(str(cluster.kubeconfig)))
            make_namespace(cluster, "raw")

            # 1. The raw rate: a tight loop creating as many pods as the burst will.
            total = args.jobs * PODS_PER_JOB
            start = time.monotonic()
            for i in range(total):
                core.create_namespaced_pod("raw", raw_pod(f"p{i}", "raw"))
            raw_seconds = time.monotonic() - start
            cluster.kubectl("delete", "namespace", "raw", "--wait=false")

            # 2. The operator(s): N jobs at once, until every pod exists; then failures.
            trees: list[tuple[str, Path | None]] = [("this", None)]
            if args.baseline is not None:
                trees.insert(0, ("baseline", args.baseline.resolve()))
            results: dict[str, list[dict[str, Any]]] = {label: [] for label, _ in trees}
            for r in range(args.rounds):
                for label, tree in trees if r % 2 == 0 else trees[::-1]:
                    profile = None
                    if args.profile is not None:
                        profile = args.profile.with_name(f"{args.profile.name}.{label}.{r}")
                    result = burst(
                        cluster,
                        f"bench-{label}-{r}",
                        args.jobs,
                        args.failures,
                        Path(tmp) / f"operator-{label}-{r}.log",
                        tree,
                        profile,
                        () if args.test_intervals else SHIPPED_INTERVALS,
                    )
                    results[label].append(result)
                    print(label, r, json.dumps(result), flush=True)
        finally:
            cluster.stop()

    raw_rate = total / raw_seconds
    print(f"load average: {os.getloadavg()}")
    print(f"raw pod creates: {raw_rate:.1f}/s ({args.jobs} jobs, {total} pods)")
    for label, runs in results.items():
        cpu = [r["operator_cpu_s_burst"] for r in runs]
        rate = [r["operator_pods_per_s"] for r in runs]
        since_first = statistics.median([r["all_pods_since_first_job_s"] for r in runs])
        print(
            f"{label}: operator CPU-s per burst {statistics.median(cpu):.2f} "
            f"(runs {cpu}); all pods {statistics.median([r['all_pods_created_s'] for r in runs]):.2f}s "
            f"after the last job ({since_first:.2f}s after the first); "
            f"operator/raw={statistics.median(rate) / raw_rate:.2f}; replacement "
            f"p50={statistics.median([r['replacement_p50_s'] for r in runs]):.3f}s "
            f"p99={statistics.median([r['replacement_p99_s'] for r in runs]):.3f}s"
        )


if __name__ == "__main__":
    main()
