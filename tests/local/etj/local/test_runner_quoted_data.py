"""Real CSV with `etj run`: a MovieLens-1M-layout file with quoted titles (the clicklogs
tool's), its job written by `etj init --from-data`, trains to Succeeded with every row
read; a job whose declared columns are not in the header fails at once, with the
DataError's own file-and-line message and no restart, under ParameterServer and
MultiWorkerMirrored (the trainer alone, single-process, in tests/trainer/etj_trainer/test_data_errors)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from etj.local.launch import processes_under
from etj_trainer.data.clicklogs import write

pytestmark = [pytest.mark.trainer, pytest.mark.slow]
ETJ = str(Path(sys.executable).parent / "etj")
ROWS = 3000


def _etj(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [ETJ, *args],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "COLUMNS": "300"},
    )


def _inferred_job(tmp_path: Path) -> tuple[dict[str, Any], Path]:
    (data,) = write("movielens-1m", tmp_path / "data", 1, ROWS, prefix="ratings")
    out = tmp_path / "inferred.yaml"
    result = _etj("init", "--from-data", str(data), "--name", "movies", "-o", str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    return yaml.safe_load(out.read_text()), data


def _events(log: Path, event: str) -> list[dict[str, Any]]:
    return [
        doc
        for line in log.read_text(errors="replace").splitlines()
        if line.startswith("{") and (doc := json.loads(line)).get("event") == event
    ]


def test_quoted_titles_train_to_succeeded_with_every_row_read(tmp_path: Path):
    job, _ = _inferred_job(tmp_path)
    spec = job["spec"]
    features = {f["name"]: f for f in spec["model"]["features"]}
    assert features["gender"]["kind"] == "categorical" and "delimiter" not in features["gender"]
    assert "title" in features and spec["data"]["maxBadRecords"] == 0
    spec["strategy"] = "ParameterServer"
    spec["replicas"] = {"worker": {"replicas": 1}, "ps": {"replicas": 1}}
    spec["training"] |= {"batchSizePerReplica": 256, "epochs": 2}
    spec["model"]["hiddenUnits"] = [16]
    del spec["checkpoint"]
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    workdir = tmp_path / "run"
    out = _etj("run", str(path), "--workdir", str(workdir))
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "Succeeded" in out.stdout[out.stdout.index("Summary") :]
    (epochs,) = _events(workdir / "logs" / "movies-chief-0.log", "epochs")
    # Every row is read (a row cut into the wrong number of fields would have stopped
    # the job: maxBadRecords is 0).
    assert epochs["records"] == ROWS
    assert processes_under(workdir) == []


@pytest.mark.parametrize(
    "replicas",
    [
        pytest.param({"worker": {"replicas": 1}, "ps": {"replicas": 1}}, id="ParameterServer"),
        pytest.param({"worker": {"replicas": 2}}, id="MultiWorkerMirrored"),
    ],
)
def test_a_header_without_the_declared_columns_fails_the_job_at_once(
    tmp_path: Path, replicas: dict[str, Any]
):
    job, data = _inferred_job(tmp_path)
    spec = job["spec"]
    spec["strategy"] = "ParameterServer" if "ps" in replicas else "MultiWorkerMirrored"
    spec["replicas"] = replicas
    # Declared as another MovieLens copy names them: the file has user_id and movie_id.
    renames = {"user_id": "userId", "movie_id": "movieId"}
    for f in spec["model"]["features"]:
        f["name"] = renames.get(f["name"], f["name"])
    spec["runPolicy"] = {"restartPolicy": "OnFailure", "backoffLimit": 3}
    # Steps, not epochs: counting the records would meet the header first, on the chief,
    # outside any traced function; the files are first opened where the dataset function
    # is traced (under ParameterServer by the coordinator, for every worker).
    spec["training"] = {"batchSizePerReplica": 64, "steps": 20}
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    workdir = tmp_path / "run"
    out = _etj("run", str(path), "--workdir", str(workdir))
    text = " ".join(out.stdout.split())
    assert out.returncode == 1, out.stdout[-3000:] + out.stderr[-3000:]
    where = f"{data}:1: the header lacks the declared column(s) userId, movieId (it has: user_id,"
    assert f"DataError: {where}" in text, text[-3000:]
    assert "fix the data" in text
    assert "Restarting:" not in text and "backoffLimit" not in text
    first = "movies-chief-0" if "ps" in replicas else "movies-worker-0"
    message = (workdir / "logs" / f"{first}.log.termination").read_text()
    assert message.startswith(f"DataError: {where}")
    assert processes_under(workdir) == []
