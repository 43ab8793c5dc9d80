"""RFC 4180 quoting in delimited input: generated files with each case (a quoted field
holding the delimiter, doubled quotes, quoted empty fields, CRLF line ends, a UTF-8
byte-order mark) cut into the same values Python's ``csv`` module reads; bad quoting
stops with ``<file>:<line>: <what>``; ``quote: none`` reads quotes as data."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from etj.api.spec import DataSpec, ModelSpec

ROWS = [
    ["1", "Toy Story (1995)", "Animation|Comedy", "M"],
    ["0", "Bridges of Madison County, The (1995)", "Drama|Romance", "F"],
    ["1", 'The "Best" Movie, Ever', "Drama", "F"],  # doubled quotes and the delimiter
    ["0", "", "", "M"],  # empty fields (quoted when QUOTE_ALL)
    ["1", '"', "Comedy", ""],  # a quote alone
    ["0", '""', "Comedy", "M"],  # two quotes
    ["1", "a,b,c,,", "Horror", "F"],
    ["0", "Amélie (2001)", "Comedy|Romance", "F"],  # UTF-8 text
]
HEADER = ["label", "title", "genres", "gender"]


def _csv_text(rows: list[list[str]], delimiter: str = ",", **kwargs: Any) -> str:
    out = io.StringIO()
    csv.writer(out, delimiter=delimiter, **kwargs).writerows(rows)
    return out.getvalue()


def _cells(path: Path, columns: int, delimiter: str = ",", quote: str = '"') -> list[list[str]]:
    """Every line of ``path`` after the first, cut by the trainer (and asserted good)."""
    import tensorflow as tf

    from etj_trainer.data.delimited import Fields

    lines = tf.data.TextLineDataset(str(path)).skip(1).batch(64)
    out: list[list[str]] = []
    for batch in lines:
        cells, checks = Fields(columns, delimiter, quote)(batch)
        for mask, _ in checks:
            assert not mask.numpy().any(), batch.numpy()[mask.numpy()]
        out += [[c.decode() for c in row] for row in cells.numpy()]
    return out


def _python(path: Path, delimiter: str = ",") -> list[list[str]]:
    with path.open(newline="", encoding="utf-8-sig") as f:
        return list(csv.reader(f, delimiter=delimiter))[1:]


@pytest.mark.parametrize(
    ("name", "kwargs"),
    [
        ("minimal", {}),
        ("all-quoted", {"quoting": csv.QUOTE_ALL}),
        ("crlf", {"lineterminator": "\r\n"}),
        ("tab", {"delimiter": "\t"}),
        ("pipe", {"delimiter": "|", "quoting": csv.QUOTE_NONNUMERIC}),
    ],
)
def test_quoted_fields_read_as_python_csv_reads_them(tmp_path: Path, name: str, kwargs: dict):
    delimiter = kwargs.pop("delimiter", ",")
    rows = [HEADER, *ROWS]
    path = tmp_path / f"{name}.csv"
    path.write_text(_csv_text(rows, delimiter, **kwargs), encoding="utf-8", newline="")
    expected = _python(path, delimiter)
    assert len(expected) == len(ROWS)
    assert _cells(path, len(HEADER), delimiter) == expected


def test_a_byte_order_mark_and_a_quoted_header(tmp_path: Path):
    from etj_trainer.data.delimited import preflight

    path = tmp_path / "bom.csv"
    text = '"label","title",genres,gender\r\n' + _csv_text(ROWS, lineterminator="\r\n")
    path.write_bytes(b"\xef\xbb\xbf" + text.encode())
    model, data = _movies(str(path))
    from etj_trainer.data.features import FeatureSet

    assert preflight([str(path)], data.files, FeatureSet(model)) == [
        "label",
        "title",
        "genres",
        "gender",
    ]
    batch = _read(model, data)
    assert batch["label"].tolist() == [float(r[0]) for r in ROWS]


def test_a_byte_order_mark_on_a_file_without_header(tmp_path: Path):
    path = tmp_path / "bom.csv"
    path.write_bytes(b"\xef\xbb\xbf" + _csv_text(ROWS, quoting=csv.QUOTE_ALL).encode())
    model, data = _movies(str(path), header=False)
    batch = _read(model, data)
    assert batch["label"].tolist() == [float(r[0]) for r in ROWS]


def _movies(pattern: str, header: bool = True, **files: Any) -> tuple[ModelSpec, DataSpec]:
    model = ModelSpec.model_validate(
        {
            "embeddings": [
                {"name": "title", "vocabularySize": 10_000, "dimension": 4},
                {"name": "genre", "vocabularySize": 50, "dimension": 4, "combiner": "mean"},
                {"name": "gender", "vocabularySize": 1000, "dimension": 4},
            ],
            "features": [
                {"name": "label", "kind": "label"},
                {"name": "title", "kind": "categorical", "table": "title"},
                {
                    "name": "genres",
                    "kind": "categorical",
                    "table": "genre",
                    "delimiter": "|",
                    "maxLength": 3,
                },
                {"name": "gender", "kind": "categorical", "table": "gender"},
            ],
        }
    )
    settings: dict[str, Any] = {"pattern": pattern, "format": "csv", "header": header}
    if not header:
        settings["columns"] = HEADER
    data = DataSpec.model_validate({"source": "files", "files": settings | files})
    return model, data


def _read(model: ModelSpec, data: DataSpec) -> dict[str, np.ndarray]:
    from etj_trainer.data.pipeline import feature_dataset

    (batch,) = [
        {k: v.numpy() for k, v in b.items()} for b in feature_dataset(model, data, 64, repeat=False)
    ]
    return batch


def test_quoted_values_hash_as_python_csv_reads_them(tmp_path: Path):
    """Through the whole reader: each title's row is the hash of the title as csv reads it."""
    from etj_trainer.data.features import string_rows

    path = tmp_path / "movies.csv"
    path.write_text(_csv_text([HEADER, *ROWS]), encoding="utf-8")
    model, data = _movies(str(path))
    batch = _read(model, data)
    titles = [r[1].strip() for r in _python(path)]
    expected = string_rows(np.array([t.encode() for t in titles]), 10_000).numpy()
    assert batch["ids/title"][:, 0].tolist() == expected.tolist()
    gender = batch["ids/gender"][:, 0]
    assert gender[1] == gender[2] != gender[0]


