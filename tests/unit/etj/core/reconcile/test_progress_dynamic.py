"""status.progress.dynamicTables: each dynamic table's rows used / capacity, admitted,
evicted and fallback lookups, read from the chief's metrics page (the operator) or its
progress line (etj run, the same reader), kept when the job succeeds, and shown by etj run."""

from __future__ import annotations

from pathlib import Path

from etj.api.progress import DYNAMIC_TABLES_KEY
from etj.api.status import DynamicTableStatus, Progress
from etj.core.reconcile.progress import parse_progress, progress_record
from tests.unit.etj.core.reconcile.progress_tables import page, shown_by_etj_run, succeeded

STATS = {
    "user_id": {
        "rowsUsed": 812,
        "capacity": 1000,
        "admitted": 900,
        "evicted": 88,
        "fallbackLookups": 12345,
    },
    "item_id": {"rowsUsed": 0, "capacity": 50, "admitted": 0, "evicted": 0, "fallbackLookups": 7},
}
TABLES = [
    DynamicTableStatus(
        name="item_id", rows_used=0, capacity=50, admitted=0, evicted=0, fallback_lookups=7
    ),
    DynamicTableStatus(
        name="user_id",
        rows_used=812,
        capacity=1000,
        admitted=900,
        evicted=88,
        fallback_lookups=12345,
    ),
]


def test_the_metrics_page_gives_every_dynamic_tables_stats_by_name():
    p = parse_progress(page(STATS), "t")
    assert p is not None and p.step == 300
    assert p.dynamic_tables == TABLES


def test_a_page_without_dynamic_tables_has_none_and_its_status_no_key():
    p = parse_progress("etj_trainer_step 300.0\n", "t")
    assert p is not None and p.dynamic_tables is None
    assert "dynamicTables" not in p.to_wire()


def test_a_table_missing_a_gauge_is_left_out_not_the_progress():
    text = page(STATS).replace('etj_trainer_dynamic_evicted{table="item_id"} 0.0\n', "")
    p = parse_progress(text, "t")
    assert p is not None and p.dynamic_tables == TABLES[1:]


def test_the_progress_line_gives_the_same_stats_as_the_metrics_page():
    doc = {"event": "progress", "step": 300, "loss": 0.5, DYNAMIC_TABLES_KEY: STATS}
    p = progress_record(doc, "t")
    assert p is not None and p.loss == 0.5 and p.dynamic_tables == TABLES
    assert p.to_wire()["dynamicTables"][1] == {"name": "user_id", **STATS["user_id"]}


def test_a_bad_dynamic_tables_entry_drops_only_the_dynamic_tables():
    for bad in ("x", {"user_id": {"rowsUsed": -1}}, {"user_id": "x"}, [1]):
        p = progress_record({"step": 300, "loss": 0.5, DYNAMIC_TABLES_KEY: bad}, "t")
        assert p is not None and p.loss == 0.5 and p.dynamic_tables is None, bad
    p = progress_record({"step": 300, DYNAMIC_TABLES_KEY: None}, "t")
    assert p is not None and p.dynamic_tables is None


def test_a_succeeded_job_keeps_the_last_dynamic_tables_its_completion_message_lacks():
    scraped, final = succeeded(Progress(step=900, dynamic_tables=TABLES))
    assert scraped.dynamic_tables == TABLES and final.dynamic_tables == TABLES


def test_etj_run_reads_and_shows_each_dynamic_table(tmp_path: Path):
    progress, rows = shown_by_etj_run(tmp_path, DYNAMIC_TABLES_KEY, STATS)
    assert progress.dynamic_tables == TABLES
    assert rows["dynamic table user_id"] == (
        "812/1000 rows used, 900 admitted, 88 evicted, 12,345 fallback lookups"
    )
    assert rows["dynamic table item_id"] == (
        "0/50 rows used, 0 admitted, 0 evicted, 7 fallback lookups"
    )
