"""etj_trainer.data.datagen: generated files in the layout the pipeline reads, as CSV or
TFRecord, the same examples either way. In-process."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness import job_spec, trainer_config

from etj_trainer.data.datagen import main, write_files
from etj_trainer.data.pipeline import count_records, csv_columns


def _files_data(pattern: str, fmt: str) -> dict[str, Any]:
    return {"source": "files", "files": {"pattern": pattern, "format": fmt}}


def test_csv_files_have_the_pipelines_columns_and_the_examples_asked(tmp_path: Path):
    config = trainer_config(job_spec())
    paths = write_files(config.model, config.data, tmp_path, "csv", 2, 50)
    assert [p.name for p in paths] == ["part-00000.csv", "part-00001.csv"]
    lines = paths[0].read_text().splitlines()
    assert lines[0].split(",") == csv_columns(config.model, "label")
    assert len(lines) == 51 and all(len(x.split(",")) == len(lines[0].split(",")) for x in lines)
    assert {x.split(",")[0] for x in lines[1:]} <= {"0", "1"}  # the label
    spec = job_spec(data=_files_data(str(tmp_path / "*.csv"), "csv"))
    assert count_records(spec.model, spec.data) == 100


def test_tfrecord_and_csv_hold_the_same_examples(tmp_path: Path, tf: Any):
    config = trainer_config(job_spec())
    (csv,) = write_files(config.model, config.data, tmp_path / "c", "csv", 1, 20)
    (rec,) = write_files(config.model, config.data, tmp_path / "t", "tfrecord", 1, 20)
    first_row = csv.read_text().splitlines()[1].split(",")
    example = tf.train.Example.FromString(next(iter(tf.data.TFRecordDataset(str(rec)))).numpy())
    features = example.features.feature
    assert features["label"].float_list.value[0] == float(first_row[0])
    ids = [int(v) for v in features["user_id"].int64_list.value]
    columns = csv.read_text().splitlines()[0].split(",")
    assert ids == [int(first_row[i]) for i, c in enumerate(columns) if c.startswith("user_id")]
    spec = job_spec(data=_files_data(str(rec), "tfrecord"))
    assert count_records(spec.model, spec.data) == 20


def test_the_command_reads_the_trainer_config_and_refuses_a_bad_one(tmp_path: Path, capsys):
    config = tmp_path / "config.json"
    config.write_text(json.dumps(trainer_config(job_spec()).to_wire()))
    code = main(
        [
            "--config",
            str(config),
            "--out",
            str(tmp_path / "out"),
            "--format",
            "csv",
            "--files",
            "3",
            "--examples-per-file",
            "5",
        ]
    )
    assert code == 0 and len(list((tmp_path / "out").glob("*.csv"))) == 3
    assert "wrote 3 files" in capsys.readouterr().out
    (tmp_path / "bad.json").write_text("{}")
    assert main(["--config", str(tmp_path / "bad.json"), "--out", str(tmp_path / "x")]) == 2
    assert capsys.readouterr().err.startswith("datagen: ")
