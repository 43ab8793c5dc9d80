"""A job's own TensorFlow program on the real local control plane: `kubectl apply`
examples/own-program.yaml -> the operator renders the templates' command -> the
process-backed node runs the ParameterServer-tutorial program -> a worker is killed and
replaced -> the chief exits 0 -> the job Succeeds with the program's final step (its
TrainingComplete message) and the ps, which never exit by themselves, are stopped."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from etj_testcluster import LocalCluster
from tests.integration.conftest import wait_for
from tests.integration.operator_helpers import OperatorProcess, job_status, live_pods
from tests.integration.scenarios.test_e2e_local import kill_replica

pytestmark = [pytest.mark.integration, pytest.mark.trainer, pytest.mark.slow, pytest.mark.extended]

ROOT = Path(__file__).resolve().parents[3]
STEPS = 4000


def own_program_job(checkpoints: Path) -> dict[str, Any]:
    job = yaml.safe_load((ROOT / "examples" / "own-program.yaml").read_text())
    job["metadata"]["name"] = "own"
    # No provisioner for checkpoint.storage on the process node; its pods are processes of
    # this host: an absolute path is one directory for all of them.
    job["spec"]["checkpoint"] = {"uri": str(checkpoints)}
    for role in ("chief", "worker", "ps"):
        container = job["spec"]["replicas"][role]["template"]["spec"]["containers"][0]
        # The node runs each pod in its own directory: the program by its full path.
        container["command"] = ["python", str(ROOT / "examples" / "own-program" / "train.py")]
        container["args"] = ["--steps", str(STEPS), "--batch", "32"]
    return job


def test_own_program_survives_a_killed_worker(
    crds: LocalCluster,
    namespace: str,
    node: Path,
    operator: OperatorProcess,
    shared_dir: Path,
):
    job = own_program_job(shared_dir / "ckpt")
    crds.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(job))

    def step() -> int:
        return int((job_status(crds, namespace, "own").get("progress") or {}).get("step") or 0)

    wait_for(lambda: step() >= 200, 240, "the program to pass step 200", every=1)
    old = kill_replica(crds, namespace, "own-worker-1")
    wait_for(
        lambda: (
            (p := live_pods(crds, namespace).get("own-worker-1")) and p["metadata"]["uid"] != old
        ),
        120,
        "worker-1 replaced",
    )
    # The template's labels are on the new pod, beside etj's own.
    labels = live_pods(crds, namespace)["own-worker-1"]["metadata"]["labels"]
    assert labels["team"] == "ads" and labels["training.etj.dev/replica-type"] == "worker"
    wait_for(
        lambda: job_status(crds, namespace, "own").get("phase") in ("Succeeded", "Failed"),
        400,
        "the job to finish",
        every=1,
    )
    st = job_status(crds, namespace, "own")
    assert st["phase"] == "Succeeded", st
    assert st["progress"]["step"] == STEPS
    assert st["replicaStatuses"]["worker"]["restarts"] == 1 and st["restarts"] == 1
    wait_for(lambda: not any("-ps-" in n for n in live_pods(crds, namespace)), 120, "ps stopped")
