"""`etj run` of examples/custom-tower/job.yaml: the job and the ConfigMap with its tower's
code in one file (as kubectl apply -f takes them) train, checkpoint and export with no
cluster; a job whose ConfigMap is missing is refused naming it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from etj.local.launch import processes_under

ROOT = Path(__file__).resolve().parents[4]
EXAMPLE = ROOT / "examples" / "custom-tower"


def _docs() -> list[dict]:
    return list(yaml.safe_load_all((EXAMPLE / "job.yaml").read_text()))


def _etj_run(path: Path, workdir: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(Path(sys.executable).parent / "etj"), "run", str(path), "--workdir", str(workdir)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "COLUMNS": "200", "ETJ_PROGRESS_SECONDS": "1"},
    )


def test_the_example_s_config_map_holds_the_example_tower():
    job, config_map = _docs()
    assert job["spec"]["model"]["custom"]["configMap"] == config_map["metadata"]["name"]
    module = job["spec"]["model"]["custom"]["module"]
    assert config_map["data"][f"{module}.py"] == (EXAMPLE / f"{module}.py").read_text()


def test_a_missing_config_map_is_refused_by_name(tmp_path: Path):
    job, _ = _docs()
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    out = _etj_run(path, tmp_path / "run", timeout=120)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "ConfigMap ctr-tower-code" in out.stderr and "job file does not hold" in out.stderr
    assert not (tmp_path / "run" / "logs").exists() or not any(
        (tmp_path / "run" / "logs").iterdir()
    )


@pytest.mark.trainer
@pytest.mark.slow
def test_etj_run_trains_and_exports_the_example(tmp_path: Path):
    job, config_map = _docs()
    spec = job["spec"]
    spec["replicas"]["worker"]["replicas"] = 1
    spec["training"].update({"steps": 60, "stepsPerExecution": 10})
    spec["checkpoint"]["everySteps"] = 30
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump_all([job, config_map]))
    workdir = tmp_path / "run"
    out = _etj_run(path, workdir, timeout=400)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    summary = out.stdout[out.stdout.index("Summary") :]
    assert "Succeeded" in summary and "60" in summary
    # The chief imported the tower from the ConfigMap's files, laid out in the work dir.
    assert (workdir / "configmaps" / "ctr-tower-code" / "ctr_tower.py").read_text() == (
        EXAMPLE / "ctr_tower.py"
    ).read_text()
    export = workdir / "checkpoints" / "custom-tower" / "export"
    assert (export / "tower" / "saved_model.pb").is_file()
    assert json.loads((export / "tables.json").read_text())["step"] == 60
    # The tower's variables are in the last checkpoint (the gated MLP's dense layers).
    import tensorflow as tf

    latest = tf.train.latest_checkpoint(str(workdir / "checkpoints" / "custom-tower"))
    names = [n for n, _ in tf.train.list_variables(latest)]
    assert any(n.startswith("model/tower/gate/kernel") for n in names), names
    assert processes_under(workdir) == []
