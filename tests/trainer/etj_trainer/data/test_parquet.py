"""Parquet input: the same model input as delimited text for the same data (ids hashed
alike, nulls as empty fields, list columns as multi-valued features), and bad data stopping
with ``DataError: <file>:<row>: <what>`` naming the column (or skipped and counted)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from etj.api.spec import DataSpec, ModelSpec

MODEL: dict[str, Any] = {
    "embeddings": [
        {"name": "ids", "vocabularySize": 1000, "dimension": 4},
        {"name": "genre", "vocabularySize": 50, "dimension": 4, "combiner": "mean"},
    ],
    "features": [
        {"name": "label", "kind": "label"},
        {"name": "I1", "kind": "dense", "transform": "log1p"},
        {"name": "I2", "kind": "dense", "default": 7},
        {"name": "C1", "kind": "categorical", "table": "ids"},
        {
            "name": "genres",
            "kind": "categorical",
            "table": "genre",
            "delimiter": "|",
            "maxLength": 3,
        },
    ],
}
# The rows of test_delimited's GOOD lines, as Parquet types (nulls where fields are empty).
TABLE = {
    "label": pa.array([1, 0, 1], pa.int64()),
    "I1": pa.array([3, -2, 7], pa.int64()),
    "I2": pa.array([None, 5.0, 1.0], pa.float64()),
    "C1": pa.array(["ab12cd34", None, "ffff0000"]),
    "genres": pa.array([["Comedy", "Drama"], None, ["Drama"]], pa.list_(pa.string())),
}
TSV = ["1\t3\t\tab12cd34\tComedy|Drama", "0\t-2\t5\t\t", "1\t7\t1\tffff0000\tDrama"]


def _model(**changes: Any) -> ModelSpec:
    spec = dict(MODEL)
    if changes:
        spec["features"] = [f | changes.get(f["name"], {}) for f in MODEL["features"]]
    return ModelSpec.model_validate(spec)


def _data(pattern: str, max_bad: int = 0) -> DataSpec:
    return DataSpec.model_validate(
        {
            "source": "files",
            "files": {"pattern": pattern, "format": "parquet"},
            "maxBadRecords": max_bad,
        }
    )


def _write(path: Path, columns: dict[str, Any], **kwargs: Any) -> Path:
    pq.write_table(pa.table(columns), path, **kwargs)
    return path


def _read(data: DataSpec, batch: int = 64, model: ModelSpec | None = None) -> list[dict]:
    from etj_trainer.data.pipeline import feature_dataset

    ds = feature_dataset(model or _model(), data, batch, repeat=False)
    return [{k: v.numpy() for k, v in b.items()} for b in ds]


def _error(data: DataSpec, model: ModelSpec | None = None) -> str:
    from etj_trainer.data.records import DataError, data_error_from

    with pytest.raises(Exception) as caught:
        _read(data, model=model)
    error = data_error_from(caught.value)
    assert isinstance(error, DataError), repr(caught.value)[:2000]
    return str(error)


def test_parquet_gives_what_the_same_rows_as_text_give(tmp_path: Path):
    parquet = _write(tmp_path / "part.parquet", TABLE)
    text = tmp_path / "part.tsv"
    text.write_text("\n".join(TSV) + "\n")
    columns = ["label", "I1", "I2", "C1", "genres"]
    tsv = DataSpec.model_validate(
        {
            "source": "files",
            "files": {
                "pattern": str(text),
                "format": "csv",
                "delimiter": "\t",
                "header": False,
                "columns": columns,
            },
        }
    )
    [got] = _read(_data(str(parquet)))
    [want] = _read(tsv)
    assert set(got) == set(want)
    for key in want:
        np.testing.assert_array_equal(got[key], want[key], err_msg=key)
    # And the values are the ones the schema says (not just equal to each other).
    from etj_trainer.data.features import string_rows

    np.testing.assert_array_equal(got["label"], [1, 0, 1])
    np.testing.assert_allclose(got["dense"][:, 0], np.log1p([3, 0, 7]), rtol=1e-6)
    np.testing.assert_allclose(got["dense"][:, 1], [7, 5, 1])
    c1 = [r[0] for r in got["ids/C1"]]
    assert c1[1] == 0  # null: the reserved row
    assert c1[0] == string_rows(["ab12cd34"], 1000).numpy()[0]
    genres = got["ids/genres"]
    assert list(genres[1]) == [-1, -1, -1]  # null list: nothing pooled
    assert (genres[0][:2] > 0).all() and genres[0][2] == -1
    assert genres[0][1] == genres[2][0]  # Drama is Drama in every row


def test_int_ids_dictionary_strings_bools_and_row_groups(tmp_path: Path):
    n = 1000
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 2, n).astype(bool)
    ids = rng.integers(0, 10**15, n)
    table = {
        "label": pa.array(labels),
        "I1": pa.array(rng.integers(0, 100, n), pa.int32()),
        "I2": pa.array(rng.normal(size=n), pa.float32()),
        "C1": pa.array(ids.astype(str)).dictionary_encode(),
        "genres": pa.array([[int(i % 7), int(i % 5)] for i in range(n)], pa.list_(pa.int64())),
    }
    path = _write(tmp_path / "p.parquet", table, row_group_size=300)
    batches = _read(_data(str(path)), batch=128)
    got_labels = np.concatenate([b["label"] for b in batches])
    np.testing.assert_array_equal(got_labels, labels.astype(np.float32))
    got = np.concatenate([b["ids/C1"][:, 0] for b in batches])
    from etj_trainer.data.features import string_rows

    np.testing.assert_array_equal(got, string_rows(ids.astype(str), 1000).numpy())
    # Integer ids declared int: taken modulo the table (after row 0), as in text.
    model = _model(C1={"valueType": "int"})
    path2 = _write(tmp_path / "q.parquet", table | {"C1": pa.array(ids)})
    got2 = np.concatenate([b["ids/C1"][:, 0] for b in _read(_data(str(path2)), model=model)])
    np.testing.assert_array_equal(got2, 1 + ids % 999)


def test_text_in_a_numeric_column_is_named_by_file_row_and_column(tmp_path: Path):
    bad = TABLE | {"I2": pa.array(["1.5", "x7", "2"])}
    path = _write(tmp_path / "bad.parquet", bad)
    assert _error(_data(str(path))) == f"{path}:2: dense column I2 is not a number: 'x7'"
    # Skipped and counted when allowed.
    batches = _read(_data(str(path), max_bad=5))
    assert sum(int(b["bad_records"]) for b in batches) == 1
    assert sum(len(b["label"]) for b in batches) == 2


def test_a_null_label_is_a_bad_record(tmp_path: Path):
    path = _write(tmp_path / "l.parquet", TABLE | {"label": pa.array([1, None, 0])})
    assert _error(_data(str(path))) == f"{path}:2: label label is not a number: ''"


@pytest.mark.parametrize(
    ("column", "array", "what"),
    [
        ("C1", pa.array([1.5, 2.5, 3.5]), "column C1 holds floating-point numbers"),
        ("I1", pa.array([[1], [2], [3]]), "column I1 is a list"),
        ("genres", pa.array([[1.0], [2.0], [3.0]]), "column genres is a list of floating-point"),
        ("I1", pa.array([{"a": 1}, {"a": 2}, {"a": 3}]), "column I1 is struct"),
    ],
)
def test_a_column_of_the_wrong_type_stops_before_training(
    tmp_path: Path, column: str, array: Any, what: str
):
    path = _write(tmp_path / "t.parquet", TABLE | {column: array})
    assert _error(_data(str(path))).startswith(f"{path}: {what}")


def test_missing_column_empty_file_and_not_parquet(tmp_path: Path):
    good = _write(tmp_path / "a.parquet", TABLE)
    lacking = _write(tmp_path / "b.parquet", {k: v for k, v in TABLE.items() if k != "C1"})
    assert _error(_data(str(tmp_path / "*.parquet"))).startswith(f"{lacking}: no column(s) C1")
    lacking.unlink()
    empty = _write(tmp_path / "c.parquet", {k: v[:0] for k, v in TABLE.items()})
    assert _error(_data(str(tmp_path / "*.parquet"))) == f"{empty}:1: empty file (no rows)"
    empty.unlink()
    text = tmp_path / "d.parquet"
    text.write_text("label,I1\n1,2\n")
    assert _error(_data(str(tmp_path / "*.parquet"))).startswith(f"{text}: not a Parquet file")
    text.unlink()
    assert len(_read(_data(str(good)))) == 1


def test_shards_split_files_or_batches(tmp_path: Path):
    from etj_trainer.data.pipeline import feature_dataset

    n = 40
    columns = TABLE | {
        "label": pa.array([i % 2 for i in range(n)]),
        "I1": pa.array(range(n)),
        "I2": pa.array([float(i) for i in range(n)]),
        "C1": pa.array([f"c{i}" for i in range(n)]),
        "genres": pa.array([["a"]] * n),
    }
    _write(tmp_path / "only.parquet", columns)
    data = _data(str(tmp_path / "only.parquet"))
    seen = []
    for index in range(2):
        ds = feature_dataset(_model(), data, 8, num_shards=2, shard_index=index)
        rows: set[int] = set()
        for b in ds.take(60):
            rows |= {int(v) for v in b["dense"][:, 1]}
        seen.append(rows)
    assert seen[0].isdisjoint(seen[1])
    assert seen[0] | seen[1] == set(range(n))


def test_null_values_in_text_columns_are_missing_values(tmp_path: Path):
    """A string column of numbers with NA (a CSV converted as text) reads NA as a null:
    the dense default, the reserved row; without nullValues NA is no number."""
    table = TABLE | {"I2": pa.array(["NA", "5", " n/a"]), "C1": pa.array(["NA", "x", "y"])}
    path = _write(tmp_path / "na.parquet", table)
    data = DataSpec.model_validate(
        {
            "source": "files",
            "files": {"pattern": str(path), "format": "parquet", "nullValues": ["NA", "n/a"]},
        }
    )
    [batch] = _read(data)
    np.testing.assert_allclose(batch["dense"][:, 1], [7, 5, 7])
    assert batch["ids/C1"][0, 0] == 0 and (batch["ids/C1"][1:, 0] != 0).all()
    assert _error(_data(str(path))) == f"{path}:1: dense column I2 is not a number: 'NA'"
