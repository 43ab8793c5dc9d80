"""`etj run`: the quickstart-like job trains with real TensorFlow processes, survives a
killed worker, and leaves no process behind."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from etj.local.launch import processes_under

ROOT = Path(__file__).resolve().parents[4]
pytestmark = [pytest.mark.trainer, pytest.mark.slow]


def test_run_survives_a_killed_worker_and_cleans_up(tmp_path: Path):
    job = copy.deepcopy(yaml.safe_load((ROOT / "examples" / "quickstart.yaml").read_text()))
    job["spec"]["training"]["steps"] = 6000
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    workdir = tmp_path / "run"
    out = subprocess.run(
        [
            str(Path(sys.executable).parent / "etj"),
            "run",
            str(path),
            "--workdir",
            str(workdir),
            "--kill-worker-at",
            "600",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    text = out.stdout
    assert "killed quickstart-worker-1" in text
    assert "Restarting: quickstart-worker-1 failed with exit code 137" in text
    assert "JobSucceeded" in text
    summary = text[text.index("Summary") :]
    assert "Succeeded" in summary and "6000" in summary
    assert processes_under(workdir) == []
