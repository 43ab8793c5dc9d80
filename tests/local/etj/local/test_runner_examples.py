"""The click-log examples (Criteo, Avazu, MovieLens layouts) train to completion with
`etj run` on files generated in their layouts: the loss falls and the held-out AUC in the
summary is well above 0.5."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from etj.api.architectures import Architecture
from etj.local.launch import processes_under
from etj_trainer.data.clicklogs import write_train_and_validation

ROOT = Path(__file__).resolve().parents[4]
pytestmark = [pytest.mark.trainer, pytest.mark.slow]


def _events(log: Path, event: str) -> list[dict]:
    out = []
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith("{") and f'"{event}"' in line:
            doc = json.loads(line)
            if doc.get("event") == event:
                out.append(doc)
    return out


RUN_TIMEOUT = 1800
# Each test's pytest timeout is above its etj run's, which says more when it fires.
pytestmark = pytest.mark.timeout(RUN_TIMEOUT + 300)


def _etj_run(job: Path, workdir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(Path(sys.executable).parent / "etj"), "run", str(job), "--workdir", str(workdir)],
        capture_output=True,
        text=True,
        # A net for a hang, not a stopwatch: the criteo example's 20 epochs took more than
        # 600 s at a load of ~30 (cold CI, its builds beside the lanes); the tests that run
        # an example have a pytest timeout above this.
        timeout=RUN_TIMEOUT,
        # A progress line every second (default 10): "the loss falls" needs at least two,
        # however fast or slow this machine trains the example.
        env={**os.environ, "COLUMNS": "300", "ETJ_PROGRESS_SECONDS": "1"},
    )


def _succeeds(job: dict, tmp_path: Path, workdir: Path) -> str:
    """``etj run`` of ``job`` (written to tmp_path) in ``workdir``: it must succeed; its
    summary table."""
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    out = _etj_run(path, workdir)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    summary = out.stdout[out.stdout.index("Summary") :]
    assert "Succeeded" in summary
    return summary


def _held_out_auc(summary: str) -> float:
    match = re.search(r"held-out AUC\s*│\s*([0-9.]+)", summary)
    assert match, summary
    return float(match.group(1))


@pytest.mark.parametrize(
    # make test-all: avazu, movielens; CI trains criteo (the MovieLens layout: test_runner_quoted_data)
    "layout",
    [
        "criteo",
        pytest.param("avazu", marks=pytest.mark.extended),
        pytest.param("movielens", marks=pytest.mark.extended),
    ],
)
def test_example_trains_on_its_layout(tmp_path: Path, layout: str):
    data = tmp_path / "data"
    train, valid = write_train_and_validation(layout, data, files=2, rows_per_file=4000)
    job = yaml.safe_load((ROOT / "examples" / f"{layout}.yaml").read_text())
    files = job["spec"]["data"]
    files["files"]["pattern"] = str(data / f"train-*{train[0].suffix}")
    files["validation"]["pattern"] = str(valid[0])
    # Fewer evaluations than the example makes: two, the last one on the final step.
    files["validation"]["maxExamples"] = 2000
    job["spec"]["checkpoint"]["everySteps"] = 400
    workdir = tmp_path / "run"
    summary = _succeeds(job, tmp_path, workdir)
    auc = _held_out_auc(summary)
    assert auc > 0.62, summary
    log = workdir / "logs" / f"{job['metadata']['name']}-chief-0.log"
    losses = [e["loss"] for e in _events(log, "progress") if e.get("loss") is not None]
    assert losses and losses[-1] < losses[0], losses
    evaluations = _events(log, "evaluation")
    assert evaluations[-1]["examples"] == 2000 and evaluations[-1]["auc"] == pytest.approx(
        auc, abs=1e-4
    )
    assert processes_under(workdir) == []


def _criteo_examples() -> dict[str, str]:
    """Architecture -> its Criteo example (examples/criteo-*.yaml, by the architecture it
    names): a registered architecture's example is found, not listed here."""
    found = {}
    for path in sorted((ROOT / "examples").glob("criteo-*.yaml")):
        doc = yaml.safe_load(path.read_text())
        if isinstance(doc, dict) and doc.get("kind") == "EmbeddingTrainingJob":
            found[doc["spec"]["model"].get("architecture", Architecture.DNN.value)] = path.stem
    return found


# examples/criteo.yaml (dnn, the default) trains above; each other architecture has its
# own Criteo example, criteo.yaml with only the architecture changed.
_EXAMPLES = _criteo_examples()
CRITEO_ARCHITECTURES = {a.value: _EXAMPLES.get(a.value, "") for a in Architecture}
del CRITEO_ARCHITECTURES[Architecture.DNN.value]
STEPS = 200


