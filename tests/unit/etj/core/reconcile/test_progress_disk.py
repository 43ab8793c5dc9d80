"""status.progress.diskTables: each disk table's cache hit rate, cached rows, rows and bytes
on disk and rows read and written per second, read from the chief's metrics page (the
operator) or its progress line (etj run, the same reader), kept when the job succeeds, and
shown by etj run."""

from __future__ import annotations

import json
from pathlib import Path

from etj.api.progress import DISK_GAUGES, DISK_TABLES_KEY
from etj.api.status import DiskTableStatus, EmbeddingTrainingJobStatus, Progress
from etj.cli.run import _evaluation_rows
from etj.core.reconcile.progress import parse_progress, progress_record
from etj.local.runner import progress_from_log
from tests.unit.etj.core.reconcile.test_progress_dynamic import page
from tests.unit.reconcile_helpers import all_pods, make_job, pod, run, with_status

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
    job = make_job()
    d = run(job, all_pods(job), progress=Progress(step=900, disk_tables=TABLES))
    message = 'TrainingComplete: {"progress":{"step":1000,"loss":0.4}}'
    pods = [pod("chief", 0, "Succeeded", exit_code=0, message=message), *all_pods(job)[1:]]
    d = run(with_status(job, d), pods)
    assert d.status is not None and str(d.status.phase) == "Succeeded"
    assert d.status.progress is not None
    assert d.status.progress.loss == 0.4 and d.status.progress.disk_tables == TABLES


def test_etj_run_reads_and_shows_each_disk_table(tmp_path: Path):
    log = tmp_path / "chief.log"
    log.write_text(json.dumps({"event": "progress", "step": 300, DISK_TABLES_KEY: STATS}))
    progress = progress_from_log(log, "t")
    assert progress is not None and progress.disk_tables == TABLES
    rows = dict(_evaluation_rows(EmbeddingTrainingJobStatus(progress=progress)))
    assert rows["disk table user_id"] == (
        "cache hit rate 0.875, 50,000/50,000 rows cached, 1,000,000 rows (122.1 MiB) on disk, "
        "1,520 rows/s read, 1,490 written"
    )
