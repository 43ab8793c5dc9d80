"""ParameterServer training on a real cluster (chief + 2 workers + 2 ps on 127.0.0.1),
and what it survives.

One job runs through the module; each test leaves it training, so the scenarios run in
order on the same processes: plain training and placement, a worker killed and restarted,
the chief killed (resume from the last checkpoint, slots as saved), SIGTERM (checkpoint,
exit 143), a hung worker (the watchdog ends the chief with the retryable code), and a ps
killed (the chief exits retryable; ps and chief restarted resume and finish with no step
lost).
"""

from __future__ import annotations

import re
import signal
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from harness import LocalJob, job_spec, read_events, trainer_config, wait_for

from etj_trainer import exitcodes

EVERY = 500
WATCHDOG = 20


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Any:
    workdir = tmp_path_factory.mktemp("ps-job")
    # Far more steps than the scenarios need; the last one lowers the total to finish.
    spec = job_spec(
        training={
            "batchSizePerReplica": 256,
            "steps": 1_000_000,
            "optimizer": "adagrad",
            "learningRate": 0.1,
            "stepsPerExecution": 10,
        }
    )
    config = trainer_config(
        spec,
        checkpoint_dir=workdir / "ckpt",
        every_steps=EVERY,
        keep=40,
        export_dir=workdir / "export",
        watchdog_seconds=WATCHDOG,
    )
    j = LocalJob(config, workdir, workers=2, ps=2)
    try:
        yield j.start_all()
    finally:
        j.close()


def _losses(events: list[dict[str, Any]]) -> list[float]:
    return [e["loss"] for e in events if e["event"] == "progress" and "loss" in e]


def _checkpoint_steps(job: LocalJob) -> list[int]:
    return [e["step"] for e in job.events() if e["event"] == "checkpoint"]


def _wait_checkpoint_after(job: LocalJob, step: int, timeout: float = 120) -> int:
    def found() -> int:
        job.check_chief_alive()
        return max([s for s in _checkpoint_steps(job) if s > step], default=0)

    return int(wait_for(found, timeout, f"a checkpoint after step {step}"))


def _restart_chief(job: LocalJob) -> dict[str, Any]:
    job.start("chief", 0)
    return dict(wait_for(lambda: job.last("restored"), 120, "the chief to restore"))


def _assert_restored_as_saved(restored: dict[str, Any]) -> None:
    """Every variable — tables, slots, dense — equals what the checkpoint file holds."""
    import tensorflow as tf

    reader = tf.train.load_checkpoint(restored["path"])
    assert restored["step"] == int(reader.get_tensor("step/.ATTRIBUTES/VARIABLE_VALUE"))
    digest = restored["digest"]
    assert any(k.startswith("slots/tables/") for k in digest)
    for key, value in digest.items():
        saved = reader.get_tensor(f"{key}/.ATTRIBUTES/VARIABLE_VALUE").astype(np.float64).sum()
        assert value == pytest.approx(saved, rel=1e-6, abs=1e-6), key


def test_trains_and_loss_falls(job: LocalJob) -> None:
    job.wait_step(1500, timeout=240)
    losses = _losses(job.events())
    assert losses[-1] < losses[0] - 0.04, f"loss did not fall: {losses[0]} -> {losses[-1]}"
    placed = {e["table"]: e for e in job.events() if e["event"] == "placement"}
    for t in job.config.shard_plan.tables:
        got = [int(re.search(r"task:(\d+)", d).group(1)) for d in placed[t.name]["devices"]]  # type: ignore[union-attr]
        assert got == t.ps_of_shard
    assert any(t.shards > 1 for t in job.config.shard_plan.tables)


def test_metrics_endpoint(job: LocalJob) -> None:
    text = (
        urllib.request.urlopen(f"http://127.0.0.1:{job.metrics_port}/metrics", timeout=10)
        .read()
        .decode()
    )
    values = {
        m.group(1): float(m.group(2))
        for m in re.finditer(r"^(etj_trainer_\w+) ([-+.\deE]+|NaN)$", text, re.M)
    }
    for name in (
        "step",
        "examples_per_second",
        "loss",
        "auc",
        "last_checkpoint_step",
        "restarts_seen",
    ):
        assert f"etj_trainer_{name}" in values, name
    assert values["etj_trainer_step"] > 0 and values["etj_trainer_examples_per_second"] > 0
    assert 0.5 < values["etj_trainer_auc"] <= 1.0


