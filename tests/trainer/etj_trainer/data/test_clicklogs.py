"""etj_trainer.data.clicklogs: click logs in public datasets' layouts, each with its fields
and a label that depends on the ids. numpy only: no TensorFlow."""

from __future__ import annotations

import csv
import gzip
from pathlib import Path

import numpy as np
import pytest

from etj_trainer.data.clicklogs import LAYOUTS, MOVIELENS_1M_HEADER, main, write


def _rows(path: Path, delimiter: str, header: bool) -> list[list[str]]:
    lines = path.read_text().splitlines()
    rows = list(csv.reader(lines, delimiter=delimiter))
    return rows[1:] if header else rows


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_every_layout_writes_its_files_rows_and_header(tmp_path: Path, layout: str):
    spec = LAYOUTS[layout]
    paths = write(layout, tmp_path, files=2, rows_per_file=50)
    assert [p.name for p in paths] == [f"part-00000.{spec.suffix}", f"part-00001.{spec.suffix}"]
    delimiter = "\t" if layout == "criteo" else ","
    lines = paths[0].read_text().splitlines()
    if spec.header is None:
        assert len(lines) == 50
    else:
        assert lines[0] == spec.header and len(lines) == 51
    width = len(_rows(paths[0], delimiter, spec.header is not None)[0])
    assert all(len(r) == width for r in _rows(paths[1], delimiter, spec.header is not None))


def test_criteo_is_label_13_counts_and_26_hex_ids_with_empty_fields(tmp_path: Path):
    (path,) = write("criteo", tmp_path, 1, 300)
    rows = _rows(path, "\t", header=False)
    assert {len(r) for r in rows} == {40} and {r[0] for r in rows} <= {"0", "1"}
    ids = [c for r in rows for c in r[14:] if c]
    assert all(len(c) == 8 and int(c, 16) >= 0 for c in ids)
    assert any(c == "" for r in rows for c in r[1:])


def test_movielens_1m_quotes_titles_that_hold_a_comma(tmp_path: Path):
    (path,) = write("movielens-1m", tmp_path, 1, 400)
    rows = _rows(path, ",", header=True)
    columns = MOVIELENS_1M_HEADER.split(",")
    assert {len(r) for r in rows} == {len(columns)}
    titles = [r[columns.index("title")] for r in rows]
    assert any("," in t for t in titles)
    assert '"' in path.read_text()  # quoted as RFC 4180 says


def test_the_same_seed_writes_the_same_files_and_another_seed_others(tmp_path: Path):
    a = write("avazu", tmp_path / "a", 1, 100, seed=3)[0].read_text()
    b = write("avazu", tmp_path / "b", 1, 100, seed=3)[0].read_text()
    c = write("avazu", tmp_path / "c", 1, 100, seed=4)[0].read_text()
    assert a == b and a != c


def test_the_label_depends_on_the_ids(tmp_path: Path):
    """The most frequent ids' click rates differ: a model has something to learn."""
    (path,) = write("movielens", tmp_path, 1, 20000, seed=1)
    rows = _rows(path, ",", header=True)
    clicks: dict[str, list[int]] = {}
    for user, _, rating, _, _ in rows:
        clicks.setdefault(user, []).append(float(rating) >= 4)
    rates = [np.mean(v) for v in clicks.values() if len(v) >= 200]
    assert len(rates) >= 5 and max(rates) - min(rates) > 0.2


def test_compressed_files_are_gzip(tmp_path: Path):
    (path,) = write("movielens", tmp_path, 1, 10, compress=True)
    assert path.name.endswith(".csv.gz")
    assert gzip.decompress(path.read_bytes()).decode().startswith("userId,")


def test_the_command_writes_training_and_held_out_files(tmp_path: Path, capsys):
    assert (
        main(
            [
                "avazu",
                "--out",
                str(tmp_path),
                "--files",
                "2",
                "--rows",
                "20",
                "--validation-rows",
                "10",
            ]
        )
        == 0
    )
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["train-00000.csv", "train-00001.csv", "valid-00000.csv"]
    assert "wrote 2 training files and 1 held-out file" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["criteo", "--out", str(tmp_path), "--format", "parquet"])
