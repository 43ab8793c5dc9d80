"""etj_trainer.data.follow: which files come next, and one file's batches (every record,
in file order, the last batch short)."""

from __future__ import annotations

from pathlib import Path

import pytest
import tensorflow as tf
from harness import job_spec

from etj_trainer.data.datagen import write_files
from etj_trainer.data.follow import csv_header, file_batches, late_files, list_files, new_files


def test_the_files_after_the_position_come_in_name_order():
    names = ["/d/h=13/part-2", "/d/h=12/part-9", "/d/h=13/part-1", "/d/h=12/part-1"]
    assert new_files(names, "") == sorted(names)
    assert new_files(names, "/d/h=12/part-9") == ["/d/h=13/part-1", "/d/h=13/part-2"]
    assert new_files(names, "/d/h=13/part-2") == []


def test_a_file_that_lands_before_the_position_is_late_once():
    known = {"/d/part-1", "/d/part-3"}
    names = [*known, "/d/part-2", "/d/part-4"]
    assert late_files(names, "/d/part-3", known) == ["/d/part-2"]
    assert late_files(names, "/d/part-3", known | {"/d/part-2"}) == []


def test_a_missing_directory_lists_no_files(tmp_path: Path):
    assert list_files(str(tmp_path / "nowhere" / "part-*")) == []


@pytest.mark.parametrize("fmt", ["tfrecord", "csv"])
def test_one_file_gives_every_record_in_batches_the_last_one_short(tmp_path: Path, fmt: str):
    ext = "tfrecord" if fmt == "tfrecord" else "csv"
    spec = job_spec(
        data={
            "source": "files",
            "files": {"pattern": f"{tmp_path}/part-*.{ext}", "format": fmt, "follow": {}},
        }
    )
    (path,) = write_files(spec.model, spec.data, tmp_path, fmt, 1, 150)
    header = csv_header(spec.data, str(path)) if fmt == "csv" else None
    ds = file_batches(spec.model, spec.data, tf.constant(str(path)), 64, header)
    sizes = [int(b["label"].shape[0]) for b in ds]
    assert sizes == [64, 64, 22]
    first = next(iter(ds))
    assert first["item_id"].shape == (64, 3) and first["dense"].shape == (64, 4)
