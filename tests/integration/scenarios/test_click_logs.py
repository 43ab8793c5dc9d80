"""A Criteo-layout job on the process-backed node: `kubectl apply` it, the operator runs
real trainers reading tab-separated click logs, a worker is killed mid-way, and the job
Succeeds with its held-out evaluation in status.evaluation."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from etj_testcluster import LocalCluster
from etj_trainer.data.clicklogs import write_train_and_validation
from tests.integration.conftest import wait_for
from tests.integration.operator_helpers import OperatorProcess, job_status, live_pods
from tests.integration.scenarios.test_e2e_local import kill_replica

# make test-all; CI trains the Criteo layout to its held-out AUC under etj run (tests/local/etj/local/test_runner_examples.py)
# and kills workers on the node in test_operator.py and the kind e2e.
pytestmark = [pytest.mark.integration, pytest.mark.trainer, pytest.mark.slow, pytest.mark.extended]
ROOT = Path(__file__).resolve().parents[3]
NAME = "clicks"


def _job(shared: Path) -> dict[str, Any]:
    _, valid = write_train_and_validation("criteo", shared / "data", 2, 4000, 2000)
    doc = yaml.safe_load((ROOT / "examples" / "criteo.yaml").read_text())
    doc["metadata"]["name"] = NAME
    data = doc["spec"]["data"]
    # The process node's pods read this host's files (a hostPath data volume would be
    # refused for a multi-pod job: on a cluster, gs:// or a ReadOnlyMany claim).
    data["files"]["pattern"] = str(shared / "data" / "train-*.txt")
    data["validation"]["pattern"] = str(shared / "data" / valid[0].name)
    # On the process node every pod is a process of this host: an absolute path is one
    # directory for all of them (on a cluster: checkpoint.storage, or a RWX volume).
    doc["spec"]["checkpoint"] = {
        "uri": str(shared / "ckpt"),
        "everySteps": 200,
        "keep": 2,
    }
    # 625 steps go by in seconds: with the default 10 s restart back-off the job could end
    # before the killed worker comes back. What is tested here is that a kill loses nothing;
    # the back-off has its own tests (policies/test_backoff, test_runner_backoff).
    doc["spec"].setdefault("runPolicy", {})["restartBackoff"] = {"initialSeconds": 1}
    # 40 epochs (1250 steps), so a kill at step 150 is well before the end on any machine.
    doc["spec"]["training"]["epochs"] = 40
    return doc


def test_criteo_job_survives_a_killed_worker_and_reports_held_out_auc(
    crds: LocalCluster,
    namespace: str,
    node: Path,
    operator: OperatorProcess,
    shared_dir: Path,
):
    crds.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(_job(shared_dir)))

    def step() -> int:
        return int((job_status(crds, namespace, NAME).get("progress") or {}).get("step") or 0)

    wait_for(lambda: step() >= 150, 300, "training to pass step 150", every=1)
    old = kill_replica(crds, namespace, f"{NAME}-worker-1")
    wait_for(
        lambda: (
            (p := live_pods(crds, namespace).get(f"{NAME}-worker-1"))
            and p["metadata"]["uid"] != old
        ),
        120,
        "worker-1 replaced",
    )
    wait_for(
        lambda: job_status(crds, namespace, NAME).get("phase") == "Succeeded",
        600,
        "Succeeded",
        every=1,
    )
    st = job_status(crds, namespace, NAME)
    assert st["replicaStatuses"]["worker"]["restarts"] == 1
    ev = st["evaluation"]
    # 40 epochs of 8000 records at 256 a step: 1250 steps; the last evaluation is of the end.
    assert ev["step"] == st["progress"]["step"] >= 1250
    assert ev["examples"] == 2000 and ev["auc"] > 0.6 and ev["logloss"] < 0.69
    table = crds.kubectl("get", "etj", NAME, "-n", namespace).stdout
    assert "AUC" in table.splitlines()[0]
