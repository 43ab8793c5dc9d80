"""TFJob's own shape under `etj run`: Kubeflow's dist-mnist TFJob (PS x2 + Worker x4, no
Chief) converted by `etj convert`, with its program swapped for a local stand-in
(tests/cases/tfjob/between_graph.py: TF1-style between-graph replication), runs to the end.
Worker 0 is the chief: TF_CONFIG has no chief entry, worker 0 alone initialises the model
and reports progress (the SDK's leader rule agrees), its exit 0 succeeds the job and the ps
are stopped. Under successPolicy AllWorkers the job waits for every worker."""

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
TFJOB = ROOT / "tests" / "cases" / "tfjob" / "dist-mnist.yaml"
PROGRAM = "tests/cases/tfjob/between_graph.py"
ETJ = str(Path(sys.executable).parent / "etj")
STEPS = 300
pytestmark = [pytest.mark.trainer, pytest.mark.slow]


def converted(success_policy: str | None = None) -> dict:
    """dist-mnist.yaml through `etj convert`, each replica running the local stand-in."""
    tfjob = yaml.safe_load(TFJOB.read_text())
    if success_policy is not None:
        tfjob["spec"]["successPolicy"] = success_policy
    out = subprocess.run(
        [ETJ, "convert", "-"], input=yaml.safe_dump(tfjob), capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    job = yaml.safe_load(out.stdout)
    for role in ("worker", "ps"):
        container = job["spec"]["replicas"][role]["template"]["spec"]["containers"][0]
        assert container["command"] == ["python", "/var/tf_dist_mnist/dist_mnist.py"]
        container["command"] = ["python", PROGRAM]  # the image's program, here
        container["args"] = [f"--train_steps={STEPS}", "--batch_size=16"]
    return job


def etj_run(job: dict, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    return subprocess.run(
        [ETJ, "run", str(path), "--workdir", str(tmp_path / "run")],
        capture_output=True,
        text=True,
        timeout=400,
        cwd=ROOT,  # the command names the program relative to the repository
        env={**os.environ, "COLUMNS": "200", "ETJ_PROGRESS_SECONDS": "0.5"},
    )


def events(logs: Path, event: str) -> dict[str, dict]:
    """Each task's ``{"event": <event>, "task": ...}`` line, by task."""
    out = {}
    for log in sorted(logs.glob("*.log")):
        for line in log.read_text(errors="replace").splitlines():
            if line.startswith("{") and f'"{event}"' in line:
                doc = json.loads(line)
                out[doc["task"]] = doc
    return out


def test_dist_mnist_without_chief_runs_to_the_end_with_worker_0_as_chief(tmp_path: Path):
    job = converted()
    assert job["spec"]["replicas"]["chief"] == {"replicas": 0}
    out = etj_run(job, tmp_path)
    logs = tmp_path / "run" / "logs"
    tail = (logs / "dist-mnist-worker-0.log").read_text(errors="replace")[-3000:]
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:] + tail
    assert "ParameterServer, 4 workers+2 ps" in out.stdout
    assert "JobSucceeded: worker 0 (the chief: the job has none) finished; parameter" in out.stdout
    summary = out.stdout[out.stdout.index("Summary") :]
    assert "Succeeded" in summary
    roles = events(logs, "role")
    assert sorted(roles) == ["ps-0", "ps-1", "worker-0", "worker-1", "worker-2", "worker-3"]
    for task, doc in roles.items():
        # TF_CONFIG as TFJob writes it for this shape: no chief entry.
        assert (doc["cluster"], doc["workers"], doc["ps"]) == (["ps", "worker"], 4, 2), doc
        # The program's own rule and the SDK's (etj's leader rule) name the same task.
        assert doc["is_chief"] == doc["sdk_leader"] == (task == "worker-0"), doc
    # Worker 0 trained to the last step on variables held by the two ps; its exit 0 ended
    # the job and etj stopped the ps (which never exit by themselves) and the rest.
    assert events(logs, "trained")["worker-0"]["steps"] >= 1
    steps = [
        json.loads(line)["step"]
        for line in (logs / "dist-mnist-worker-0.log").read_text().splitlines()
        if line.startswith('{"event": "progress"')
    ]
    # (The other workers joined in once the model was ready: worker 0's last global step
    # may be a few short of STEPS; the AllWorkers test below counts every worker's steps.)
    assert steps == sorted(steps) and steps[-1] > STEPS // 2, steps
    assert processes_under(tmp_path / "run") == []


# CI's budget: the same policy on the real API server is in make test
# (tests/integration/scenarios/test_tfjob_shapes_node.py::test_all_workers_success_policy_...).
@pytest.mark.extended
def test_all_workers_success_policy_waits_for_every_worker(tmp_path: Path):
    out = etj_run(converted("AllWorkers"), tmp_path)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "JobSucceeded: all 4 workers finished; parameter servers stopped" in out.stdout
    # Every worker ran its session to the shared last step and exited 0 by itself.
    trained = events(tmp_path / "run" / "logs", "trained")
    assert sorted(trained) == [f"worker-{i}" for i in range(4)]
    # Between-graph replication: each run of any worker moved the one global step on the
    # ps by one, up to STEPS (each worker's last run, or a late one's only run, may go one
    # past it).
    total = sum(doc["steps"] for doc in trained.values())
    assert STEPS <= total <= STEPS + 4, trained
    assert processes_under(tmp_path / "run") == []
