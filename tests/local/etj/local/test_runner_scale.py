"""`etj run --scale-workers STEP:N`: the worker count of a running ParameterServer job
changes as under `kubectl scale` (the same decisions): the chief checkpoints as it stops,
restarts with the new cluster and restores exactly that step, no restart is counted, and
the job Succeeds with every step trained."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from etj.local.launch import processes_under

pytestmark = [pytest.mark.trainer, pytest.mark.slow]

# Long enough that the runner's scale (it acts on the chief's next progress line after
# step 200, then the chief finishes its round) lands before the last step: at 600 a quiet
# machine trained to the end first (~150 steps/s) and the chief was never stopped.
STEPS = 3000
JOB = {
    "apiVersion": "training.etj.dev/v1alpha1",
    "kind": "EmbeddingTrainingJob",
    "metadata": {"name": "grow"},
    "spec": {
        "strategy": "ParameterServer",
        "replicas": {"worker": {"replicas": 1}, "ps": {"replicas": 1}},
        "model": {
            "embeddings": [{"name": "user_id", "vocabularySize": 5000, "dimension": 8}],
            "denseFeatures": 4,
            "hiddenUnits": [16],
        },
        "training": {
            "batchSizePerReplica": 128,
            "steps": STEPS,
            "stepsPerExecution": 10,
            "optimizer": "sgd",
            "learningRate": 0.1,
        },
        "checkpoint": {"everySteps": 100, "keep": 3},
        "runPolicy": {"backoffLimit": 0},
    },
}


def events(log: Path, kind: str) -> list[dict]:
    docs = [json.loads(x) for x in log.read_text().splitlines() if x.startswith('{"')]
    return [d for d in docs if d.get("event") == kind]


def test_run_scales_workers_without_losing_a_step(tmp_path: Path):
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(JOB))
    workdir = tmp_path / "run"
    out = subprocess.run(
        [
            str(Path(sys.executable).parent / "etj"),
            "run",
            str(path),
            "--workdir",
            str(workdir),
            "--scale-workers",
            "200:2",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        # Progress every half second: the runner sees step 200 soon after it is passed.
        env={**os.environ, "COLUMNS": "200", "ETJ_PROGRESS_SECONDS": "0.5"},
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    text = out.stdout
    assert "scaled to 2 workers" in text
    assert "Scaled: workers 1 -> 2" in text
    assert "JobSucceeded" in text
    chief = workdir / "logs" / "grow-chief-0.log"
    stopped, restored = events(chief, "terminated"), events(chief, "restored")
    assert len(stopped) == 1 and len(restored) == 1
    assert STEPS > restored[0]["step"] == stopped[0]["step"] >= 200
    assert len(events(chief, "connecting")[-1]["cluster"]["worker"]) == 2
    assert (workdir / "logs" / "grow-worker-1.log").exists()  # the added worker ran
    summary = text[text.index("Summary") :]
    assert "Succeeded" in summary and str(STEPS) in summary
    restarts = re.search(r"restarts\W+(\d+)", summary)
    assert restarts and restarts.group(1) == "0"
    assert processes_under(workdir) == []
