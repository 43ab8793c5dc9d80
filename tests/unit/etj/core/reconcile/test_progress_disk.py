"""status.progress.diskTables: each disk table's cache hit rate, cached rows, rows and bytes
on disk and rows read and written per second, read from the chief's metrics page (the
operator) or its progress line (etj run, the same reader), kept when the job succeeds, and
shown by etj run."""

from __future__ import annotations

from pathlib import Path

from etj.api.progress import DISK_GAUGES, DISK_TABLES_KEY
from etj.api.status import DiskTableStatus, Progress
from etj.core.reconcile.progress import parse_progress, progress_record
from tests.unit.etj.core.reconcile.progress_tables import page, shown_by_etj_run, succeeded

STATS = {
    "user_id": {
        "cacheHitRate": 0.875,
        "cachedRows": 50_000,
        "cacheRows": 50_000,
        "rows": 1_000_000,
        "diskBytes": 128_000_000,
        "rowsReadPerSecond": 1520.5,
        "rowsWrittenPerSecond": 1490.0,
        "lookups": 9_000_000,
        "lookupMisses": 1_200_000,
    },
}
TABLES = [
    DiskTableStatus(
        name="user_id",
        cache_hit_rate=0.875,
        cached_rows=50_000,
        cache_rows=50_000,
        rows=1_000_000,
        disk_bytes=128_000_000,
        rows_read_per_second=1520.5,
        rows_written_per_second=1490.0,
        lookups=9_000_000,
        lookup_misses=1_200_000,
    )
]


def test_the_metrics_page_and_the_progress_line_give_the_same_disk_tables():
    scraped = parse_progress(page(STATS, DISK_GAUGES), "t")
    assert scraped is not None and scraped.disk_tables == TABLES
    assert scraped.dynamic_tables is None
    line = progress_record({"event": "progress", "step": 300, DISK_TABLES_KEY: STATS}, "t")
    assert line is not None and line.disk_tables == TABLES
    assert line.to_wire()["diskTables"] == [{"name": "user_id", **STATS["user_id"]}]


def test_a_bad_disk_table_entry_drops_only_that_table():
    bad = {**STATS, "item_id": {**STATS["user_id"], "cacheHitRate": 1.5}}
    p = progress_record({"step": 300, "loss": 0.5, DISK_TABLES_KEY: bad}, "t")
    assert p is not None and p.loss == 0.5 and p.disk_tables == TABLES
    text = page(STATS, DISK_GAUGES).replace('etj_trainer_disk_rows{table="user_id"}', "x")
    scraped = parse_progress(text, "t")
    assert scraped is not None and scraped.step == 300 and scraped.disk_tables is None


def test_a_succeeded_job_keeps_the_last_disk_tables_its_completion_message_lacks():
    scraped, final = succeeded(Progress(step=900, disk_tables=TABLES))
    assert scraped.disk_tables == TABLES and final.disk_tables == TABLES


def test_etj_run_reads_and_shows_each_disk_table(tmp_path: Path):
    progress, rows = shown_by_etj_run(tmp_path, DISK_TABLES_KEY, STATS)
    assert progress.disk_tables == TABLES
    assert rows["disk table user_id"] == (
        "cache hit rate 0.875, 50,000/50,000 rows cached, 1,000,000 rows (122.1 MiB) on disk, "
        "1,520 rows/s read, 1,490 written"
    )
