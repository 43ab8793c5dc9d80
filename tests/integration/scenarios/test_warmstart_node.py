"""A daily chain's warm start end to end without Docker: `kubectl apply` day 1 -> the
operator and the process-backed node train it -> day 2, found by label (the newest
Succeeded job of the selector), warm-starts from day 1's final checkpoint with a second
ps and a table added -> both Succeed. Day 2's restored tables equal day 1's checkpoint
(the chief's digest against the checkpoint file), its status and Event say what was
restored and what started fresh, and day 1's checkpoints are left as they were."""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from etj_testcluster import LocalCluster
from tests.integration.conftest import wait_for
from tests.integration.operator_helpers import OperatorProcess, events, job_status

pytestmark = [pytest.mark.integration, pytest.mark.trainer, pytest.mark.slow]

CHAIN = {"chain": "ctr"}
TABLES = [
    {"name": "user_id", "vocabularySize": 20000, "dimension": 8},
    {"name": "item_id", "vocabularySize": 5000, "dimension": 8, "idsPerExample": 2},
]


def job(name: str, shared: Path, ps: int, tables: list[dict[str, Any]], **spec: Any) -> Any:
    return {
        "apiVersion": "training.etj.dev/v1alpha1",
        "kind": "EmbeddingTrainingJob",
        "metadata": {"name": name, "labels": CHAIN},
        "spec": {
            "strategy": "ParameterServer",
            "replicas": {"worker": {"replicas": 1}, "ps": {"replicas": ps}},
            "model": {"embeddings": copy.deepcopy(tables), "denseFeatures": 4, "hiddenUnits": [16]},
            "training": {"batchSizePerReplica": 128, "steps": 200, "stepsPerExecution": 20},
            # One directory for every pod of this host (on a cluster: checkpoint.storage).
            "checkpoint": {"uri": str(shared / "ckpt"), "everySteps": 100},
            **spec,
        },
    }


def succeeded(cluster: LocalCluster, namespace: str, name: str) -> dict[str, Any]:
    wait_for(
        lambda: job_status(cluster, namespace, name).get("phase") in ("Succeeded", "Failed"),
        480,
        f"{name} to finish",
        every=2,
    )
    status = job_status(cluster, namespace, name)
    assert status["phase"] == "Succeeded", status
    return status


def files(directory: Path) -> dict[str, str]:
    return {
        str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.rglob("*"))
        if p.is_file() and "tensorboard" not in p.parts
    }


# make test-all (2.4 min): CI has the daily chain on the node, which covers its path
# (test_daily_chain_node: the same label lookup, third ps and new table, from the operator's
# pinned location to the trainer's restore); the restored digests are checked in
# tests/trainer/etj_trainer/task/test_warmstart.py.
@pytest.mark.extended
def test_day_two_warm_starts_from_day_one_found_by_label(
    crds: LocalCluster, namespace: str, node: Path, operator: OperatorProcess, shared_dir: Path
):
    import numpy as np
    import tensorflow as tf

    def apply(doc: dict[str, Any]) -> None:
        crds.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(doc))

    apply(job("day-1", shared_dir, 1, TABLES))
    succeeded(crds, namespace, "day-1")
    source = shared_dir / "ckpt" / namespace / "day-1"
    before = files(source)

    added = [*TABLES, {"name": "ad_id", "vocabularySize": 500, "dimension": 4}]
    apply(job("day-2", shared_dir, 2, added, warmStart={"selector": {"matchLabels": CHAIN}}))
    status = succeeded(crds, namespace, "day-2")
    ws = status["warmStart"]
    assert ws["sourceJob"] == "day-1" and ws["step"] == 200
    assert [(t["name"], t["action"]) for t in ws["tables"]] == [
        ("user_id", "Restored"),
        ("item_id", "Restored"),
        ("ad_id", "StartedFresh"),
    ]
    said = [e["message"] for e in events(crds, namespace) if e["reason"] == "SourceResolved"]
    assert said and "table ad_id: started fresh (not in the checkpoint)" in said[0]

    log = node / "logs" / namespace / "day-2-chief-0.log"
    lines = [json.loads(x) for x in log.read_text().splitlines() if x.startswith("{")]
    restored = next(e for e in lines if e.get("event") == "restored")
    assert restored["warmStart"] is True and restored["step"] == 0
    assert restored["path"] == str(source / "ckpt-200")
    reader = tf.train.load_checkpoint(restored["path"])
    for key in ("model/tables/0", "model/tables/1", "slots/tables/user_id/accumulator"):
        saved = reader.get_tensor(f"{key}/.ATTRIBUTES/VARIABLE_VALUE").astype(np.float64).sum()
        assert abs(restored["digest"][key] - saved) <= 1e-6 + 1e-6 * abs(saved), key
    assert files(source) == before, "day 2 must not write day 1's checkpoints"
