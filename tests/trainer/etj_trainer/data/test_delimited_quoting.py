"""RFC 4180 quoting in delimited input: generated files with each case (a quoted field
holding the delimiter, doubled quotes, quoted empty fields, CRLF line ends, a UTF-8
byte-order mark, line breaks inside quoted fields, across batches) cut into the same
values Python's ``csv`` module reads; bad quoting stops with ``<file>:<line>: <what>``
counting the file's lines; ``quote: none`` reads quotes as data; a file that is not UTF-8
is refused naming its encoding."""

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
        "open-to-file-end",
        '1,"Heat (1995),Drama,M\n1,x,y,z\n',
        2,
        "a quote opened here is left open to the end of the file",
    ),
    ("open-at-file-end", '1,x,Drama,M\n0,"Heat, (1995),Drama,M', 3, "a quote opened here"),
    (
        "after-a-multiline-record",
        '1,"two\nlines",Drama,M\n0,"a\n\nb",Drama,F\n1,x,Drama\n',
        7,
        "expected 4 fields, found 3",
    ),
    ("stray-quote-in-multiline", '1,"a\nb" c,Drama,M\n', 2, "a quote inside an unquoted"),
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
    body = _csv_text(ROWS) + '1,"closed"after,Drama,M\n0,x"y"z,Drama,M\n'
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


MULTILINE = [
    ["1", "Toy Story (1995)\nA cowboy doll", "Animation|Comedy", "M"],
    ["0", "Heat (1995)", "Drama", "F"],
    ["1", 'one\n\ntwo "quoted",\nthree', "Drama", "F"],  # a blank line, quotes, a comma
    ["0", "", "Comedy", "M\n"],
    ["1", "x\ny", "a\nb|c", "F"],
]


def _numbered(path: Path, batch: int) -> Any:
    """``path``'s lines after the header as ``sharded_batches`` numbers them for a join."""
    import tensorflow as tf

    lines = tf.data.TextLineDataset(str(path)).skip(1).batch(batch).enumerate()
    return lines.map(
        lambda i, b: (tf.fill([tf.size(b)], "f"), i * batch + 2 + tf.range(tf.size(b, tf.int64)), b)
    )


def _joined(path: Path, batch: int) -> tuple[list[list[str]], list[int], list[bool]]:
    """(cells, first line numbers, holds a quote) of ``path``'s records, joined and cut by
    the trainer, every check asserted good; the cells cut with the join's flags and
    without them (``Fields`` finding its own) must agree."""
    from etj_trainer.data.delimited import Fields, join_quoted_lines

    fields = Fields(len(HEADER), ",", '"')
    cells, numbers, flags = [], [], []
    for _, number, records, quoted in join_quoted_lines(_numbered(path, batch)):
        got, checks = fields(records, quoted)
        alone, _ = fields(records)
        assert got.numpy().tolist() == alone.numpy().tolist()
        for mask, _ in checks:
            assert not mask.numpy().any(), records.numpy()[mask.numpy()]
        cells += [[c.decode() for c in row] for row in got.numpy()]
        numbers += number.numpy().tolist()
        flags += quoted.numpy().tolist()
    return cells, numbers, flags


def _quoted_by_csv(row: list[str]) -> bool:
    """Whether Python's csv writer quotes a field of ``row`` (QUOTE_MINIMAL)."""
    return any(set(cell) & set(',"\r\n') for cell in row)


def _first_lines(path: Path) -> list[int]:
    """The file line each record after the header starts on (Python's csv counts the
    line a record ends on: a record starts on the line after the previous one's end)."""
    with path.open(newline="") as f:
        reader = csv.reader(f)
        next(reader)
        ends = [reader.line_num for _ in reader]
    return [2, *(e + 1 for e in ends[:-1])]


@pytest.mark.parametrize("batch", [1, 2, 3, 64])
def test_line_breaks_in_quoted_fields_read_as_python_csv_reads_them(tmp_path: Path, batch: int):
    """Records spanning lines, inside one batch and across batch ends (batch 1: every
    line its own batch), read into the values (and line numbers) Python's csv gives."""
    path = tmp_path / "multi.csv"
    path.write_text(_csv_text([HEADER, *MULTILINE * 3]), encoding="utf-8", newline="")
    expected = _python(path)
    assert len(expected) == 3 * len(MULTILINE)
    cells, numbers, flags = _joined(path, batch)
    assert cells == expected
    assert numbers == _first_lines(path)
    assert flags == [_quoted_by_csv(row) for row in MULTILINE * 3]


