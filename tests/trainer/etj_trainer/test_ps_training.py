"""ParameterServer training on a real cluster (chief + 2 workers + 2 ps on 127.0.0.1),
and what it survives.

One test, one job: the scenarios are named stages run in order on the same processes, each
from the state the one before leaves: plain training and placement, the metrics page, a
worker killed and restarted, the chief killed (resume from the last checkpoint, slots as
saved), SIGTERM (checkpoint, exit 143), a ps killed (the chief exits retryable; ps and chief
restarted resume and finish with no step lost), the evaluator scoring the final checkpoint,
and a hung worker (the watchdog ends the chief with the retryable code and says so; every
replica restarted resumes). A failure names its stage. One test, not one per scenario:
each scenario needs the state the one before leaves, and a job of its own would retrain
from scratch for each (several times this file's ~170 s).

Restarts follow the operator's rules (``etj.core.reconcile.policies.restart``): a new chief
comes with new workers, and a chief stopped by its watchdog means some worker or ps is hung,
so every replica restarts from the last checkpoint.
"""

from __future__ import annotations

import re
import signal
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from harness import (
    LocalJob,
    adagrad_training,
    assert_restored_as_saved,
    job_spec,
    read_events,
    trainer_config,
    wait_for,
)

from etj_trainer import exitcodes

EVERY = 500
# Short, so that the hung worker's stage is quick; not shorter: a new chief's first chunk
# runs on workers just started (the operator's rule), which first build the chunk's
# function: ~20 s at a load of 8 on two cores.
WATCHDOG = 60
# The hang net of a new chief's restore and first steps: its tracing and its new workers'
# start share two cores with whatever else runs (minutes at a load of 40).
RESUMED = 600


@pytest.fixture
def job(tmp_path: Path) -> Any:
    # Far more steps than the scenarios need; the last one lowers the total to finish.
    spec = job_spec(training=adagrad_training(1_000_000, 256))
    config = trainer_config(
        spec,
        checkpoint_dir=tmp_path / "ckpt",
        every_steps=EVERY,
        keep=40,
        export_dir=tmp_path / "export",
        watchdog_seconds=WATCHDOG,
    )
    j = LocalJob(config, tmp_path, workers=2, ps=2)
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
    """A new chief, with new workers: the operator's rule (a worker still in a chunk of
    the chief before can hold the new chief's first chunk)."""
    job.restart_workers()
    job.start("chief", 0)

    def restored() -> dict[str, Any] | None:
        # The chief waits for every ps: one that exited fails the wait now, with its log.
        job.check_chief_alive()
        job.check_running("ps")
        return job.last("restored")

    return dict(wait_for(restored, RESUMED, "the chief to restore"))


def _watchdog_stopped(job: LocalJob) -> bool:
    error = job.last("error")
    return error is not None and error["reason"] == "WatchdogTimeout"


def _finish_as_the_operator_would(job: LocalJob, timeout: float) -> tuple[dict[str, Any], int]:
    """Wait for the chief to finish. When its watchdog stops it instead, restart every
    replica, as the operator does, and wait again. The done event, and how many times
    that was needed."""
    escalations = 0
    while True:
        try:
            return job.wait_done(timeout=timeout), escalations
        except AssertionError:
            if not _watchdog_stopped(job) or escalations:
                raise
        escalations += 1
        print(f"watchdog stopped the chief; restarting every replica:\n{job.peer_tails()}")
        job.restart_all()


def trains_and_loss_falls(job: LocalJob) -> None:
    job.wait_step(1500, timeout=240)
    losses = _losses(job.events())
    assert losses[-1] < losses[0] - 0.04, f"loss did not fall: {losses[0]} -> {losses[-1]}"
    placed = {e["table"]: e for e in job.events() if e["event"] == "placement"}
    for t in job.config.shard_plan.tables:
        got = [int(re.search(r"task:(\d+)", d).group(1)) for d in placed[t.name]["devices"]]  # type: ignore[union-attr]
        assert got == t.ps_of_shard
    assert any(t.shards > 1 for t in job.config.shard_plan.tables)


def metrics_endpoint(job: LocalJob) -> None:
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


def worker_killed_training_continues_and_it_rejoins(job: LocalJob) -> None:
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
    # No step lost: at every join the step counter on the ps is at least the steps
    # scheduled, so each checkpoint since the kill is on its boundary or, when a chunk of
    # the killed worker was run again elsewhere (closures run at least once), whole chunks
    # past it, and the chief said so. A lost chunk would land it short of the boundary.
    _wait_checkpoint_after(job, job.step())
    since = [s for s in _checkpoint_steps(job) if s > at_kill]
    assert len(since) >= 2, since
    spe, inflight = job.config.steps_per_execution, 2 * 2 + 2
    reruns = [e for e in job.events() if e["event"] == "rerun"]
    for s in since:
        over = s % EVERY
        assert over % spe == 0 and over <= inflight * spe, since
        if over:
            assert any(e["step"] == s for e in reruns), (s, reruns)