def test_worker_killed_training_continues_and_it_rejoins(job: LocalJob) -> None:
    job.kill("worker", 1, signal.SIGKILL)
    at_kill = job.step()
    job.wait_step(at_kill + 600, timeout=120)  # one worker keeps training
    job.start("worker", 1)
    chief_log = job.log_path("chief", 0)
    wait_for(
        lambda: "has been recovered" in chief_log.read_text(errors="replace"),
        120,
        "the coordinator to take the worker back",
    )
    job.wait_step(job.step() + 600, timeout=120)
    job.check_chief_alive()


def test_chief_killed_resumes_from_last_checkpoint(job: LocalJob) -> None:
    before = _losses(job.events())
    saved = _wait_checkpoint_after(job, job.step())
    job.kill("chief", 0, signal.SIGKILL)
    restored = _restart_chief(job)
    assert restored["step"] >= saved and restored["step"] % EVERY == 0
    _assert_restored_as_saved(restored)
    job.wait_step(restored["step"] + 300, timeout=120)
    after = _losses(job.events())
    # Training continues from the trained state, not from scratch.
    assert after[0] < before[0] - 0.03, (before[0], after[0])
    assert job.last("start")["restoredFrom"] == restored["step"]


def test_sigterm_checkpoints_and_exits_143(job: LocalJob) -> None:
    job.wait_step(job.step() + 100, timeout=120)
    job.kill("chief", 0, signal.SIGTERM)
    assert job.wait_exit("chief", 0, timeout=60) == exitcodes.TERMINATED
    events = job.events()
    last_ckpt = [e for e in events if e["event"] == "checkpoint"][-1]
    terminated = [e for e in events if e["event"] == "terminated"][-1]
    assert last_ckpt["step"] == terminated["step"], "checkpoint written at the stop step"
    restored = _restart_chief(job)
    assert restored["step"] == terminated["step"]
    job.wait_step(restored["step"] + 100, timeout=120)


def test_hung_worker_trips_the_watchdog(job: LocalJob) -> None:
    job.kill("worker", 0, signal.SIGSTOP)
    try:
        code = job.wait_exit("chief", 0, timeout=WATCHDOG + 90)
        assert code == exitcodes.RETRYABLE
        errors = [e for e in job.events() if e["event"] == "error"]
        assert errors and errors[-1]["reason"] == "WatchdogTimeout"
    finally:
        job.kill("worker", 0, signal.SIGCONT)
    restored = _restart_chief(job)
    job.wait_step(restored["step"] + 200, timeout=120)


def test_ps_killed_chief_exits_retryable_then_resumes_and_finishes(job: LocalJob) -> None:
    _wait_checkpoint_after(job, job.step())
    job.kill("ps", 0, signal.SIGKILL)
    assert job.wait_exit("chief", 0, timeout=60) == exitcodes.RETRYABLE
    job.start("ps", 0)
    latest = max(_checkpoint_steps(job))
    # Finish 2 checkpoint intervals after the last one.
    total = latest + 2 * EVERY
    job.set_config(
        job.config.model_copy(
            update={"training": job.config.training.model_copy(update={"steps": total})}
        )
    )
    restored = _restart_chief(job)
    assert restored["step"] == latest
    _assert_restored_as_saved(restored)
    done = job.wait_done(timeout=180)
    assert done["step"] == total, "every scheduled step ran exactly once"
    export = Path(job.config.export_dir or "")
    assert (export / "tables.json").exists()
    restarts = [
        e.get("restartsSeen")
        for e in read_events(job.log_path("chief", 0))
        if e["event"] == "progress"
    ]
    assert restarts and restarts[-1] >= 4


def test_evaluator_scores_the_final_checkpoint(job: LocalJob) -> None:
    """The evaluator (outside the cluster) restores the sharded checkpoint unsharded."""
    job.env["ETJ_EVAL_POLL_SECONDS"] = "1"
    job.start("evaluator", 0)
    code = job.wait_exit("evaluator", 0, timeout=120)
    events = job.events("evaluator", 0)
    assert code == 0, job.log_tail("evaluator", 0)
    final = [e for e in events if e["event"] == "evaluation"][-1]
    assert final["step"] == job.config.training.steps
    assert final["loss"] < 0.66 and final["auc"] > 0.65