def test_a_file_without_quotes_passes_the_join_as_it_is(tmp_path: Path):
    """No quote in the file: the join's batches are the lines' batches, element for
    element (same batch ends, numbers, bytes), no record flagged as holding a quote; Latin-1
    bytes (which RE2 cannot show quote-free) and blank lines included."""
    path = tmp_path / "plain.csv"
    rows = [f"{i % 2},title {i},Drama|Comedy,M" for i in range(23)]
    rows[5] = "1,Amélie,Comedy,F"
    rows[9] = ""
    body = ",".join(HEADER) + "\n" + "\n".join(rows) + "\n"
    path.write_bytes(body.encode().replace("é".encode(), b"\xe9"))
    from etj_trainer.data.delimited import join_quoted_lines

    for batch in (1, 4, 64):
        before = [[t.numpy().tolist() for t in b] for b in _numbered(path, batch)]
        after = [[t.numpy().tolist() for t in b] for b in join_quoted_lines(_numbered(path, batch))]
        assert [b[:3] for b in after if b[0]] == before
        assert not any(any(b[3]) for b in after)
    assert b"1,Am\xe9lie,Comedy,F" in before[0][2]


def test_quotes_only_late_in_a_file_still_join(tmp_path: Path):
    """Many quote-free batches pass as they are, then records spanning lines (opened on
    a batch's last line and going on in the next: batches of 5 and 7) are joined as
    Python's csv reads them, with their first line numbers; quote-free lines after them
    pass again."""
    plain = [[str(i % 2), f"title {i}", "Drama", "M"] for i in range(40)]
    late = [
        ["1", "x", "Drama", "F"],
        ["0", "Heat (1995)\nsecond line\nthird", "Drama", "M"],
        ["1", "a", "b", "c\nd"],
        ["0", 'say "hi"', "Drama", "F"],
    ]
    rows = [*plain, *late, *plain[:9]]
    path = tmp_path / "late.csv"
    path.write_text(_csv_text([HEADER, *rows]), encoding="utf-8", newline="")
    expected = _python(path)
    assert len(expected) == len(rows)
    for batch in (4, 5, 7, 64):
        cells, numbers, flags = _joined(path, batch)
        assert cells == expected, batch
        assert numbers == _first_lines(path), batch
        assert flags == [_quoted_by_csv(r) for r in rows], batch
    assert sum(flags) == 3


def test_multiline_records_through_the_reader_and_its_line_numbers(tmp_path: Path):
    """Through the whole reader (two workers' shards of one file, small batches): every
    record once, and a bad record after multi-line ones named by its first file line."""
    from etj_trainer.data.delimited import dataset, preflight
    from etj_trainer.data.features import FeatureSet
    from etj_trainer.data.records import DataError, Sharding, data_error_from

    path = tmp_path / "multi.csv"
    path.write_text(_csv_text([HEADER, *MULTILINE * 4]), encoding="utf-8", newline="")
    model, data = _movies(str(path))
    fs = FeatureSet(model)
    columns = preflight([str(path)], data.files, fs)
    labels = []
    for shard in (0, 1):
        sharding = Sharding(num_shards=2, shard_index=shard, repeat=False)
        for b in dataset([str(path)], data.files, fs, columns, 2, 0, sharding):
            labels += b["label"].numpy().tolist()
    assert sorted(labels) == sorted(float(r[0]) for r in MULTILINE * 4)

    bad = tmp_path / "bad.csv"
    text = _csv_text([HEADER, *MULTILINE])
    lines_before = text.count("\n") + 1
    bad.write_text(text + "1,x,Drama\n", encoding="utf-8", newline="")
    model, data = _movies(str(bad))
    with pytest.raises(Exception) as caught:
        _read(model, data)
    error = data_error_from(caught.value)
    assert isinstance(error, DataError), repr(caught.value)[:2000]
    assert str(error).startswith(f"{bad}:{lines_before}: expected 4 fields, found 3"), str(error)


@pytest.mark.parametrize(
    ("encoded", "named"),
    [
        (",".join(HEADER).encode("utf-16") + "\n1,a,b,M\n".encode("utf-16-le"), "UTF-16LE"),
        ("label,títle,genres,gender\n1,a,b,M\n".encode("latin-1"), "Latin-1"),
    ],
)
def test_a_file_that_is_not_utf8_is_named_with_its_encoding(
    tmp_path: Path, encoded: bytes, named: str
):
    from etj_trainer.data.delimited import preflight
    from etj_trainer.data.features import FeatureSet
    from etj_trainer.data.records import DataError

    path = tmp_path / "export.csv"
    path.write_bytes(encoded)
    model, data = _movies(str(path))
    with pytest.raises(DataError) as caught:
        preflight([str(path)], data.files, FeatureSet(model))
    assert str(caught.value).startswith(f"{path}:1: ")
    assert named in str(caught.value)
    assert "iconv -f" in str(caught.value)
