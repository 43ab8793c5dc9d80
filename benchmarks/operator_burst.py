"""Operator burst benchmark on the local control plane.

Creates N jobs at once (1 chief, 4 workers, 2 ps each) and reports the time until all
their pods exist, and the pod-failure -> replacement latency (p50/p99), beside the raw
pod-create rate of a tight client loop against the same API server in the same run.
A kubelet stand-in marks pods Running and confirms deletions (there is no kubelet).

    .venv/bin/python benchmarks/operator_burst.py [--jobs 50] [--failures 20]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kubernetes import client  # noqa: E402
from tests.integration.operator_helpers import KubeletStandIn, OperatorProcess  # noqa: E402

from etj.controller.kube import load_config  # noqa: E402
from etj_testcluster import LocalCluster  # noqa: E402

PODS_PER_JOB = 7


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


def wait(predicate, timeout: float, every: float = 0.05) -> float:  # type: ignore[no-untyped-def]
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if predicate():
            return time.monotonic() - start
        time.sleep(every)  # polling interval of a deadline-bounded wait
    raise TimeoutError


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=50)
    parser.add_argument("--failures", type=int, default=20)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        cluster = LocalCluster(Path(tmp) / "cluster").start()
        try:
            for path in sorted((ROOT / "crds").glob("*.yaml")):
                cluster.kubectl("apply", "--server-side", "-f", str(path))
            cluster.kubectl("wait", "--for=condition=Established", "crd", "--all")
            core = client.CoreV1Api(load_config(str(cluster.kubeconfig)))
            custom = client.CustomObjectsApi(core.api_client)
            for ns in ("raw", "bench"):
                cluster.kubectl("create", "namespace", ns)
                wait(
                    lambda ns=ns: (
                        cluster.kubectl("get", "sa", "default", "-n", ns, check=False).returncode
                        == 0
                    ),
                    30,
                )

            # 1. The raw rate: a tight loop creating as many pods as the burst will.
            total = args.jobs * PODS_PER_JOB
            start = time.monotonic()
            for i in range(total):
                core.create_namespaced_pod("raw", raw_pod(f"p{i}", "raw"))
            raw_seconds = time.monotonic() - start
            cluster.kubectl(
                "delete",
                "pods",
                "--all",
                "-n",
                "raw",
                "--grace-period=0",
                "--force",
                "--wait=false",
            )

            # 2. The operator: N jobs at once, until every pod exists.
            op = OperatorProcess(cluster, "bench", Path(tmp) / "operator.log").start()
            with KubeletStandIn(cluster, "bench"):
                start = time.monotonic()
                for i in range(args.jobs):
                    custom.create_namespaced_custom_object(
                        "training.etj.dev",
                        "v1alpha1",
                        "bench",
                        "embeddingtrainingjobs",
                        job(f"j{i:03d}"),
                    )
                create_seconds = time.monotonic() - start

                def all_pods() -> bool:
                    return len(core.list_namespaced_pod("bench").items) >= total

                burst_seconds = wait(all_pods, 600)

                def running(name: str) -> bool:
                    obj = custom.get_namespaced_custom_object(
                        "training.etj.dev", "v1alpha1", "bench", "embeddingtrainingjobs", name
                    )
                    return (obj.get("status") or {}).get("phase") == "Running"

                for i in range(args.failures):
                    wait(lambda n=f"j{i:03d}": running(n), 300)

                # 3. Failure -> replacement latency: a worker exits 137; time until a new pod
                # of the same name exists.
                latencies = []
                for i in range(args.failures):
                    name = f"j{i:03d}-worker-1"
                    old = core.read_namespaced_pod(name, "bench").metadata.uid
                    core.patch_namespaced_pod_status(
                        name,
                        "bench",
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
                                        "state": {
                                            "terminated": {"exitCode": 137, "reason": "Error"}
                                        },
                                    }
                                ],
                            }
                        },
                    )
                    t0 = time.monotonic()

                    def replaced(name: str = name, old: str = old) -> bool:
                        try:
                            pod = core.read_namespaced_pod(name, "bench")
                        except client.ApiException:
                            return False
                        return pod.metadata.uid != old and pod.metadata.deletion_timestamp is None

                    wait(replaced, 120, every=0.01)
                    latencies.append(time.monotonic() - t0)
            op.stop()
        finally:
            cluster.stop()

    raw_rate = total / raw_seconds
    burst_rate = total / burst_seconds
    report = {
        "jobs": args.jobs,
        "pods": total,
        "raw_pod_create_per_s": round(raw_rate, 1),
        "jobs_submitted_s": round(create_seconds, 2),
        "all_pods_created_s": round(burst_seconds, 2),
        "operator_pods_per_s": round(burst_rate, 1),
        "replacement_p50_s": round(statistics.median(latencies), 3),
        "replacement_p99_s": round(pct(latencies, 0.99), 3),
    }
    print(json.dumps(report, indent=2))
    print(
        f"operator/raw={burst_rate / raw_rate:.2f} replacement_p50={report['replacement_p50_s']}s p99={report['replacement_p99_s']}s"
    )


if __name__ == "__main__":
    main()