BAD = [
    (
        "open-at-line-end",
        '1,"Heat (1995),Drama,M\n1,x,y,z\n',
        2,
        "a quote is left open at the end of the line",
    ),
    ("open-at-file-end", '1,x,Drama,M\n0,"Heat, (1995),Drama,M', 3, "a quote is left open"),
    ("stray-quote", '1,x,Drama,M\n0,He said "hi",Drama,M\n', 3, "a quote inside an unquoted field"),
    ("after-closing-quote", '0,"Heat" (1995),Drama,M\n', 2, "a quote inside an unquoted field"),
    ("too-many-quoted", '0,"a,b",Drama,M,"x"\n', 2, "expected 4 fields, found 5"),
    ("too-few-unquoted", "0,a,Drama\n", 2, "expected 4 fields, found 3"),
]


@pytest.mark.parametrize(("name", "body", "line", "what"), BAD, ids=[b[0] for b in BAD])
def test_bad_quoting_stops_with_file_and_line(
    tmp_path: Path, name: str, body: str, line: int, what: str
):
    from etj_trainer.data.records import DataError, data_error_from

    path = tmp_path / f"{name}.csv"
    path.write_text(",".join(HEADER) + "\n" + body, encoding="utf-8")
    model, data = _movies(str(path))
    with pytest.raises(Exception) as caught:
        _read(model, data)
    error = data_error_from(caught.value)
    assert isinstance(error, DataError), repr(caught.value)[:2000]
    assert str(error).startswith(f"{path}:{line}: {what}"), str(error)


def test_bad_quoting_is_skipped_and_counted_under_max_bad_records(tmp_path: Path):
    from etj_trainer.data.pipeline import feature_dataset

    path = tmp_path / "m.csv"
    body = _csv_text(ROWS) + '1,"open,Drama,M\n0,x"y,Drama,M\n'
    path.write_text(",".join(HEADER) + "\n" + body, encoding="utf-8")
    model, data = _movies(str(path))
    data = data.model_copy(update={"max_bad_records": 5})
    batches = list(feature_dataset(model, data, 64, repeat=False))
    assert sum(int(b["bad_records"]) for b in batches) == 2
    assert sum(len(b["label"]) for b in batches) == len(ROWS)


def test_quote_none_reads_quotes_as_data(tmp_path: Path):
    path = tmp_path / "log.tsv"
    lines = ['1\t"quoted\tDrama\tM', '0\tsays "hi"\tDrama\tF', '1\t""\tDrama\tM']
    path.write_text("\t".join(HEADER) + "\n" + "\n".join(lines) + "\n")
    assert _cells(path, 4, "\t", quote="none") == [line.split("\t") for line in lines]
    model, data = _movies(str(path), delimiter="\t", quote="none")
    assert len(_read(model, data)["label"]) == 3
