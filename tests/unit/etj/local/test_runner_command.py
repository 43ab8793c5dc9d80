"""`etj run` with a template's command: what the local process runs (no process started)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from etj.cli.convert import convert_tfjob
from etj.core.validation import validate_manifest
from etj.local.runner import LocalRunner
from tests.unit.conftest import ROOT

CASES = ROOT / "tests" / "cases" / "tfjob"


def _runner(manifest: dict, workdir: Path) -> LocalRunner:
    result = validate_manifest(manifest)
    assert result.ok, result.problems
    return LocalRunner(result.job, result.plan, workdir, python="/opt/py/bin/python")


def _pod(runner: LocalRunner, role: str) -> dict:
    from etj.core.render import build_pod

    return build_pod(runner.job, runner.plan, role, 0, runner.settings, runner._address)


def test_template_command_runs_with_this_interpreter(tmp_path: Path, monkeypatch):
    monkeypatch.chdir(ROOT)
    manifest = yaml.safe_load((ROOT / "examples" / "own-program.yaml").read_text())
    runner = _runner(manifest, tmp_path / "run")
    pod = _pod(runner, "worker")
    command = runner._command(pod)
    # python is the run's interpreter; the relative script is found from where etj runs
    assert command == ["/opt/py/bin/python", str(ROOT / "examples" / "own-program" / "train.py")]
    dirs = runner._volume_dirs(pod)
    assert dirs["scratch"] == str((tmp_path / "run" / "volumes" / "scratch").resolve())
    assert os.path.isdir(dirs["scratch"])


def test_default_command_is_the_trainer(tmp_path: Path):
    manifest = yaml.safe_load((ROOT / "examples" / "quickstart.yaml").read_text())
    runner = _runner(manifest, tmp_path / "run")
    assert runner._command(_pod(runner, "chief")) == ["/opt/py/bin/python", "-m", "etj_trainer"]


def test_an_image_entrypoint_cannot_run_locally(tmp_path: Path):
    # The MWMS TFJob's container has args only: its image's entrypoint is the program.
    manifest = convert_tfjob(yaml.safe_load((CASES / "mwms.yaml").read_text()))
    with pytest.raises(ValueError, match="mwms-resnet-worker-0: the container has no command"):
        _runner(manifest, tmp_path / "run")


def test_etj_run_says_so_and_starts_nothing(tmp_path: Path):
    path = tmp_path / "job.yaml"
    path.write_text(
        yaml.safe_dump(convert_tfjob(yaml.safe_load((CASES / "mwms.yaml").read_text())))
    )
    out = subprocess.run(
        [
            str(Path(sys.executable).parent / "etj"),
            "run",
            str(path),
            "--workdir",
            str(tmp_path / "w"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2
    assert "the container has no command" in out.stderr
    assert not (tmp_path / "w" / "logs").exists() or not any((tmp_path / "w" / "logs").iterdir())


@pytest.mark.parametrize(
    ("checkpoint", "directory"),
    [
        ({"storage": {"size": "1Gi"}}, None),
        ({"uri": "/mnt/shared/ckpt"}, None),
        ({"uri": "gs://bucket/etj"}, "gs://bucket/etj/local/quickstart"),
    ],
)
def test_etj_run_keeps_checkpoints_in_its_work_directory_unless_they_go_to_a_bucket(
    quickstart: dict, tmp_path: Path, checkpoint: dict, directory: str | None
):
    """One host shares the run's work directory: a claim or a cluster's shared path stand
    for it (a fresh run starts afresh, --resume resumes); gs:// is gs:// anywhere."""
    import json

    quickstart["spec"]["checkpoint"] = checkpoint
    _runner(quickstart, tmp_path / "run")
    config = json.loads((tmp_path / "run" / "config" / "trainer.json").read_text())
    expected = directory or str((tmp_path / "run" / "checkpoints" / "quickstart").resolve())
    assert config["checkpoint"]["directory"] == expected
