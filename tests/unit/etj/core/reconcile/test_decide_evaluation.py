"""status.evaluation: the chief's held-out evaluation reaches the job's status (from the
operator's scrape, or from the trainer's log under `etj run`) and outlives the chief."""

from __future__ import annotations

import json
from pathlib import Path

from etj.api.status import Evaluation, Progress
from etj.local.runner import evaluation_from_log, progress_from_log
from tests.unit.reconcile_helpers import all_pods, make_job, pod, run, with_status

EVAL = Evaluation(step=400, auc=0.81, logloss=0.45, examples=2000, update_time="t")


def test_the_last_evaluation_is_copied_into_status_and_kept():
    job = make_job()
    d = run(job, all_pods(job), progress=Progress(step=450), evaluation=EVAL)
    assert d.status is not None and d.status.evaluation == EVAL
    # A later pass without a scrape keeps it.
    d = run(with_status(job, d), all_pods(job))
    assert d.status is not None and d.status.evaluation == EVAL


def test_an_epochs_job_succeeds_with_the_trainers_step_count(tmp_path: Path):
    files = {"source": "files", "files": {"pattern": "/d/*", "format": "csv"}}
    job = make_job(data=files, training={"epochs": 3, "steps": 1000})
    pods = [pod("chief", 0, "Succeeded", exit_code=0), *all_pods(job)[1:]]
    d = run(job, pods, progress=Progress(step=625))
    assert d.status is not None and str(d.status.phase) == "Succeeded"
    assert d.status.progress is not None and d.status.progress.step == 625


def test_etj_run_reads_evaluation_and_skipped_records_from_the_chief_log(tmp_path: Path):
    log = tmp_path / "chief.log"
    lines = [
        {"event": "evaluation", "step": 200, "auc": 0.7, "logloss": 0.6, "examples": 2000},
        {"event": "progress", "step": 300, "loss": 0.5, "badRecords": 4},
        {"event": "evaluation", "step": 400, "auc": 0.81, "logloss": 0.45, "examples": 2000},
    ]
    log.write_text("noise\n" + "\n".join(json.dumps(x) for x in lines) + "\n")
    assert evaluation_from_log(log, "t") == EVAL
    progress = progress_from_log(log, "t")
    assert progress is not None and progress.bad_records == 4
    assert evaluation_from_log(tmp_path / "missing.log", "t") is None
