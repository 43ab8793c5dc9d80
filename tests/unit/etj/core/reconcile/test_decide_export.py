"""status.export: the newest serving version (spec.export) reaches the job's status from the
leader's metrics page, its ``exported`` lines under ``etj run``, or its termination message
at the end, with the base path TF Serving watches."""

from __future__ import annotations

import json
from pathlib import Path

from etj.api.progress import completion_json
from etj.api.status import DeltaStatus, ExportStatus, Progress
from etj.core.reconcile.progress import (
    completion_export,
    delta_record,
    export_record,
    parse_export,
)
from etj.local.runner import export_from_log
from tests.unit.reconcile_helpers import all_pods, make_job, pod, run, with_status

PAGE = """# TYPE etj_trainer_step gauge
etj_trainer_step 700.0
etj_trainer_export_version 1795800000.0
etj_trainer_export_step 600.0
etj_trainer_export_time_seconds 1795800004.0
"""
SERVING = "/var/lib/etj/checkpoints/j/serving"


def test_the_page_gives_the_newest_version_and_none_before_the_first():
    ex = parse_export(PAGE, "t")
    assert ex is not None
    assert (ex.last_version, ex.step, ex.time) == (1795800000, 600, "2026-11-27T17:20:04Z")
    assert ex.location is None and ex.update_time == "t"
    # The gauges read 0 until a version is in place.
    unset = PAGE.replace("1795800000.0", "0.0")
    assert parse_export(unset, "t") is None
    assert parse_export("etj_trainer_step 5\n", "t") is None
    assert parse_export("not { a page", "t") is None


def test_the_status_says_where_the_version_is_and_keeps_it():
    job = make_job(export={"everySteps": 100})
    scraped = parse_export(PAGE, "t")
    d = run(job, all_pods(job), progress=Progress(step=700), export=scraped)
    assert d.status is not None and d.status.export is not None
    assert d.status.export.location == SERVING
    assert d.status.export.last_version == 1795800000
    # A later pass without a scrape keeps it.
    again = run(with_status(job, d), all_pods(job))
    assert again.status is not None and again.status.export == d.status.export


def test_success_takes_the_version_written_at_the_end_from_the_termination_message():
    job = make_job(export={"everySteps": 100})
    final = {"lastVersion": 1795800100, "step": 1000, "time": "2026-11-27T17:21:40Z"}
    message = "TrainingComplete: " + completion_json({"step": 1000}, export=final)
    assert completion_export(message, "t") == ExportStatus(
        last_version=1795800100, step=1000, time="2026-11-27T17:21:40Z", update_time="t"
    )
    pods = [pod("chief", 0, "Succeeded", exit_code=0, message=message), *all_pods(job)[1:]]
    d = run(job, pods, progress=Progress(step=900), export=parse_export(PAGE, "t"))
    assert d.status is not None and str(d.status.phase) == "Succeeded"
    assert d.status.export is not None
    assert (d.status.export.last_version, d.status.export.step) == (1795800100, 1000)
    assert d.status.export.location == SERVING


def test_no_export_record_in_anything_else():
    assert completion_export('TrainingComplete: {"progress":{"step":5}}', "t") is None
    assert completion_export("DataError: x", "t") is None
    assert export_record({"lastVersion": 0, "step": 5}, "t") is None
    assert export_record({"step": 5}, "t") is None
    assert export_record("1795800000", "t") is None


def test_etj_run_reads_the_last_exported_line(tmp_path: Path):
    log = tmp_path / "chief.log"
    lines = [
        {"event": "exported", "lastVersion": 10, "step": 100, "location": "/w/serving"},
        {"event": "progress", "step": 150},
        {
            "event": "exported",
            "lastVersion": 11,
            "step": 200,
            "location": "/w/serving",
            "seconds": 1.5,
        },
    ]
    log.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    ex = export_from_log(log, "t")
    assert ex == ExportStatus(last_version=11, step=200, location="/w/serving", update_time="t")
    assert export_from_log(tmp_path / "missing.log", "t") is None


DELTAS = """etj_trainer_delta_base_version 1795800000.0
etj_trainer_delta_sequence 3.0
etj_trainer_delta_step 650.0
etj_trainer_delta_time_seconds 1795800034.0
etj_trainer_delta_rows 1234.0
"""
LAST_DELTA = DeltaStatus(
    base_version=1795800000, sequence=3, step=650, time="2026-11-27T17:20:34Z", rows=1234
)


def test_the_page_gives_the_last_delta_beside_the_version_and_none_before_the_first():
    ex = parse_export(PAGE + DELTAS, "t")
    assert ex is not None and ex.last_version == 1795800000
    assert ex.last_delta == LAST_DELTA
    assert ex.to_wire()["lastDelta"] == {
        "baseVersion": 1795800000,
        "sequence": 3,
        "step": 650,
        "time": "2026-11-27T17:20:34Z",
        "rows": 1234,
    }
    # The gauges read 0 until a delta is in place; without delta gauges, no delta.
    unset = parse_export(PAGE + DELTAS.replace(" 3.0", " 0.0"), "t")
    assert unset is not None and unset.last_delta is None
    assert parse_export(PAGE, "t").last_delta is None  # type: ignore[union-attr]


def test_the_status_shows_the_last_delta_and_keeps_it():
    job = make_job(export={"everySteps": 100, "deltaSteps": 10})
    d = run(
        job, all_pods(job), progress=Progress(step=700), export=parse_export(PAGE + DELTAS, "t")
    )
    assert d.status is not None and d.status.export is not None
    assert d.status.export.last_delta == LAST_DELTA
    again = run(with_status(job, d), all_pods(job))
    assert again.status is not None and again.status.export == d.status.export


def test_etj_run_reads_the_last_delta_line_beside_the_last_version(tmp_path: Path):
    log = tmp_path / "chief.log"
    delta = {"baseVersion": 1795800000, "step": 650, "time": "2026-11-27T17:20:34Z"}
    lines = [
        {"event": "exported", "lastVersion": 1795800000, "step": 600, "location": "/w/serving"},
        {"event": "deltaExported", **delta, "sequence": 2, "rows": 5, "evicted": 1},
        {"event": "deltaExported", **delta, "sequence": 3, "rows": 1234, "seconds": 0.2},
    ]
    log.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    ex = export_from_log(log, "t")
    assert ex is not None and ex.last_delta == LAST_DELTA
    assert delta_record({"sequence": 3}) is None
    assert delta_record([1]) is None
