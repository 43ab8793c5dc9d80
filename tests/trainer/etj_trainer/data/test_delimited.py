"""Delimited text input: parsing Criteo/Avazu/MovieLens-style lines, and every kind of bad
data stopping with ``DataError: <file>:<line>: <what>`` (or skipped and counted)."""

from __future__ import annotations

import gzip
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
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
COLUMNS = ["label", "I1", "I2", "C1", "genres"]
GOOD = ["1\t3\t\tab12cd34\tComedy|Drama", "0\t-2\t5\t\t", "1\t7\t1\tffff0000\tDrama"]


def _model() -> ModelSpec:
    return ModelSpec.model_validate(MODEL)


def _data(pattern: str, max_bad: int = 0, **files: Any) -> DataSpec:
    """Tab-separated files without a header (the Criteo way) unless ``files`` says else."""
    settings = {"pattern": pattern, "format": "csv", "delimiter": "\t", "header": False}
    settings |= {"columns": COLUMNS} | files
    settings = {k: v for k, v in settings.items() if v is not None}
    return DataSpec.model_validate({"source": "files", "files": settings, "maxBadRecords": max_bad})


def _read(data: DataSpec, batch: int = 64, model: ModelSpec | None = None) -> list[dict]:
    from etj_trainer.data.pipeline import feature_dataset

    ds = feature_dataset(model or _model(), data, batch, repeat=False)
    return [{k: v.numpy() for k, v in b.items()} for b in ds]


def test_parses_labels_transforms_ids_and_genres_in_file_order(tmp_path: Path):
    from etj_trainer.data.features import string_rows

    path = tmp_path / "a.tsv"
    path.write_text("\n".join(GOOD) + "\n\n")  # a blank last line is not a record
    (batch,) = _read(_data(str(path)))
    assert batch["label"].tolist() == [1.0, 0.0, 1.0]
    # I1: log1p with negatives clipped to 0; I2: the default 7 when empty.
    np.testing.assert_allclose(batch["dense"][:, 0], np.log1p([3, 0, 7]), rtol=1e-6)
    assert batch["dense"][:, 1].tolist() == [7.0, 5.0, 1.0]
    ids = batch["ids/C1"][:, 0].tolist()
    assert ids[1] == 0  # empty: the reserved row
    assert ids[0] == int(string_rows(np.array([b"ab12cd34"]), 1000)[0]) != 0
    genres = batch["ids/genres"]
    assert genres.shape == (3, 3)
    assert (genres[0] >= 1).sum() == 2 and genres[0][2] == -1  # two genres, one pad
    assert (genres[1] == -1).all()  # no genre: nothing to pool
    assert genres[2][0] == genres[0][1]  # "Drama" maps to one row everywhere
    assert batch["bad_records"] == 0


def test_header_columns_in_any_order_and_gzip(tmp_path: Path):
    rows = ["genres,C1,I2,label,I1", "Drama,x1,2,1,4", "Comedy|Drama,,,0,"]
    path = tmp_path / "part-0.csv.gz"
    path.write_bytes(gzip.compress(("\n".join(rows) + "\n").encode()))
    data = DataSpec.model_validate(
        {"source": "files", "files": {"pattern": str(path), "format": "csv"}}
    )
    (batch,) = _read(data)
    assert batch["label"].tolist() == [1.0, 0.0]
    assert batch["dense"][:, 1].tolist() == [2.0, 7.0]
    assert batch["ids/C1"][1, 0] == 0


def test_twenty_digit_ids_past_int64_hash_as_text(tmp_path: Path):
    path = tmp_path / "a.tsv"
    big = ["10000174058809263569", "18446744073709551617", "10000174058809263569"]
    path.write_text("".join(f"1\t1\t1\t{b}\tDrama\n" for b in big))
    (batch,) = _read(_data(str(path)))
    rows = batch["ids/C1"][:, 0]
    assert rows[0] == rows[2] != rows[1] and (rows > 0).all()


@dataclass(frozen=True)
class Bad:
    id: str
    write: Callable[[Path], Path]  # writes the files, returns the pattern's directory
    expect: str  # the DataError text after "<file>:" (includes the line)
    files: dict[str, Any] | None = None


def _lines(*lines: str, name: str = "a.tsv") -> Callable[[Path], Path]:
    def write(d: Path) -> Path:
        (d / name).write_text("\n".join(lines) + "\n")
        return d / name

    return write


def _raw(data: bytes, name: str = "a.tsv") -> Callable[[Path], Path]:
    def write(d: Path) -> Path:
        (d / name).write_bytes(data)
        return d / name

    return write


