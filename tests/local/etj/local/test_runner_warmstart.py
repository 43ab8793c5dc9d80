"""`etj run` and spec.warmStart: a second job warm-starts from the first one's checkpoints
in its work directory (fromJob) or from a directory (checkpoint.uri), with one process
each (a single worker). (What etj run cannot resolve: tests/unit/etj/local/.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

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


def _run(tmp_path: Path, job: dict[str, Any]) -> subprocess.CompletedProcess[str]:
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
        env={**os.environ, "COLUMNS": "200"},
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

    second = _run(tmp_path, _job("day-2", {"fromJob": "day-1"}))
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert f"WarmStart: from job day-1 (etj run's work directory): {saved}" in second.stdout
    log = tmp_path / "runs" / "day-2" / "logs" / "day-2-worker-0.log"
    (warm,) = _events(log, "warmStarted")
    assert warm["path"] == str(saved / "ckpt-30") and warm["sourceStep"] == 30
    assert [t["action"] for t in warm["tables"]] == ["Restored"]
    assert warm["tower"].startswith("restored")
    # The summary shows the trainer's decisions, read back from its log into the status.
    summary = second.stdout[second.stdout.index("Summary") :]
    assert "warm start" in summary and "job day-1 (etj run's work directory) at step" in summary
    assert "table user_id" in summary and "Restored" in summary

    third = _run(tmp_path, _job("day-3", {"checkpoint": {"uri": str(saved / "ckpt-30")}}))
    assert third.returncode == 0, third.stdout[-3000:] + third.stderr[-3000:]
    assert "SourceResolved" in third.stdout
    log = tmp_path / "runs" / "day-3" / "logs" / "day-3-worker-0.log"
    (warm,) = _events(log, "warmStarted")
    assert warm["path"] == str(saved / "ckpt-30")
