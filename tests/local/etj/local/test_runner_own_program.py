"""`etj run` runs a user's own TensorFlow program (spec.replicas.<role>.template with its
command): examples/own-program.yaml, a program written the way TensorFlow's
ParameterServerStrategy tutorial writes one, gets TF_CONFIG and the shard plan,
its tables are split as planned, a worker killed mid-way is replaced, the job Succeeds
with the program's final step, and the ps (which never exit by themselves) are stopped."""

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
pytestmark = [pytest.mark.trainer, pytest.mark.slow]

STEPS = 4000
# Early, so the replaced worker is back well before the last step.
KILL_AT = 200


def own_program_job(steps: int = STEPS, *extra: str) -> dict:
    """examples/own-program.yaml: every role runs examples/own-program/train.py."""
    job = yaml.safe_load((ROOT / "examples" / "own-program.yaml").read_text())
    for role in ("chief", "worker", "ps"):
        container = job["spec"]["replicas"][role]["template"]["spec"]["containers"][0]
        container["args"] = ["--steps", str(steps), "--batch", "32", *extra]
    return job


def etj_run(job: dict, tmp_path: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    return subprocess.run(
        [
            str(Path(sys.executable).parent / "etj"),
            "run",
            str(path),
            "--workdir",
            str(tmp_path / "run"),
            *flags,
        ],
        capture_output=True,
        text=True,
        timeout=400,
        cwd=ROOT,  # the example's command names its program relative to the repository
        env={**os.environ, "COLUMNS": "200", "ETJ_PROGRESS_SECONDS": "0.5"},
    )


def _events(log: Path, event: str) -> list[dict]:
    out = []
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith("{") and f'"{event}"' in line:
            doc = json.loads(line)
            if doc.get("event") == event:
                out.append(doc)
    return out


@pytest.mark.extended  # make test-all (104 s in CI's warm run); CI kills an own program's worker on the real API server (scenarios/test_own_program_node.py) and a worker under etj run (test_runner.py)
def test_own_ps_program_survives_a_killed_worker(tmp_path: Path):
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(own_program_job()))
    plan = json.loads(
        subprocess.run(
            [str(Path(sys.executable).parent / "etj"), "plan", str(path), "--json"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    workdir = tmp_path / "run"
    out = subprocess.run(
        [
            str(Path(sys.executable).parent / "etj"),
            "run",
            str(path),
            "--workdir",
            str(workdir),
            "--kill-worker-at",
            str(KILL_AT),
        ],
        capture_output=True,
        text=True,
        timeout=540,
        cwd=ROOT,  # the example's command names its program relative to the repository
        env={**os.environ, "COLUMNS": "200", "ETJ_PROGRESS_SECONDS": "0.5"},
    )
    logs = workdir / "logs"
    chief_log = logs / "own-program-chief-0.log"
    tail = chief_log.read_text(errors="replace")[-3000:] if chief_log.exists() else ""
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:] + tail
    text = out.stdout
    assert "killed own-program-worker-1" in text
    assert "Restarting: own-program-worker-1 failed with exit code 137" in text
    assert "own-program-worker-1 restarted at step" in text
    # ... and back in training: alive and the step went on after its restart.
    assert "own-program-worker-1 is running again and training went on" in text
    assert "JobSucceeded" in text
    summary = text[text.index("Summary") :]
    assert "Succeeded" in summary and str(STEPS) in summary
    # The program's table was split as the plan says (the sdk partitioner).
    [table] = _events(chief_log, "table")
    assert table == {"event": "table", "name": "user_id", "shards": plan["tables"][0]["shards"]}
    assert table["shards"] > 1
    # The chief reported progress that went on past the kill, to the last step.
    steps = [e["step"] for e in _events(chief_log, "progress")]
    assert steps[-1] == STEPS and any(s > KILL_AT for s in steps[:-1])
    # The template's command, env and volume reached every replica; the killed worker's
    # replacement ran the same command again.
    scratch = workdir / "volumes" / "scratch"
    starts = {p.stem: len(p.read_text().split()) for p in scratch.glob("*.starts")}
    assert starts["worker-1"] == 2, starts
    assert starts["chief-0"] == starts["worker-0"] == starts["ps-0"] == starts["ps-1"] == 1
    # The ps serve until stopped: etj stopped them, nothing is left.
    assert processes_under(workdir) == []


@pytest.mark.extended  # make test-all (minutes; see the extended marker)
def test_own_program_resumes_from_its_checkpoint(tmp_path: Path):
    """The program checkpoints into etj's checkpoint directory (sdk.checkpoint_dir); run
    again with more steps (``--resume`` keeps the work directory), it restores its table
    shard by shard on the ps (sdk.restore_in_pieces) and goes on from there."""
    first = etj_run(own_program_job(400, "--checkpoint-every", "200"), tmp_path)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    chief_log = tmp_path / "run" / "logs" / "own-program-chief-0.log"
    assert [e["step"] for e in _events(chief_log, "checkpoint")] == [200, 400]
    assert _events(chief_log, "restored") == []
    second = etj_run(own_program_job(800, "--checkpoint-every", "200"), tmp_path, "--resume")
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert [e["step"] for e in _events(chief_log, "restored")] == [400]
    assert [e["step"] for e in _events(chief_log, "checkpoint")] == [200, 400, 600, 800]
    # After the restore, training went on from step 400, not from 0.
    lines = chief_log.read_text().splitlines()
    after = lines[next(i for i, x in enumerate(lines) if '"restored"' in x) :]
    steps = [json.loads(x)["step"] for x in after if x.startswith('{"') and '"progress"' in x]
    assert steps and steps[-1] == 800 and min(steps) > 400
    assert processes_under(tmp_path / "run") == []