HEADER = {"header": True, "columns": None, "delimiter": ","}
BAD_CASES = [
    Bad("too-few-fields", _lines(GOOD[0], "1\t2\t3"), ":2: expected 5 fields, found 3"),
    Bad(
        "too-many-fields",
        _lines(GOOD[0], GOOD[1], GOOD[2] + "\textra"),
        ":3: expected 5 fields, found 6",
    ),
    Bad(
        "text-in-dense",
        _lines(GOOD[0], "1\tabc\t1\tx\tDrama"),
        ":2: dense column I1 is not a number: 'abc'",
    ),
    Bad(
        "thousands-separator",
        _lines("1\t1,000\t1\tx\tDrama"),
        ":1: dense column I1 is not a number: '1,000'",
    ),
    Bad("label-empty", _lines(GOOD[0], "\t1\t1\tx\tDrama"), ":2: label label is not a number: ''"),
    Bad("label-text", _lines("yes\t1\t1\tx\tDrama"), ":1: label label is not a number: 'yes'"),
    Bad(
        "label-not-binary",
        _lines(GOOD[0], GOOD[1], "4\t1\t1\tx\tDrama"),
        ":3: label label is not 0 or 1 (set a threshold, or positive values): '4'",
    ),
    Bad(
        "wrong-delimiter",
        _lines("1,2,3,x,Drama"),
        ":1: expected 5 fields (data.files.columns), found 1",
    ),
    Bad("empty-file", _raw(b""), ":1: empty file"),
    Bad("not-gzip", _raw(b"1\t2\t3\tx\ty\n", name="a.tsv.gz"), ":1: not a gzip file"),
    Bad(
        "gzip-undeclared",
        _raw(gzip.compress(b"1\t2\t3\tx\ty\n")),
        "is gzip-compressed but data.files.compression is none",
        {"compression": "none"},
    ),
    Bad(
        "header-lacks-column",
        _lines("label,I1,I2,C1,genre", "1,1,1,x,y", name="a.csv"),
        ":1: the header lacks the declared column(s) genres",
        HEADER,
    ),
    Bad(
        "header-empty",
        _lines("", "1,1,1,x,y", name="a.csv"),
        ":1: the header line is empty",
        HEADER,
    ),
    Bad("int-id-text", _lines("1\t1\t1\tab\tDrama"), ":1: column C1 is not an integer id", None),
    Bad(
        "int-id-too-long",
        _lines("1\t1\t1\t42\tDrama", "1\t1\t1\t10000174058809263569\tDrama"),
        ":2: column C1 is not an integer id (ids past int64: valueType string)",
        None,
    ),
    Bad("late-bad-line", _lines(*(GOOD * 40), "1\t2"), ":121: expected 5 fields, found 2"),
]
INT_IDS = {"int-id-text", "int-id-too-long"}


@pytest.mark.parametrize("case", BAD_CASES, ids=lambda c: c.id)
def test_bad_data_stops_with_file_and_line(tmp_path: Path, case: Bad):
    from etj_trainer.data.records import DataError, data_error_from

    path = case.write(tmp_path)
    model = _model()
    if case.id in INT_IDS:
        doc = {**MODEL, "features": [dict(f) for f in MODEL["features"]]}
        doc["features"][3]["valueType"] = "int"
        model = ModelSpec.model_validate(doc)
    data = _data(str(path), **(case.files or {}))
    with pytest.raises(Exception) as caught:
        _read(data, batch=16, model=model)
    error = data_error_from(caught.value)
    assert isinstance(error, DataError), f"not a DataError: {caught.value!r}"[:2000]
    assert str(error).startswith(str(path)), str(error)
    assert case.expect in str(error), str(error)
    assert "Traceback" not in str(error) and "node" not in str(error).lower()


def test_a_missing_file_is_a_data_error(tmp_path: Path):
    from etj_trainer.data.records import DataError

    with pytest.raises(DataError, match="matches no file"):
        _read(_data(str(tmp_path / "nothing-*.tsv")))


def test_a_header_differing_between_files_is_a_data_error(tmp_path: Path):
    from etj_trainer.data.records import DataError

    (tmp_path / "a.csv").write_text("label,I1,I2,C1,genres\n1,1,1,x,y\n")
    (tmp_path / "b.csv").write_text("label,I2,I1,C1,genres\n1,1,1,x,y\n")
    data = DataSpec.model_validate(
        {"source": "files", "files": {"pattern": str(tmp_path / "*.csv"), "format": "csv"}}
    )
    with pytest.raises(DataError, match=r"b.csv:1: the header differs from the one of .*a.csv"):
        _read(data)


def test_max_bad_records_skips_and_counts(tmp_path: Path):
    path = tmp_path / "a.tsv"
    lines = [*GOOD, "1\tabc\t1\tx\tDrama", "1\t2", *GOOD, "x\t1\t1\tx\tDrama"]
    path.write_text("\n".join(lines) + "\n")
    batches = _read(_data(str(path), max_bad=10), batch=4)
    assert sum(int(b["bad_records"]) for b in batches) == 3
    assert sum(len(b["label"]) for b in batches) == 6
    assert all(len(b["label"]) == len(b["ids/C1"]) == len(b["dense"]) for b in batches)


