"""`etj run` and spec.warmStart: a second job warm-starts from the first one's checkpoints
in its work directory (fromJob: into two ps with a table added, the restored table equal
to the checkpoint's) or from a directory (checkpoint.uri, one process); and from a
``gs://`` location (TensorFlow's own GCS filesystem against fake-gcs-server on loopback,
etj_testcluster.fake_gcs) into more ps with a table added: the restored tables equal the
source checkpoint's, the decisions are the job's Event and status.warmStart, the source's
objects are left as they were. (What etj run cannot resolve: tests/unit/etj/local/.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from etj_testcluster import fake_gcs

pytestmark = [pytest.mark.trainer, pytest.mark.slow]


def _job(name: str, warm_start: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "strategy": "MultiWorkerMirrored",
        "replicas": {"worker": {"replicas": 1}},
        "model": {
            "embeddings": [{"name": "user_id", "vocabularySize": 500, "dimension": 4}],
            "denseFeatures": 2,
            "hiddenUnits": [8],
        },
        "training": {"steps": 30, "batchSizePerReplica": 64},
        "checkpoint": {"everySteps": 30},
    }
    if warm_start is not None:
        spec["warmStart"] = warm_start
    return {
        "apiVersion": "training.etj.dev/v1alpha1",
        "kind": "EmbeddingTrainingJob",
        "metadata": {"name": name},
        "spec": spec,
    }


def _run(
    tmp_path: Path, job: dict[str, Any], env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    path = tmp_path / f"{job['metadata']['name']}.yaml"
    path.write_text(yaml.safe_dump(job))
    return subprocess.run(
        [
            str(Path(sys.executable).parent / "etj"),
            "run",
            str(path),
            "--workdir",
            str(tmp_path / "runs" / job["metadata"]["name"]),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env={**(env or os.environ), "COLUMNS": "200"},
    )


def _events(log: Path, name: str) -> list[dict[str, Any]]:
    out = []
    for line in log.read_text().splitlines():
        if line.startswith("{") and f'"event": "{name}"' in line:
            out.append(json.loads(line))
    return out


def test_from_job_and_from_a_directory(tmp_path: Path):
    first = _run(tmp_path, _job("day-1"))
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    saved = tmp_path / "runs" / "day-1" / "checkpoints" / "day-1"
    assert (saved / "ckpt-30.index").exists()

    # Day 2, from day 1 by name, grew: two ps (day 1 ran in one process) and a table added.
    grown = _job("day-2", {"fromJob": "day-1"})
    grown["spec"]["strategy"] = "ParameterServer"
    grown["spec"]["replicas"] = {"worker": {"replicas": 1}, "ps": {"replicas": 2}}
    grown["spec"]["model"]["embeddings"].append(
        {"name": "item_id", "vocabularySize": 300, "dimension": 4}
    )
    second = _run(tmp_path, grown)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert f"WarmStart: from job day-1 (etj run's work directory): {saved}" in second.stdout
    log = tmp_path / "runs" / "day-2" / "logs" / "day-2-chief-0.log"
    assert (log.parent / "day-2-ps-1.log").is_file()
    (warm,) = _events(log, "warmStarted")
    assert warm["path"] == str(saved / "ckpt-30") and warm["sourceStep"] == 30
    assert [(t["name"], t["action"]) for t in warm["tables"]] == [
        ("user_id", "Restored"),
        ("item_id", "StartedFresh"),
    ]
    assert warm["tower"].startswith("partly restored (its inputs changed)"), warm["tower"]
    # The restored table and its Adagrad slot equal day 1's checkpoint.
    (restored,) = _events(log, "restored")
    assert restored["warmStart"] is True and restored["step"] == 0
    keys = ["model/tables/0", "slots/tables/user_id/accumulator"]
    want = _sums(dict(os.environ), str(saved / "ckpt-30"), keys)
    for key in keys:
        got = restored["digest"][key]
        assert abs(got - want[key]) <= 1e-6 + 1e-6 * abs(want[key]), (key, got, want[key])
    # The summary shows the trainer's decisions, read back from its log into the status.
    summary = second.stdout[second.stdout.index("Summary") :]
    assert "warm start" in summary and "job day-1 (etj run's work directory) at step" in summary
    assert "table user_id" in summary and "Restored" in summary
    assert "table item_id" in summary and "StartedFresh (not in the checkpoint)" in summary

    third = _run(tmp_path, _job("day-3", {"checkpoint": {"uri": str(saved / "ckpt-30")}}))
    assert third.returncode == 0, third.stdout[-3000:] + third.stderr[-3000:]
    assert "SourceResolved" in third.stdout
    log = tmp_path / "runs" / "day-3" / "logs" / "day-3-worker-0.log"
    (warm,) = _events(log, "warmStarted")
    assert warm["path"] == str(saved / "ckpt-30")


GCS_SOURCE = "chain/local/day-1"  # etj run's namespace is "local"
TABLES = [
    {"name": "user_id", "vocabularySize": 20000, "dimension": 8},
    {"name": "item_id", "vocabularySize": 5000, "dimension": 8, "idsPerExample": 2},
]


def _ps_job(name: str, ps: int, tables: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "training.etj.dev/v1alpha1",
        "kind": "EmbeddingTrainingJob",
        "metadata": {"name": name},
        "spec": {
            "strategy": "ParameterServer",
            "replicas": {"worker": {"replicas": 1}, "ps": {"replicas": ps}},
            "model": {"embeddings": tables, "denseFeatures": 4, "hiddenUnits": [16]},
            "training": {"batchSizePerReplica": 64, "steps": 40, "stepsPerExecution": 10},
            "checkpoint": {"uri": f"gs://{fake_gcs.BUCKET}/chain", "everySteps": 40},
            **spec,
        },
    }


# The sums of a checkpoint's tensors, read from gs:// in a child process (TensorFlow's GCS
# filesystem reads its environment once).
SUMS = """
import json, sys
import numpy as np
import tensorflow as tf
reader = tf.train.load_checkpoint(sys.argv[1])
print("SUMS " + json.dumps({k: float(np.asarray(reader.get_tensor(
    k + "/.ATTRIBUTES/VARIABLE_VALUE"), np.float64).sum()) for k in sys.argv[2:]}))
