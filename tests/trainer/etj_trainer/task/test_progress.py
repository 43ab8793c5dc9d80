"""The progress reporter: what the chief reports, the operator reads back (completion
message, dynamic tables, disk tables)."""

from __future__ import annotations

import json

from etj.api.trainer_reasons import REASON_COMPLETED
from etj.core.reconcile.progress import parse_completion
from etj_trainer.task.termination import termination_text


def test_the_chiefs_completion_message_is_read_back_by_the_operator() -> None:
    """The final step and evaluation travel in the termination message (the metrics page
    is gone once the chief exits); what the trainer writes, the operator reads."""
    from etj_trainer.task.progress import ProgressReporter

    clock = iter(float(t) for t in range(100))
    reporter = ProgressReporter(256, interval=1e9, port=0, enabled=True, clock=lambda: next(clock))
    reporter.start(1000, restarts=1, last_checkpoint_step=1000)
    reporter.chunk_done(250, 0.45, None, bad=3)
    reporter.evaluated({"step": 1250, "auc": 0.71, "logloss": 0.52, "examples": 2000})
    reporter.report()
    text = termination_text(REASON_COMPLETED, json.dumps(reporter.completion()))
    progress, evaluation = parse_completion(text, "2026-11-24T00:00:00Z")
    assert progress is not None and evaluation is not None
    assert (progress.step, progress.loss, progress.bad_records) == (1250, 0.45, 3)
    assert progress.last_checkpoint_step == 1000 and progress.examples_per_second > 0
    assert (evaluation.step, evaluation.auc, evaluation.examples) == (1250, 0.71, 2000)
    assert progress.update_time == evaluation.update_time == "2026-11-24T00:00:00Z"


def test_the_dynamic_tables_the_chief_reports_reach_status_from_page_and_line() -> None:
    """Each dynamic table's stats, as the trainer serves them on its metrics page and
    writes them in its progress line, read by the operator's reader into the same
    status.progress.dynamicTables."""
    from prometheus_client import generate_latest

    from etj.core.reconcile.progress import parse_progress, progress_record
    from etj_trainer.task.progress import ProgressReporter

    stats = {
        "user_id": {
            "rowsUsed": 9,
            "capacity": 10,
            "admitted": 12,
            "evicted": 3,
            "fallbackLookups": 40,
        },
        "ad_id": {"rowsUsed": 1, "capacity": 4, "admitted": 1, "evicted": 0, "fallbackLookups": 2},
    }
    reporter = ProgressReporter(256, interval=1e9, port=0, enabled=True, clock=lambda: 1.0)
    reporter.dynamic_source = lambda: stats
    reporter.start(10, restarts=0, last_checkpoint_step=None)
    line = reporter.report()
    page = parse_progress(generate_latest(reporter.metrics.registry).decode(), "t")
    record = progress_record(line, "t")
    assert page is not None and record is not None
    assert page.dynamic_tables == record.dynamic_tables
    assert [t.to_wire() for t in record.dynamic_tables or []] == [
        {"name": name, **stats[name]} for name in ("ad_id", "user_id")
    ]


def test_the_last_delta_reaches_status_from_page_line_and_completion(capsys) -> None:
    """A delta the leader wrote: its gauges, its ``deltaExported`` line and the completion
    message's ``export.lastDelta``, each read by the operator's readers into the same
    status.export.lastDelta, beside the version it follows."""
    from prometheus_client import generate_latest

    from etj.api.progress import completion_json
    from etj.core.reconcile.progress import completion_export, delta_record, parse_export
    from etj_trainer.task.progress import ProgressReporter

    reporter = ProgressReporter(256, interval=1e9, port=0, enabled=True)
    reporter.exported(1795800000, 600, 1795800004.0, "/w/serving")
    reporter.delta_exported(1795800000, 3, 650, 1795800034.0, 1234, evicted=7)
    page = generate_latest(reporter.metrics.registry).decode()
    scraped = parse_export(page, "t")
    assert scraped is not None and scraped.last_delta is not None
    want = scraped.last_delta
    assert (want.base_version, want.sequence, want.step, want.rows) == (1795800000, 3, 650, 1234)
    assert want.time == "2026-11-27T17:20:34Z"
    line = [json.loads(x) for x in capsys.readouterr().out.splitlines() if "deltaExported" in x]
    assert line[-1]["evicted"] == 7 and delta_record(line[-1]) == want
    message = "TrainingComplete: " + completion_json(
        {"step": 650}, export=reporter.completion()["export"]
    )
    final = completion_export(message, "t")
    assert final is not None and final.last_delta == want and final.last_version == 1795800000
    # The next version keeps the last delta beside it until a newer delta.
    reporter.exported(1795800060, 700, 1795800064.0, "/w/serving")
    assert reporter.completion()["export"]["lastDelta"]["sequence"] == 3