@pytest.mark.extended  # make test-all; CI trains criteo.yaml (dnn) and every architecture in test_serving_model
@pytest.mark.parametrize("architecture", list(CRITEO_ARCHITECTURES))
def test_each_architecture_trains_on_the_criteo_layout(tmp_path: Path, architecture: str):
    """The architecture's Criteo example, shortened to one trainer process (a 1-worker
    MultiWorkerMirrored job: no ps, no coordinator), 200 steps on one generated file:
    it succeeds and its held-out AUC, evaluated once on the final step, is well above 0.5
    (the strategies are tested per architecture in tests/trainer/etj_trainer/models/test_<architecture>.py)."""
    example = CRITEO_ARCHITECTURES[architecture]
    assert example, f"examples/ has no criteo-*.yaml with architecture {architecture}"
    data = tmp_path / "data"
    (train,), (valid,) = write_train_and_validation(
        "criteo", data, files=1, rows_per_file=8000, validation_rows=2000
    )
    job = yaml.safe_load((ROOT / "examples" / f"{example}.yaml").read_text())
    spec = job["spec"]
    assert spec["model"]["architecture"] == architecture
    spec["strategy"] = "MultiWorkerMirrored"
    spec["replicas"] = {"worker": {"replicas": 1}}
    spec["data"]["files"]["pattern"] = str(train)
    spec["data"]["validation"]["pattern"] = str(valid)
    del spec["training"]["epochs"]
    # One step per chunk: the trainer then traces and compiles one copy of the step, not
    # ten (most of this test's time; the updates are the same).
    spec["training"] |= {"steps": STEPS, "stepsPerExecution": 1}
    spec["checkpoint"]["everySteps"] = STEPS
    workdir = tmp_path / "run"
    summary = _succeeds(job, tmp_path, workdir)
    log = workdir / "logs" / f"{job['metadata']['name']}-worker-0.log"
    (evaluation,) = _events(log, "evaluation")
    assert evaluation["step"] == STEPS and evaluation["examples"] == 2000
    assert evaluation["auc"] > 0.62, evaluation
    auc = _held_out_auc(summary)
    assert auc == pytest.approx(evaluation["auc"], abs=1e-4)
    assert processes_under(workdir) == []


@pytest.mark.extended  # make test-all; CI reads Parquet in tests/trainer/etj_trainer/data/test_parquet.py and runs MultiWorkerMirrored in test_mwms
def test_parquet_example_trains(tmp_path: Path):
    """examples/movielens-parquet.yaml (MultiWorkerMirrored, 2 workers) on the MovieLens
    layout written as Parquet (genres a list column): it succeeds and learns."""
    from etj_trainer.data.clicklogs import PARQUET_LISTS, to_parquet

    data = tmp_path / "data"
    train, valid = write_train_and_validation("movielens", data, files=2, rows_per_file=4000)
    train = [to_parquet(p, ",", PARQUET_LISTS["movielens"]) for p in train]
    valid = [to_parquet(p, ",", PARQUET_LISTS["movielens"]) for p in valid]
    job = yaml.safe_load((ROOT / "examples" / "movielens-parquet.yaml").read_text())
    job["spec"]["data"]["files"]["pattern"] = str(data / "train-*.parquet")
    job["spec"]["data"]["validation"] |= {"pattern": str(valid[0]), "maxExamples": 2000}
    job["spec"]["checkpoint"]["everySteps"] = 400
    workdir = tmp_path / "run"
    summary = _succeeds(job, tmp_path, workdir)
    auc = _held_out_auc(summary)
    assert auc > 0.62, summary
    assert processes_under(workdir) == []


@pytest.mark.extended  # make test-all; CI stops on a bad line with file and line in the trainer (data/test_delimited.py, test_delimited_quoting.py) and fails a job on its data error on the real API server (scenarios/test_data_errors.py)
def test_a_bad_line_fails_the_job_with_file_and_line(tmp_path: Path):
    """The chief's termination message and the job's message name the file and line; the
    job fails at once (a DataError is permanent: no restart can fix the data)."""
    (train,), _ = write_train_and_validation("criteo", tmp_path, 1, 300, 10)
    with train.open("a") as f:
        f.write("1\t2\t3\n")
    job = yaml.safe_load((ROOT / "examples" / "criteo.yaml").read_text())
    job["metadata"]["name"] = "bad"
    job["spec"]["data"]["files"]["pattern"] = str(train)
    del job["spec"]["data"]["validation"]
    job["spec"]["training"] = {"batchSizePerReplica": 64, "steps": 200}
    job["spec"]["runPolicy"] = {"restartPolicy": "ExitCode"}
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    workdir = tmp_path / "run"
    out = _etj_run(path, workdir)
    assert out.returncode == 1, out.stdout[-3000:] + out.stderr[-3000:]
    where = f"{train}:301: expected 40 fields, found 3"
    message = (workdir / "logs" / "bad-chief-0.log.termination").read_text()
    assert message == f"DataError: {where}"
    assert f"DataError: {where}" in " ".join(out.stdout.split())
    assert "Traceback" not in (workdir / "logs" / "bad-chief-0.log").read_text()
    assert processes_under(workdir) == []
