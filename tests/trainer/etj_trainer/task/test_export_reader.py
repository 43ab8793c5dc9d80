"""etj_trainer.task.export_reader's tables: rows memory-mapped and read by id as the
trainer looks them up (modulo the vocabulary; a dynamic table through its index and
fallback rows), decoded from bfloat16, pooled per example. numpy only. (The whole export
read back against the trained model: test_export.py.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from etj_trainer.task.export_reader import MappedTable


def _table(tmp_path: Path, rows: np.ndarray, **entry: Any) -> MappedTable:
    np.save(tmp_path / "t.npy", rows)
    base = {"name": "t", "dimension": rows.shape[1], "dtype": "float32", "combiner": "sum"}
    return MappedTable(tmp_path, {**base, "idsPerExample": 2, "file": "t.npy", **entry})


def test_rows_are_mapped_not_loaded_and_ids_taken_modulo_the_vocabulary(tmp_path: Path):
    rows = np.arange(12, dtype=np.float32).reshape(4, 3)
    t = _table(tmp_path, rows)
    assert isinstance(t.rows, np.memmap)
    np.testing.assert_array_equal(t.row_of(np.array([0, 5, 11])), [0, 1, 3])
    got = t.lookup(np.array([[1, 6]]))
    assert got.shape == (1, 2, 3) and got.dtype == np.float32
    np.testing.assert_array_equal(got[0], rows[[1, 2]])


def test_bfloat16_rows_are_read_as_the_float32_they_stand_for(tmp_path: Path):
    values = np.array([[1.5, -2.0], [0.15625, 327680.0]], dtype=np.float32)
    stored = (values.view(np.uint32) >> 16).astype(np.uint16)  # bfloat16 bits (exact here)
    t = _table(tmp_path, stored, dtype="bfloat16")
    np.testing.assert_array_equal(t.lookup(np.array([0, 1])), values)


def test_an_examples_vector_is_the_sum_or_the_mean_of_its_ids(tmp_path: Path):
    rows = np.array([[1.0, 0.0], [3.0, 2.0], [5.0, 4.0]], dtype=np.float32)
    ids = np.array([[0, 1], [2, 2]])
    np.testing.assert_array_equal(_table(tmp_path, rows).pooled(ids), [[4, 2], [10, 8]])
    mean = _table(tmp_path, rows, combiner="mean")
    np.testing.assert_array_equal(mean.pooled(ids), [[2, 1], [5, 4]])


def test_a_dynamic_tables_ids_read_their_own_row_else_the_fallback(tmp_path: Path):
    # 3 fallback rows (row 0 for missing ids, 1..2 hashed), then the pool.
    rows = np.arange(14, dtype=np.float32).reshape(7, 2)
    np.save(tmp_path / "index.npy", np.array([[10, 5], [42, 3], [99, 6]], dtype=np.int64))
    t = _table(tmp_path, rows, dynamic={"index": "index.npy", "fallbackRows": 3})
    ids = np.array([42, 99, 10, 7, 8, -1, 1000])
    # Admitted ids read their pool row; others 1 + id mod 2; a missing value (negative) row 0.
    np.testing.assert_array_equal(t.row_of(ids), [3, 6, 5, 2, 1, 0, 1])


def test_one_fallback_row_is_shared_and_an_empty_index_admits_nothing(tmp_path: Path):
    rows = np.arange(6, dtype=np.float32).reshape(3, 2)
    np.save(tmp_path / "index.npy", np.zeros((0, 2), dtype=np.int64))
    t = _table(tmp_path, rows, dynamic={"index": "index.npy", "fallbackRows": 1})
    np.testing.assert_array_equal(t.row_of(np.array([5, 17, -3])), [0, 0, 0])