"""


def _sums(env: dict[str, str], path: str, keys: list[str]) -> dict[str, float]:
    proc = subprocess.run(
        [sys.executable, "-c", SUMS, path, *keys],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("SUMS ")]
    assert line, f"reading {path} failed (rc {proc.returncode}):\n{proc.stderr[-3000:]}"
    return dict(json.loads(line[0][len("SUMS ") :]))


@pytest.fixture()
def gcs(tmp_path: Path) -> Any:
    reason = fake_gcs.missing()
    if reason:
        pytest.skip(reason)
    with fake_gcs.serve(tmp_path / "gcs") as served:
        yield served


@pytest.mark.extended  # make test-all; CI has the warm start from a job and a directory (above), and TensorFlow's checkpoints on fake-gcs-server (tests/e2e/test_fake_gcs.py)
def test_from_a_gs_location_into_more_ps_with_a_table_added(tmp_path: Path, gcs: Any):
    first = _run(tmp_path, _ps_job("day-1", 1, TABLES), gcs.env)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    source = gcs.objects(GCS_SOURCE + "/")
    assert f"{GCS_SOURCE}/ckpt-40.index" in source, sorted(source)

    location = f"gs://{fake_gcs.BUCKET}/{GCS_SOURCE}"
    added = [*TABLES, {"name": "ad_id", "vocabularySize": 500, "dimension": 4}]
    # Two ps (day 1 had one) and smaller shards: every table laid out another way.
    day_2 = _ps_job(
        "day-2",
        2,
        added,
        sharding={"maxShardBytes": "256Ki"},
        warmStart={"checkpoint": {"uri": location}},
    )
    second = _run(tmp_path, day_2, gcs.env)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    logs = tmp_path / "runs" / "day-2" / "logs"
    assert (logs / "day-2-ps-1.log").is_file()
    (warm,) = _events(logs / "day-2-chief-0.log", "warmStarted")
    assert warm["path"] == f"{location}/ckpt-40" and warm["sourceStep"] == 40
    assert [(t["name"], t["action"]) for t in warm["tables"]] == [
        ("user_id", "Restored"),
        ("item_id", "Restored"),
        ("ad_id", "StartedFresh"),
    ]
    (restored,) = _events(logs / "day-2-chief-0.log", "restored")
    assert restored["warmStart"] is True and restored["step"] == 0
    keys = ["model/tables/0", "model/tables/1", "slots/tables/user_id/accumulator"]
    saved = _sums(gcs.env, restored["path"], keys)
    for key in keys:
        got, want = restored["digest"][key], saved[key]
        assert abs(got - want) <= 1e-6 + 1e-6 * abs(want), (key, got, want)
    # The decisions: the job's Event (etj run prints each) and status.warmStart (its
    # summary), a line per table.
    out = second.stdout
    assert f"CheckpointRead: warm start from {location} at step 40: {location}" in out
    assert "(2 tables restored, 1 started fresh, 0 dropped)" in out
    assert "table ad_id: started fresh (not in the checkpoint)" in out
    summary = out[out.index("Summary") :]
    assert f"{location} at step 40" in summary
    assert "StartedFresh (not in the checkpoint)" in summary
    # Day 2 checkpointed beside day 1, and wrote nothing of day 1's.
    assert "chain/local/day-2/ckpt-40.index" in gcs.objects("chain/local/day-2/")
    assert gcs.objects(GCS_SOURCE + "/") == source, "day 2 must not write day 1's objects"
    assert gcs.proxy.tunnels and not gcs.proxy.refused, gcs.proxy.refused
