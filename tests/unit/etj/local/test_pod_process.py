"""pod_process: a rendered Pod as a local process; progress_from_log reads the trainer's lines."""

from __future__ import annotations

import json

from etj.api import EmbeddingTrainingJob
from etj.core.planner import build_plan
from etj.core.render import RenderSettings, build_pod
from etj.local.pod_process import pod_process
from etj.local.runner import progress_from_log
from tests.unit.conftest import load_example


def test_pod_becomes_process_with_paths_mapped_and_loopback_peers():
    job = EmbeddingTrainingJob.from_manifest(load_example("quickstart.yaml"))
    plan = build_plan(job.spec)
    ports = {
        ("chief", 0): 30000,
        ("worker", 0): 30001,
        ("worker", 1): 30002,
        ("ps", 0): 30003,
        ("ps", 1): 30004,
    }
    pod = build_pod(
        job, plan, "worker", 1, RenderSettings(), lambda r, i: f"127.0.0.1:{ports[(r, i)]}"
    )
    spec = pod_process(
        pod,
        {"trainer-config": "/w/config", "checkpoints": "/w/ckpt"},
        command=["py", "-m", "etj_trainer"],
    )
    assert spec.name == "quickstart-worker-1" and (spec.role, spec.index) == ("worker", 1)
    assert spec.command == ["py", "-m", "etj_trainer"]
    assert spec.env["ETJ_TRAINER_CONFIG"] == "/w/config/trainer.json"
    assert spec.env["POD_NAME"] == "quickstart-worker-1"
    tf = json.loads(spec.env["TF_CONFIG"])
    assert tf["task"] == {"type": "worker", "index": 1}
    assert tf["cluster"]["ps"] == ["127.0.0.1:30003", "127.0.0.1:30004"]


def test_progress_from_log_takes_the_last_progress_line(tmp_path):
    log = tmp_path / "chief.log"
    lines = [
        "2026 INFO starting",
        json.dumps({"event": "progress", "step": 10, "loss": 0.7, "examplesPerSecond": 100.0}),
        "WARNING something",
        json.dumps({"event": "progress", "step": 20, "loss": 0.6, "lastCheckpointStep": 20}),
        "INFO done",
    ]
    log.write_text("\n".join(lines) + "\n")
    p = progress_from_log(log, "t")
    assert p is not None and p.step == 20 and p.loss == 0.6 and p.last_checkpoint_step == 20
    assert progress_from_log(tmp_path / "missing.log", "t") is None
