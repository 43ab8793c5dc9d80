"""What the per-table progress tests (``test_progress_dynamic``, ``test_progress_disk``)
share: a metrics page as the trainer serves it, a job run to Succeeded after a scraped
progress, and what etj run reads from a progress line and shows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from etj.api.progress import DYNAMIC_GAUGES
from etj.api.status import EmbeddingTrainingJobStatus, Progress
from etj.cli.run import _evaluation_rows
from etj.local.runner import progress_from_log
from tests.unit.reconcile_helpers import all_pods, make_job, pod, run, with_status


def page(
    stats: dict[str, dict[str, Any]], gauges: tuple[tuple[str, str, str], ...] = DYNAMIC_GAUGES
) -> str:
    """A metrics page as the trainer's Reporter serves it (one labelled series per table of
    ``gauges``' kind)."""
    lines = ["# TYPE etj_trainer_step gauge", "etj_trainer_step 300.0"]
    for field, metric, doc in gauges:
        lines += [f"# HELP {metric} {doc}", f"# TYPE {metric} gauge"]
        lines += [f'{metric}{{table="{t}"}} {float(s[field])}' for t, s in stats.items()]
    return "\n".join(lines) + "\n"


def succeeded(progress: Progress) -> tuple[Progress, Progress]:
    """A job's status progress once ``progress`` was scraped, and once its chief then
    Succeeded with a completion message of step and loss alone (loss 0.4)."""
    job = make_job()
    d = run(job, all_pods(job), progress=progress)
    assert d.status is not None and d.status.progress is not None
    scraped = d.status.progress
    message = 'TrainingComplete: {"progress":{"step":1000,"loss":0.4}}'
    pods = [pod("chief", 0, "Succeeded", exit_code=0, message=message), *all_pods(job)[1:]]
    d = run(with_status(job, d), pods)
    assert d.status is not None and str(d.status.phase) == "Succeeded"
    assert d.status.progress is not None and d.status.progress.loss == 0.4
    return scraped, d.status.progress


def shown_by_etj_run(
    tmp_path: Path, key: str, stats: dict[str, Any]
) -> tuple[Progress, dict[str, str]]:
    """What etj run reads from a chief's progress line with ``stats`` under ``key``, and
    the rows its summary shows."""
    log = tmp_path / "chief.log"
    log.write_text(json.dumps({"event": "progress", "step": 300, key: stats}))
    progress = progress_from_log(log, "t")
    assert progress is not None
    return progress, dict(_evaluation_rows(EmbeddingTrainingJobStatus(progress=progress)))
