"""Serving versions and TensorBoard end to end without Docker: `kubectl apply` a job with
``spec.export`` and ``spec.tensorboard`` -> the operator and the process-backed node train
it -> the leader writes numbered versions beside its checkpoints while it trains, keeps the
newest ``keep``, writes the last one at the end -> the job Succeeds with ``status.export``
naming the newest version, its step and the base path TF Serving would watch; its
summaries are under the tensorboard uri, per namespace and job."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from etj.api.export import version_of
from etj_testcluster import LocalCluster
from tests.integration.conftest import wait_for
from tests.integration.operator_helpers import OperatorProcess, job_status

pytestmark = [pytest.mark.integration, pytest.mark.trainer, pytest.mark.slow]

NAME, STEPS, KEEP = "versions", 600, 2


def _job(shared: Path) -> dict[str, Any]:
    return {
        "apiVersion": "training.etj.dev/v1alpha1",
        "kind": "EmbeddingTrainingJob",
        "metadata": {"name": NAME},
        "spec": {
            "strategy": "ParameterServer",
            "replicas": {"worker": {"replicas": 1}, "ps": {"replicas": 1}},
            "model": {
                "embeddings": [
                    {"name": "user_id", "vocabularySize": 20000, "dimension": 8},
                    {"name": "item_id", "vocabularySize": 5000, "dimension": 8},
                ],
                "denseFeatures": 4,
                "hiddenUnits": [16],
            },
            "training": {"batchSizePerReplica": 128, "steps": STEPS, "stepsPerExecution": 20},
            # One directory for every pod of this host (on a cluster: checkpoint.storage).
            "checkpoint": {"uri": str(shared / "ckpt"), "everySteps": 300},
            "export": {"everySteps": 150, "keep": KEEP},
            "tensorboard": {"uri": str(shared / "tensorboard")},
        },
    }


def test_versions_while_training_and_status_export(
    crds: LocalCluster, namespace: str, node: Path, operator: OperatorProcess, shared_dir: Path
):
    import tensorflow as tf

    crds.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(_job(shared_dir)))
    wait_for(
        lambda: job_status(crds, namespace, NAME).get("phase") in ("Succeeded", "Failed"),
        480,
        f"{NAME} to finish",
        every=2,
    )
    status = job_status(crds, namespace, NAME)
    assert status["phase"] == "Succeeded", status

    base = shared_dir / "ckpt" / namespace / NAME / "serving"
    on_disk = sorted(v for p in base.iterdir() if (v := version_of(p.name)) is not None)
    assert len(on_disk) == KEEP
    assert [p.name for p in base.iterdir() if version_of(p.name) is None] == []
    export = status["export"]
    assert export["location"] == str(base)
    assert export["lastVersion"] == on_disk[-1] and export["step"] == STEPS
    assert (base / str(on_disk[-1]) / "saved_model.pb").is_file()

    log = node / "logs" / namespace / f"{NAME}-chief-0.log"
    lines = [json.loads(x) for x in log.read_text().splitlines() if x.startswith("{")]
    exported = [e for e in lines if e.get("event") == "exported"]
    assert [e["lastVersion"] for e in exported][-KEEP:] == on_disk
    assert any(e["step"] < STEPS for e in exported), "no version while training"

    runs = shared_dir / "tensorboard" / namespace / NAME
    losses = [
        (event.step, value.tag)
        for path in sorted(runs.glob("events.out.tfevents.*"))
        for event in tf.compat.v1.train.summary_iterator(str(path))
        for value in event.summary.value
        if value.tag == "loss"
    ]
    assert losses and losses[-1][0] == STEPS