@pytest.mark.parametrize("files", [1, 2])
def test_shards_read_disjoint_files_or_records(tmp_path: Path, files: int):
    """Two workers: whole files each when there are enough files, else every other line."""
    from etj_trainer.data.pipeline import feature_dataset

    for k in range(files):
        rows = [f"{i % 2}\t{k * 100 + i}\t1\tx\tDrama" for i in range(1, 41)]
        (tmp_path / f"part-{k}.tsv").write_text("\n".join(rows) + "\n")
    data = _data(str(tmp_path / "part-*.tsv"))
    seen = []
    for index in range(2):
        ds = feature_dataset(_model(), data, 8, num_shards=2, shard_index=index, repeat=False)
        values = {round(float(np.expm1(v))) for b in ds for v in b["dense"][:, 0].numpy()}
        seen.append(values)
    assert not seen[0] & seen[1]
    assert len(seen[0] | seen[1]) == 40 * files


def test_whitespace_around_fields_is_ignored_and_blank_lines_are_no_records(tmp_path: Path):
    """Fields with spaces around them parse as without (ids hash alike, a blank dense
    field takes its default), and a line of spaces alone is no record."""
    plain, spaced = tmp_path / "plain.tsv", tmp_path / "spaced.tsv"
    plain.write_text("\n".join(GOOD) + "\n")
    padded = ["1\t 3 \t  \t ab12cd34 \tComedy|Drama", "   ", "0\t-2\t5\t\t", GOOD[2]]
    spaced.write_text("\n".join(padded) + "\n")
    [want] = _read(_data(str(plain)))
    [got] = _read(_data(str(spaced)))
    assert set(got) == set(want)
    for key in want:
        np.testing.assert_array_equal(got[key], want[key], err_msg=key)
    assert got["dense"][0, 1] == 7  # the blank I2: its default


def _labelled(positive: list[str], negative: list[str] | None = None) -> ModelSpec:
    label: dict[str, Any] = {"name": "label", "kind": "label", "positive": positive}
    if negative is not None:
        label["negative"] = negative
    return ModelSpec.model_validate({**MODEL, "features": [label, *MODEL["features"][1:]]})


def test_a_text_label_reads_positive_values_as_1_and_the_rest_as_0(tmp_path: Path):
    path = tmp_path / "adult.csv"
    rows = [
        ">50K\t1\t1\tx\tDrama",
        " <=50K \t1\t1\tx\tDrama",
        ">50K\t1\t1\tx\tDrama",
        "x\t1\t1\ty\t",
    ]
    path.write_text("\n".join(rows) + "\n")
    (batch,) = _read(_data(str(path)), model=_labelled([">50K"]))
    assert batch["label"].tolist() == [1.0, 0.0, 1.0, 0.0]


def test_a_value_neither_positive_nor_negative_is_a_bad_record(tmp_path: Path):
    from etj_trainer.data.records import DataError, data_error_from

    path = tmp_path / "y.csv"
    path.write_text("yes\t1\t1\tx\tDrama\nno\t1\t1\tx\tDrama\nYes\t1\t1\tx\tDrama\n")
    model = _labelled(["yes"], ["no"])
    with pytest.raises(Exception) as caught:
        _read(_data(str(path)), model=model)
    error = data_error_from(caught.value)
    assert isinstance(error, DataError), repr(caught.value)[:2000]
    assert str(error) == f"{path}:3: label label is not one of yes, no (positive/negative): 'Yes'"
    (batch,) = _read(_data(str(path), max_bad=1), model=model)
    assert batch["label"].tolist() == [1.0, 0.0]
    assert int(batch["bad_records"]) == 1


def test_an_empty_text_label_is_a_bad_record(tmp_path: Path):
    path = tmp_path / "y.csv"
    path.write_text("yes\t1\t1\tx\tDrama\n \t1\t1\tx\tDrama\n")
    (batch,) = _read(_data(str(path), max_bad=1), model=_labelled(["yes"]))
    assert batch["label"].tolist() == [1.0]
    assert int(batch["bad_records"]) == 1


