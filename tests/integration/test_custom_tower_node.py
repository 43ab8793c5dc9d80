"""A job's own tower, its code in a ConfigMap, on the local cluster's process-backed node:
`kubectl apply` the ConfigMap and the job -> the operator mounts the ConfigMap into every
replica -> the node lays its files out and the trainer imports the tower from them ->
ParameterServer training -> the chief is killed -> the new chief restores every variable,
the tower's included -> the job Succeeds and exports the trained tower."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from etj_testcluster import LocalCluster

from .conftest import ROOT, wait_for
from .operator_helpers import OperatorProcess, job_status
from .test_e2e_local import kill_replica

# make test-all; CI trains and exports the custom tower example under etj run
# (tests/local/test_custom_tower_run.py), restores a tower from a checkpoint
# (tests/trainer/test_model_custom.py) and mounts ConfigMaps in the render tests.
pytestmark = [pytest.mark.integration, pytest.mark.trainer, pytest.mark.slow, pytest.mark.extended]

EXAMPLE = ROOT / "examples" / "custom-tower"
NAME = "ct"
PARAMETERS = {"units": [16, 8], "seed": 3}
STEPS = 1000


def _manifests(checkpoints: Path) -> list[dict[str, Any]]:
    """The example's job (smaller, faster) and its ConfigMap of code, as in the example."""
    job, config_map = yaml.safe_load_all((EXAMPLE / "job.yaml").read_text())
    job["metadata"]["name"] = NAME
    spec = job["spec"]
    spec["replicas"] = {"worker": {"replicas": 1}, "ps": {"replicas": 1}}
    spec["model"]["embeddings"] = [
        {"name": "user_id", "vocabularySize": 20000, "dimension": 8},
        {"name": "item_id", "vocabularySize": 5000, "dimension": 8, "idsPerExample": 2},
    ]
    spec["model"]["denseFeatures"] = 4
    spec["model"]["custom"]["parameters"] = PARAMETERS
    spec["training"] = {
        "batchSizePerReplica": 128,
        "steps": STEPS,
        "stepsPerExecution": 10,
        "optimizer": "adagrad",
        "learningRate": 0.05,
    }
    # On the process node every pod is a process of this host: an absolute path is one
    # directory for all of them (on a cluster: checkpoint.storage, or a RWX volume).
    spec["checkpoint"] = {
        "uri": str(checkpoints),
        "everySteps": 100,
        "keep": 3,
    }
    return [config_map, job]


def _events(log: Path, event: str) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    docs = [json.loads(x) for x in log.read_text().splitlines() if x.startswith("{")]
    return [d for d in docs if d.get("event") == event]


def _local_tower(checkpoint: str | None = None) -> Any:
    """The example tower built here (the same factory, the same parameters): its initial
    values, or those of ``checkpoint``'s model/tower (matched by path, as etj saved it)."""
    import sys

    import tensorflow as tf

    sys.path.insert(0, str(EXAMPLE))
    try:
        from ctr_tower import build_tower
    finally:
        sys.path.remove(str(EXAMPLE))
    tower = build_tower(dict(PARAMETERS))
    embeddings = {
        "user_id": tf.random.stateless_normal([5, 8], seed=(1, 1)),
        "item_id": tf.random.stateless_normal([5, 8], seed=(1, 2)),
    }
    dense = tf.random.stateless_normal([5, 4], seed=(1, 3))
    tower(embeddings, dense, False)  # builds the variables
    if checkpoint is not None:
        holder = tf.Module()
        holder.tower = tower
        tf.train.Checkpoint(model=holder).read(
            checkpoint
        ).expect_partial().assert_existing_objects_matched()
    return tower, embeddings, dense


def test_custom_tower_from_a_config_map_survives_a_chief_kill_and_exports(
    crds: LocalCluster, namespace: str, node: Path, operator: OperatorProcess, shared_dir: Path
):
    started = time.monotonic()
    phases: dict[str, float] = {}
    checkpoints = shared_dir / "ckpt"
    crds.kubectl(
        "apply", "-n", namespace, "-f", "-", input=yaml.safe_dump_all(_manifests(checkpoints))
    )
    directory = checkpoints / namespace / NAME  # <uri>/<namespace>/<job>
    log = node / "logs" / namespace / f"{NAME}-chief-0.log"

    def checkpointed() -> int:
        # The CheckpointManager's index file (TensorFlow is not loaded here yet: it is slow).
        index = directory / "checkpoint"
        text = index.read_text() if index.exists() else ""
        match = re.search(r'^model_checkpoint_path: ".*-(\d+)"', text, re.M)
        return int(match.group(1)) if match else 0

    # The first chief imported the tower from the ConfigMap (the node wrote its file) and
    # trained it to a checkpoint.
    wait_for(checkpointed, 120, "a first checkpoint", every=0.5)
    code = list((node / "pods").glob("*/volumes/model-code/ctr_tower.py"))
    assert code and code[0].read_text() == (EXAMPLE / "ctr_tower.py").read_text()
    phases["first checkpoint"] = time.monotonic() - started
    kill_replica(crds, namespace, f"{NAME}-chief-0")

    restored = wait_for(
        lambda: _events(log, "restored"), 120, "the new chief to restore", every=0.5
    )
    assert restored[-1]["step"] > 0
    phases["restored"] = time.monotonic() - started
    import tensorflow as tf

    # The new chief restored the tower's variables: their sums are those of a trained
    # tower, not of a fresh one (the same factory and seed).
    digest = restored[-1]["digest"]
    tower_keys = [k for k in digest if k.startswith("model/tower/")]
    assert any("gate" in k for k in tower_keys), sorted(digest)
    fresh, embeddings, dense = _local_tower()
    initial = {v.name: float(tf.reduce_sum(tf.cast(v, tf.float64))) for v in fresh.variables}
    assert sorted(digest[k] for k in tower_keys) != pytest.approx(sorted(initial.values()))

    wait_for(
        lambda: job_status(crds, namespace, NAME).get("phase") in ("Succeeded", "Failed"),
        240,
        "the job to finish",
        every=0.5,
    )
    phases["finished"] = time.monotonic() - started
    status = job_status(crds, namespace, NAME)
    assert status["phase"] == "Succeeded", status
    assert status["restarts"] >= 1 and status["progress"]["step"] == STEPS

    # The final checkpoint holds the tower's variables, trained away from their initial
    # values; the export's tower computes with exactly those values.
    final = tf.train.latest_checkpoint(str(directory))
    assert final.endswith(f"-{STEPS}")
    trained, _, _ = _local_tower(final)
    for before, after in zip(fresh.variables, trained.variables, strict=True):
        assert not np.allclose(before.numpy(), after.numpy()), before.name
    serve = tf.saved_model.load(str(directory / "export" / "tower")).signatures["serving_default"]
    served = serve(user_id=embeddings["user_id"], item_id=embeddings["item_id"], dense=dense)
    want = tf.sigmoid(trained(embeddings, dense, False)).numpy()
    np.testing.assert_allclose(served["probability"].numpy(), want, rtol=1e-5, atol=1e-6)
    phases["checked"] = time.monotonic() - started
    print("custom tower on the process-backed node:", {k: round(v, 1) for k, v in phases.items()})
