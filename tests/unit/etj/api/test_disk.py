"""etj.api.disk: a disk table's settings, the refusals (said once for CEL and pydantic; the
malformed corpus sends the CEL to a real API server), and what a row costs on disk and
in the cache."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from etj.api.disk import (
    CACHE_ENTRY_BYTES,
    DISK_SPEC_RULES,
    DiskStorage,
    disk_table_stats,
    disk_volume_bytes,
    record_bytes,
    shard_cache_rows,
    shard_ram_bytes,
    table_cache_rows,
)
from etj.api.sizing import Optimizer
from etj.api.spec import EmbeddingTrainingJobSpec
from etj.core.crd import structural_schema

DISK = {"disk": {"cacheRows": 100}}


def _spec(table: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    t = {"name": "user", "vocabularySize": 10_000, "dimension": 8, "storage": DISK, **(table or {})}
    return {"strategy": "ParameterServer", "model": {"embeddings": [t]}, **extra}


def test_a_disk_table_takes_one_cache_size():
    assert DiskStorage.model_validate({"cacheRows": 5}).cache_rows == 5
    assert DiskStorage.model_validate({"cacheBytes": "1Gi", "path": "/ssd"}).path == "/ssd"
    for bad in ({}, {"cacheRows": 5, "cacheBytes": "1Gi"}, {"cacheRows": 0}, {"path": "rel"}):
        with pytest.raises(ValidationError):
            DiskStorage.model_validate(bad)


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"strategy": "MultiWorkerMirrored"}, "storage.disk is for strategy ParameterServer"),
        ({"table": {"dynamic": {"capacity": 10}}}, "storage.disk cannot be used with dynamic"),
        ({"table": {"dtype": "bfloat16"}}, "a bfloat16 or float16 table cannot be on disk"),
        ({"table": {"dtype": "float16"}}, "a bfloat16 or float16 table cannot be on disk"),
        ({"table": {"optimizer": "adam"}}, "sgd, adagrad or rowwiseAdagrad"),
        ({"training": {"optimizer": "ftrl"}}, "sgd, adagrad or rowwiseAdagrad"),
    ],
)
def test_what_the_kernels_cannot_do_is_refused_by_name(change: dict[str, Any], said: str):
    body = _spec(change.pop("table", None), **change)
    with pytest.raises(ValidationError, match=said):
        EmbeddingTrainingJobSpec.model_validate(body)


@pytest.mark.parametrize("optimizer", ["sgd", "adagrad", "rowwiseAdagrad"])
def test_the_kernels_optimizers_are_admitted_per_table_or_for_the_job(optimizer: str):
    EmbeddingTrainingJobSpec.model_validate(_spec({"optimizer": optimizer}))
    EmbeddingTrainingJobSpec.model_validate(_spec(training={"optimizer": optimizer}))
    # A table's own optimizer wins over the job's.
    EmbeddingTrainingJobSpec.model_validate(
        _spec({"optimizer": optimizer}, training={"optimizer": "adam"})
    )


def test_every_rule_is_in_the_crd_with_its_message():
    rules = structural_schema(EmbeddingTrainingJobSpec)["x-kubernetes-validations"]
    for rule in DISK_SPEC_RULES:
        assert {"rule": rule.cel, "message": rule.message} in rules


def test_a_record_is_the_row_and_its_slots_in_float32():
    assert record_bytes(Optimizer.SGD, 16) == 64
    assert record_bytes(Optimizer.ROWWISE_ADAGRAD, 16) == 68
    assert record_bytes(Optimizer.ADAGRAD, 16) == 128


def test_cache_bytes_buy_records_with_their_entries_and_never_more_than_the_rows():
    per_row = record_bytes(Optimizer.ADAGRAD, 8) + CACHE_ENTRY_BYTES
    disk = DiskStorage.model_validate({"cacheBytes": str(per_row * 1000 + per_row - 1)})
    assert table_cache_rows(disk, Optimizer.ADAGRAD, 8, 10**6) == 1000
    assert table_cache_rows(disk, Optimizer.ADAGRAD, 8, 10) == 10
    tiny = DiskStorage.model_validate({"cacheBytes": "1"})
    assert table_cache_rows(tiny, Optimizer.ADAGRAD, 8, 10) == 1


@given(rows=st.integers(1, 10**9), shards=st.integers(1, 64), cache=st.integers(1, 10**9))
@settings(max_examples=200, deadline=None)
def test_the_shards_caches_cover_the_tables_and_each_fits_its_shard(rows, shards, cache):
    cache = min(cache, rows)
    shards = min(shards, rows)
    base, extra = divmod(rows, shards)
    split = [base + (i < extra) for i in range(shards)]
    caches = [shard_cache_rows(cache, rows, n) for n in split]
    assert sum(caches) >= cache
    assert all(1 <= c <= n for c, n in zip(caches, split, strict=True))
    # Rounding up adds at most a row a shard.
    assert sum(caches) <= cache + shards


def test_a_shards_ram_is_its_cache_and_a_bit_a_row_and_its_volume_has_a_margin():
    assert shard_ram_bytes(100, 64 * 10, 5) == 5 * (100 + CACHE_ENTRY_BYTES) + 80
    assert disk_volume_bytes(10 * 2**30) > 11 * 2**30


def _counters(lookups: int, misses: int, reads: int, writes: int) -> dict[str, int]:
    shape = {"rows": 1000, "cache_rows": 50, "record_bytes": 128, "cached": 40}
    return {
        "lookups": lookups,
        "lookup_misses": misses,
        "disk_reads": reads,
        "disk_writes": writes,
        **shape,
    }


def test_a_disk_tables_stats_are_of_the_interval_since_the_report_before():
    before = _counters(1000, 500, 100, 1000)
    now = _counters(3000, 700, 300, 1400)
    stats = disk_table_stats(now, before, 4.0)
    # 2,000 lookups in the interval, 200 of them missed.
    assert stats["cacheHitRate"] == 0.9
    assert (stats["rowsReadPerSecond"], stats["rowsWrittenPerSecond"]) == (50.0, 100.0)
    assert (stats["rows"], stats["diskBytes"], stats["cacheRows"], stats["cachedRows"]) == (
        1000,
        128_000,
        50,
        40,
    )
    assert (stats["lookups"], stats["lookupMisses"]) == (3000, 700)


def test_a_disk_tables_first_stats_or_after_new_tables_are_of_everything_counted():
    now = _counters(1000, 250, 10, 1000)
    first = disk_table_stats(now, None, 0.0)
    assert first["cacheHitRate"] == 0.75 and first["rowsReadPerSecond"] == 0.0
    # Counters below the last report's: the tables were made again (a new chief).
    assert disk_table_stats(now, _counters(5000, 100, 0, 0), 2.0)["cacheHitRate"] == 0.75
    # No lookup in the interval: nothing missed.
    assert disk_table_stats(now, now, 2.0)["cacheHitRate"] == 1.0