def test_the_input_position_reaches_status_from_page_line_and_completion(capsys) -> None:
    """A following job's position (the last file trained whole, the records): its gauges,
    its progress line and the completion message, read into status.progress.input."""
    from prometheus_client import generate_latest

    from etj.core.reconcile.progress import parse_progress, progress_record
    from etj_trainer.task.progress import ProgressReporter

    reporter = ProgressReporter(256, interval=1e9, port=0, enabled=True)
    reporter.start(0, restarts=0, last_checkpoint_step=None)
    reporter.input_position("/data/hour=01/part-2.csv", 6000)
    reporter.input_position("/data/hour=02/part-0.csv", 9000)  # moved: one file named
    reporter.report()
    page = generate_latest(reporter.metrics.registry).decode()
    assert page.count("etj_trainer_input_last_file{") == 1
    scraped = parse_progress(page, "t")
    assert scraped is not None and scraped.input is not None
    assert (scraped.input.last_file, scraped.input.records) == ("/data/hour=02/part-0.csv", 9000)
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines() if '"progress"' in x]
    from_line = progress_record(lines[-1], "t")
    assert from_line is not None and from_line.input == scraped.input
    text = termination_text(REASON_COMPLETED, json.dumps(reporter.completion()))
    final, _ = parse_completion(text, "t")
    assert final is not None and final.input == scraped.input


def test_the_disk_tables_stats_are_reported_per_interval_on_page_and_line() -> None:
    """Each disk table's stats from its kernels' counters: the first report's of everything
    counted, the next one's of the interval between the two reads; the progress line and
    the metrics page say the same, and the termination message leaves them out."""
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from etj.api.progress import DISK_GAUGES, DISK_TABLES_KEY
    from etj_trainer.task.progress import ProgressReporter

    shape = {"rows": 1000, "cache_rows": 50, "record_bytes": 128, "cached": 50}
    reads = iter(
        [
            {"lookups": 100, "lookup_misses": 60, "disk_reads": 0, "disk_writes": 1000},
            {"lookups": 1100, "lookup_misses": 160, "disk_reads": 80, "disk_writes": 1100},
        ]
    )
    now = [0.0]
    reporter = ProgressReporter(256, interval=1e9, port=0, enabled=True, clock=lambda: now[0])
    reporter.disk_source = lambda: {"user_id": {**next(reads), **shape}}
    reporter.start(10, restarts=0, last_checkpoint_step=None)
    now[0] = 5.0
    first = reporter.report()
    assert first is not None and first[DISK_TABLES_KEY]["user_id"]["cacheHitRate"] == 0.4
    now[0] = 15.0
    second = reporter.report()
    assert second is not None
    stats = second[DISK_TABLES_KEY]["user_id"]
    assert stats["cacheHitRate"] == 0.9 and stats["rowsReadPerSecond"] == 8.0
    assert stats["diskBytes"] == 128_000 and stats["rowsWrittenPerSecond"] == 10.0
    page = {
        s.name: s.value
        for family in text_string_to_metric_families(
            generate_latest(reporter.metrics.registry).decode()
        )
        for s in family.samples
        if s.labels.get("table") == "user_id"
    }
    assert {field: page[metric] for field, metric, _ in DISK_GAUGES} == stats
    assert DISK_TABLES_KEY not in reporter.completion()["progress"]
    # The operator reads page and line into the same status.progress.diskTables.
    from etj.core.reconcile.progress import parse_progress, progress_record

    scraped = parse_progress(generate_latest(reporter.metrics.registry).decode(), "t")
    record = progress_record(second, "t")
    assert scraped is not None and record is not None and record.disk_tables
    assert scraped.disk_tables == record.disk_tables
    assert record.disk_tables[0].cache_hit_rate == 0.9