def test_a_column_is_read_by_its_header_name_when_the_feature_is_named_otherwise(tmp_path: Path):
    path = tmp_path / "reviews.csv"
    path.write_text("Review Text,label\ngood,1\nbad,0\n")
    model = ModelSpec.model_validate(
        {
            "embeddings": [{"name": "text", "vocabularySize": 100, "dimension": 4}],
            "features": [
                {"name": "label", "kind": "label"},
                {
                    "name": "review_text",
                    "column": "Review Text",
                    "kind": "categorical",
                    "table": "text",
                },
            ],
        }
    )
    data = _data(str(path), delimiter=",", header=True, columns=None)
    (batch,) = _read(data, model=model)
    from etj_trainer.data.features import string_rows

    assert (
        batch["ids/review_text"][:, 0].tolist()
        == string_rows(["good", "bad"], 100).numpy().tolist()
    )


def test_a_header_naming_a_read_column_twice_is_a_data_error(tmp_path: Path):
    from etj_trainer.data.delimited import preflight
    from etj_trainer.data.features import FeatureSet
    from etj_trainer.data.records import DataError

    path = tmp_path / "dup.csv"
    path.write_text("label,I1,I2,C1,genres,C1\n1,1,1,x,y,z\n")
    data = _data(str(path), delimiter=",", header=True, columns=None)
    with pytest.raises(DataError) as caught:
        preflight([str(path)], data.files, FeatureSet(_model()))
    assert str(caught.value) == (
        f"{path}:1: the header names column 'C1' 2 times (columns 4, 6): rename all but one "
        "in the file (a feature reads one column)"
    )


def test_null_values_are_missing_values_with_the_columns_defaults(tmp_path: Path):
    """NA in a dense column takes the default, in an id column the reserved row, in the
    label it is a bad record named as written; without nullValues NA is no number."""
    from etj_trainer.data.records import DataError, data_error_from

    path = tmp_path / "na.tsv"
    rows = ["1\t3\tNA\tab12cd34\tComedy", "0\t2\t null \tNA\tDrama", "NA\t1\t1\tx\tDrama"]
    path.write_text("\n".join(rows) + "\n")
    (batch,) = _read(_data(str(path), max_bad=1, nullValues=["NA", "null"]))
    assert batch["label"].tolist() == [1.0, 0.0]
    assert batch["dense"][:, 1].tolist() == [7.0, 7.0]  # I2's default, twice
    assert batch["ids/C1"][1, 0] == 0 != batch["ids/C1"][0, 0]  # NA: the reserved row
    assert int(batch["bad_records"]) == 1
    with pytest.raises(Exception) as caught:
        _read(_data(str(path), nullValues=["NA", "null"]))
    error = data_error_from(caught.value)
    assert isinstance(error, DataError), repr(caught.value)[:2000]
    assert str(error) == f"{path}:3: label label is not a number: 'NA'"
    with pytest.raises(Exception) as caught:
        _read(_data(str(path)))
    assert str(data_error_from(caught.value)) == (
        f"{path}:1: dense column I2 is not a number: 'NA'"
    )


def test_a_quoted_null_token_is_missing_too_and_other_text_is_kept(tmp_path: Path):
    path = tmp_path / "na.csv"
    path.write_text('label,I1,I2,C1,genres\n1,"NA",2,"N/A",NAN\n0,1,2,NA x,Drama\n')
    data = _data(str(path), delimiter=",", header=True, columns=None, nullValues=["NA", "N/A"])
    (batch,) = _read(data)
    np.testing.assert_allclose(batch["dense"][:, 0], np.log1p([0, 1]), rtol=1e-6)  # 0 default
    assert batch["ids/C1"][0, 0] == 0 and batch["ids/C1"][1, 0] != 0  # 'NA x' is an id
    assert (batch["ids/genres"][0] >= 1).sum() == 1  # 'NAN' is no token: a genre


def test_a_first_line_of_another_shape_is_one_bad_record_under_max_bad(tmp_path: Path):
    """scikit-learn's breast_cancer.csv starts with "569,30,malignant,benign" above rows
    of 31 fields: under maxBadRecords it is skipped and counted; with 0 it stops, saying
    what would let it through."""
    from etj_trainer.data.records import DataError

    path = tmp_path / "sk.tsv"
    path.write_text("3\t5\tmalignant\n" + "\n".join(GOOD) + "\n")
    batches = _read(_data(str(path), max_bad=1))
    assert sum(len(b["label"]) for b in batches) == 3
    assert sum(int(b["bad_records"]) for b in batches) == 1
    with pytest.raises(DataError) as caught:
        _read(_data(str(path)))
    assert str(caught.value) == (
        f"{path}:1: expected 5 fields (data.files.columns), found 3; is the delimiter '\\t' "
        "right?; or, if line 1 is no record, data.maxBadRecords: 1 skips it"
    )
    other = tmp_path / "sk2.tsv"
    other.write_text("3\t5\tmalignant\n" + GOOD[0] + "\n")
    with pytest.raises(DataError, match=r"sk2.tsv:1: .*maxBadRecords 1 skips fewer first lines"):
        _read(_data(str(tmp_path / "sk*.tsv"), max_bad=1))