def chief_killed_resumes_from_last_checkpoint(job: LocalJob) -> None:
    before = _losses(job.events())
    saved = _wait_checkpoint_after(job, job.step())
    job.kill("chief", 0, signal.SIGKILL)
    restored = _restart_chief(job)
    assert restored["step"] >= saved and restored["step"] % EVERY == 0
    assert_restored_as_saved(restored)
    job.wait_step(restored["step"] + 300, timeout=RESUMED)
    after = _losses(job.events())
    # Training continues from the trained state, not from scratch.
    assert after[0] < before[0] - 0.03, (before[0], after[0])
    assert job.last("start")["restoredFrom"] == restored["step"]


def sigterm_checkpoints_and_exits_143(job: LocalJob) -> None:
    job.wait_step(job.step() + 100, timeout=120)
    job.kill("chief", 0, signal.SIGTERM)
    assert job.wait_exit("chief", 0, timeout=120) == exitcodes.TERMINATED
    events = job.events()
    last_ckpt = [e for e in events if e["event"] == "checkpoint"][-1]
    terminated = [e for e in events if e["event"] == "terminated"][-1]
    assert last_ckpt["step"] == terminated["step"], "checkpoint written at the stop step"
    restored = _restart_chief(job)
    assert restored["step"] == terminated["step"]
    job.wait_step(restored["step"] + 100, timeout=RESUMED)


def ps_killed_chief_exits_retryable_then_resumes_and_finishes(job: LocalJob) -> None:
    _wait_checkpoint_after(job, job.step())
    job.kill("ps", 0, signal.SIGKILL)
    assert job.wait_exit("chief", 0, timeout=120) == exitcodes.RETRYABLE
    job.start("ps", 0)
    latest = max(_checkpoint_steps(job))
    # Finish 2 checkpoint intervals after the last one.
    total = latest + 2 * EVERY
    job.set_steps(total)
    restored = _restart_chief(job)
    assert restored["step"] == latest
    assert_restored_as_saved(restored)
    done, escalations = _finish_as_the_operator_would(job, timeout=RESUMED)
    assert done["step"] == total, "every scheduled step ran exactly once"
    export = Path(job.config.export_dir or "")
    assert (export / "tables.json").exists()
    restarts = [
        e.get("restartsSeen")
        for e in read_events(job.log_path("chief", 0))
        if e["event"] == "progress"
    ]
    # Restarted so far: after the chief kill, the SIGTERM and the ps kill (and the
    # operator's whole-job restart, if a hung replica needed one).
    assert restarts and restarts[-1] == 3 + escalations


def evaluator_scores_the_final_checkpoint(job: LocalJob) -> None:
    """The evaluator (outside the cluster) restores the sharded checkpoint unsharded."""
    job.env["ETJ_EVAL_POLL_SECONDS"] = "1"
    job.start("evaluator", 0)
    code = job.wait_exit("evaluator", 0, timeout=120)
    events = job.events("evaluator", 0)
    assert code == 0, job.log_tail("evaluator", 0)
    final = [e for e in events if e["event"] == "evaluation"][-1]
    assert final["step"] == job.config.training.steps
    assert final["logloss"] < 0.66 and final["auc"] > 0.65


def hung_worker_trips_the_watchdog_and_a_whole_restart_resumes(job: LocalJob) -> None:
    total = job.config.training.steps + 100_000
    job.set_steps(total)
    restored = _restart_chief(job)
    job.wait_step(restored["step"] + 200, timeout=RESUMED)
    job.kill("worker", 0, signal.SIGSTOP)
    try:
        code = job.wait_exit("chief", 0, timeout=WATCHDOG + 90)
        assert code == exitcodes.RETRYABLE
        assert _watchdog_stopped(job)
        # Where it was stuck: the stacks the supervisor asked for before the kill.
        assert "most recent call first" in job.log_tail("chief", 0, 100_000)
    finally:
        job.kill("worker", 0, signal.SIGCONT)
    # The operator's rule for a WatchdogTimeout: every replica restarts.
    latest = max(e["step"] for e in job.all_events() if e["event"] == "checkpoint")
    job.restart_all()
    restored = dict(wait_for(lambda: job.last("restored"), RESUMED, "the chief to restore"))
    assert restored["step"] == latest
    assert_restored_as_saved(restored)
    job.wait_step(restored["step"] + 200, timeout=RESUMED)


# In this order: each stage starts from what the one before left (the ps kill finishes the
# job, the evaluator scores that end, the hung worker restarts every process).
STAGES = (
    trains_and_loss_falls,
    metrics_endpoint,
    worker_killed_training_continues_and_it_rejoins,
    chief_killed_resumes_from_last_checkpoint,
    sigterm_checkpoints_and_exits_143,
    ps_killed_chief_exits_retryable_then_resumes_and_finishes,
    evaluator_scores_the_final_checkpoint,
    hung_worker_trips_the_watchdog_and_a_whole_restart_resumes,
)


# A hang net over pytest's 900 s: at a load of 27 on two cores the stages took ~950 s (a
# new chief comes with new workers, each restart a few processes' start-up).
@pytest.mark.timeout(1800)
def test_a_ps_job_trains_and_survives_each_failure_in_turn(job: LocalJob) -> None:
    done: list[str] = []
    for stage in STAGES:
        started = time.monotonic()
        try:
            stage(job)
        except BaseException as e:
            e.add_note(f"in stage {stage.__name__}, after: {', '.join(done) or 'none'}")
            raise
        print(f"stage {stage.__name__}: {time.monotonic() - started:.0f} s")
        done.append(stage.__name__)
