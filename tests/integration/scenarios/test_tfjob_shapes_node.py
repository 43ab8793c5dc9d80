"""TFJob's shapes through the operator on the real local control plane: Kubeflow's
dist-mnist TFJob (PS x2 + Worker x4, no Chief) converted by `etj convert` and applied; the
process-backed node runs each replica's command (here a few lines of Python standing in for
the program: they check TF_CONFIG and exit or wait as a between-graph job's tasks do).

- default successPolicy: worker 0 is the chief; its exit 0 succeeds the job while the
  other workers still run, and the ps (which never exit) and those workers are deleted;
- successPolicy AllWorkers: the job succeeds only once every worker has exited 0.

tests/local/etj/local/test_runner_tfjob_shapes.py runs a real TensorFlow between-graph program in this
shape under `etj run`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from etj.cli.convert import convert_tfjob
from etj_testcluster import LocalCluster
from tests.integration.conftest import wait_for
from tests.integration.operator_helpers import OperatorProcess, job_status, live_pods

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[3]
TFJOB = ROOT / "tests" / "cases" / "tfjob" / "dist-mnist.yaml"

# Each task checks that TF_CONFIG has TFJob's shape for dist-mnist (no chief entry; exit 3
# otherwise: the job then fails under restartPolicy Never). The ps serve until stopped;
# worker 0 finishes at once; the other workers take LINGER seconds.
PROGRAM = """
import json, os, sys, time
c = json.loads(os.environ["TF_CONFIG"])
cluster, task = c["cluster"], c["task"]
if sorted(cluster) != ["ps", "worker"] or (len(cluster["ps"]), len(cluster["worker"])) != (2, 4):
    print("unexpected TF_CONFIG", c, flush=True)
    sys.exit(3)
if task["type"] == "ps":
    time.sleep(600)
elif task["index"] != 0:
    time.sleep(float(os.environ["LINGER"]))
"""


def dist_mnist(success_policy: str | None, linger: float) -> dict[str, Any]:
    tfjob = yaml.safe_load(TFJOB.read_text())
    if success_policy is not None:
        tfjob["spec"]["successPolicy"] = success_policy
    job = convert_tfjob(tfjob)
    del job["metadata"]["namespace"]  # the test's namespace
    job["spec"]["runPolicy"]["restartPolicy"] = "Never"  # a wrong TF_CONFIG fails at once
    for role in ("worker", "ps"):
        container = job["spec"]["replicas"][role]["template"]["spec"]["containers"][0]
        container["command"] = ["python", "-c", PROGRAM]
        container.pop("args", None)
        container["env"] = [{"name": "LINGER", "value": str(linger)}]
    return job


def finished(crds: LocalCluster, namespace: str) -> dict[str, Any]:
    wait_for(
        lambda: job_status(crds, namespace, "dist-mnist").get("phase") in ("Succeeded", "Failed"),
        120,
        "the job to finish",
        every=0.5,
    )
    return job_status(crds, namespace, "dist-mnist")


def test_worker_0_is_the_chief_of_a_ps_job_without_one(
    crds: LocalCluster, namespace: str, node: Path, operator: OperatorProcess
):
    crds.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(dist_mnist(None, 600)))
    st = finished(crds, namespace)
    assert st["phase"] == "Succeeded", st
    assert st["message"] == (
        "worker 0 (the chief: the job has none) finished; parameter servers stopped"
    )
    # Worker 0 alone had exited: the others were still running when the job succeeded.
    assert st["replicaStatuses"]["worker"]["succeeded"] == 1, st["replicaStatuses"]
    assert "chief" not in st["replicaStatuses"] or not st["replicaStatuses"]["chief"]
    # The ps and the running workers go (cleanPodPolicy Running); worker 0's pod stays.
    wait_for(
        lambda: set(live_pods(crds, namespace)) == {"dist-mnist-worker-0"},
        120,
        "the ps and the other workers deleted",
    )


def test_all_workers_success_policy_waits_for_every_worker(
    crds: LocalCluster, namespace: str, node: Path, operator: OperatorProcess
):
    job = dist_mnist("AllWorkers", 3)
    assert job["spec"]["runPolicy"]["successPolicy"] == "AllWorkers"
    crds.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(job))
    st = finished(crds, namespace)
    assert st["phase"] == "Succeeded", st
    assert st["message"] == "all 4 workers finished; parameter servers stopped"
    assert st["replicaStatuses"]["worker"]["succeeded"] == 4, st["replicaStatuses"]
    wait_for(
        lambda: not any("-ps-" in n for n in live_pods(crds, namespace)), 120, "the ps deleted"
    )


def test_a_chiefless_ps_job_on_etjs_trainer_is_failed_by_the_operator(
    crds: LocalCluster, namespace: str, operator: OperatorProcess
):
    """The API server admits a chief-less ParameterServer job whose workers have a template
    (CEL cannot see into its Pod spec); a template without a command runs etj's trainer,
    which needs its chief: the operator fails the job naming why, and creates nothing."""
    job = dist_mnist(None, 0)
    for role in ("worker", "ps"):
        job["spec"]["replicas"][role]["template"] = {"metadata": {"labels": {"team": "ads"}}}
    crds.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(job))
    st = finished(crds, namespace)
    failed = next(c for c in st["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "InvalidSpec", failed
    assert "needs exactly one chief" in failed["message"], failed
    assert live_pods(crds, namespace) == {}
