"""etj_trainer.data.records: what every format shares — files, compression, the first
bytes' checks, and bad records stopped or skipped with ``<file>:<line>: <what>``.
In-process, eager TensorFlow."""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

import pytest

from etj.api.spec import FileData
from etj_trainer.data.records import (
    BAD_KEY,
    DataError,
    Sharding,
    check_file_start,
    compression_of,
    data_error_from,
    files_of,
    location,
    marked,
    quoted,
    sharded_batches,
    strict_or_skip,
)


def _files(**kw: Any) -> FileData:
    return FileData(pattern="/d/*", format="csv", **kw)


def test_files_are_sorted_and_none_is_a_data_error(tmp_path: Path):
    for name in ("b.csv", "a.csv"):
        (tmp_path / name).write_text("x\n")
    assert files_of(str(tmp_path / "*.csv")) == [str(tmp_path / "a.csv"), str(tmp_path / "b.csv")]
    with pytest.raises(DataError, match=r"\*\.tfrecord: matches no file \(data.files.pattern\)"):
        files_of(str(tmp_path / "*.tfrecord"))


def test_compression_is_gzip_when_said_or_by_name_under_auto():
    assert compression_of("/d/a.csv.gz", _files()) == "GZIP"
    assert compression_of("/d/a.csv", _files()) == ""
    assert compression_of("/d/a.csv", _files(compression="gzip")) == "GZIP"
    assert compression_of("/d/a.csv.gz", _files(compression="none")) == ""


def test_a_files_first_bytes_must_fit_its_compression(tmp_path: Path):
    plain, packed, empty = tmp_path / "a.csv", tmp_path / "b.csv", tmp_path / "c.csv"
    plain.write_text("label\n1\n")
    packed.write_bytes(gzip.compress(b"label\n1\n"))
    empty.write_text("")
    assert check_file_start(str(plain), _files()) == b"la"
    with pytest.raises(
        DataError, match=r"b\.csv:1: the file is gzip-compressed .* set compression: gzip"
    ):
        check_file_start(str(packed), _files())
    with pytest.raises(DataError, match=r"a\.csv:1: not a gzip file \(compression is gzip\)"):
        check_file_start(str(plain), _files(compression="gzip"))
    with pytest.raises(DataError, match=r"c\.csv:1: empty file"):
        check_file_start(str(empty), _files())


def test_a_marked_description_comes_back_from_any_error_text(tf):
    text = tf.strings.join(
        [location(tf.constant("/d/a.csv"), tf.constant(7, tf.int64)), ": bad 'x'"]
    )
    error = RuntimeError(f"assertion failed: [{marked(text).numpy().decode()}] [[node X]]")
    found = data_error_from(error)
    assert isinstance(found, DataError) and str(found) == "/d/a.csv:7: bad 'x'"
    assert data_error_from(RuntimeError("something else")) is None
    already = DataError("x")
    assert data_error_from(already) is already


def test_a_corrupted_record_is_unreadable_data(tf):
    error = tf.errors.DataLossError(None, None, "corrupted record at 12")
    assert str(data_error_from(error)) == "unreadable data: corrupted record at 12"


def test_a_cell_is_quoted_and_cut(tf):
    assert quoted(tf.constant(["abcdef"]), limit=3).numpy().tolist() == [b"'abc'"]


def _batch(tf):
    out = {"x": tf.constant([1, 2, 3, 4])}
    bad = tf.constant([False, True, False, True])
    describe = lambda i: tf.strings.join(["row ", tf.strings.as_string(i)])  # noqa: E731
    return out, bad, describe


def test_skipping_drops_the_bad_rows_and_counts_them(tf, capfd):
    out, bad, describe = _batch(tf)
    kept = strict_or_skip(out, bad, describe, max_bad=10)
    assert kept["x"].numpy().tolist() == [1, 3] and int(kept[BAD_KEY]) == 2
    assert "skipped bad record: row 1" in capfd.readouterr().err


def test_strict_stops_at_the_first_bad_row_with_its_description(tf):
    out, bad, describe = _batch(tf)
    with pytest.raises(tf.errors.InvalidArgumentError) as caught:
        strict_or_skip(out, bad, describe, max_bad=0)
    assert str(data_error_from(caught.value)) == "row 1"
    good = strict_or_skip(out, tf.zeros([4], tf.bool), describe, max_bad=0)
    assert good["x"].numpy().tolist() == [1, 2, 3, 4] and int(good[BAD_KEY]) == 0


def test_batches_are_numbered_from_the_files_first_record_after_the_header(tf, tmp_path: Path):
    path = tmp_path / "a.csv"
    path.write_text("header\n" + "".join(f"r{i}\n" for i in range(5)))
    ds = sharded_batches(
        [str(path)],
        _files(),
        tf.data.TextLineDataset,
        1,
        Sharding(repeat=False),
        batch_size=2,
        shuffle=1,
    )
    got = [(f.numpy().tolist(), n.numpy().tolist(), r.numpy().tolist()) for f, n, r in ds]
    assert [n for _, n, _ in got] == [[2, 3], [4, 5], [6]]  # line numbers (1 is the header)
    assert [r for _, _, r in got] == [[b"r0", b"r1"], [b"r2", b"r3"], [b"r4"]]
    assert {f for fs, _, _ in got for f in fs} == {str(path).encode()}
