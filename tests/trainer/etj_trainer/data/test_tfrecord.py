"""TFRecord tf.train.Example input: string/int64/float features of fixed or variable length,
missing values, and bad records named by file and record number."""

from __future__ import annotations

from pathlib import Path

import pytest

from etj.api.spec import DataSpec, ModelSpec

MODEL = {
    "embeddings": [
        {"name": "ids", "vocabularySize": 1000, "dimension": 4},
        {"name": "tags", "vocabularySize": 100, "dimension": 4},
    ],
    "features": [
        {"name": "click", "kind": "label", "valueType": "int"},
        {"name": "price", "kind": "dense", "default": -1},
        {"name": "user", "kind": "categorical", "table": "ids"},
        {"name": "item", "kind": "categorical", "table": "ids", "valueType": "int"},
        {"name": "tags", "kind": "categorical", "table": "tags", "delimiter": "|", "maxLength": 2},
    ],
}


def _example(**features):
    import tensorflow as tf

    def feature(v):
        if isinstance(v, list) and (not v or isinstance(v[0], bytes)):
            return tf.train.Feature(bytes_list=tf.train.BytesList(value=v))
        if isinstance(v, list) and v and isinstance(v[0], float):
            return tf.train.Feature(float_list=tf.train.FloatList(value=v))
        return tf.train.Feature(int64_list=tf.train.Int64List(value=v))

    return tf.train.Example(
        features=tf.train.Features(feature={k: feature(v) for k, v in features.items()})
    ).SerializeToString()


def _write(path: Path, records: list[bytes]) -> Path:
    import tensorflow as tf

    with tf.io.TFRecordWriter(str(path)) as w:
        for r in records:
            w.write(r)
    return path


def _read(path: Path, max_bad: int = 0) -> list[dict]:
    from etj_trainer.data.pipeline import feature_dataset

    data = DataSpec.model_validate(
        {
            "source": "files",
            "files": {"pattern": str(path), "format": "tfrecord"},
            "maxBadRecords": max_bad,
        }
    )
    ds = feature_dataset(ModelSpec.model_validate(MODEL), data, 16, repeat=False)
    return [{k: v.numpy() for k, v in b.items()} for b in ds]


GOOD = dict(click=[1], price=[2.5], user=[b"u1"], item=[7], tags=[b"a", b"b", b"c"])


def test_fixed_and_variable_length_features_and_missing_values(tmp_path: Path):
    path = _write(
        tmp_path / "a.tfrecord",
        [_example(**GOOD), _example(click=[0], tags=[b"b"]), _example(**{**GOOD, "tags": []})],
    )
    (batch,) = _read(path)
    assert batch["label"].tolist() == [1.0, 0.0, 1.0]
    assert batch["dense"][:, 0].tolist() == [2.5, -1.0, 2.5]  # missing: the default
    assert batch["ids/user"][1, 0] == 0 and batch["ids/item"][1, 0] == 0  # missing ids
    assert batch["ids/item"][0, 0] == 1 + 7  # an int64 id: modulo, after the reserved row
    tags = batch["ids/tags"]
    assert tags.shape == (3, 2) and (tags[0] > 0).all()  # three tags cut to maxLength 2
    assert tags[1][0] == tags[0][1] and tags[1][1] == -1
    assert (tags[2] == -1).all()


def test_a_record_of_the_wrong_type_names_file_and_record(tmp_path: Path):
    from etj_trainer.data.records import data_error_from

    records = [_example(**GOOD)] * 5 + [_example(**{**GOOD, "user": [3]})]
    path = _write(tmp_path / "a.tfrecord", records)
    with pytest.raises(Exception) as caught:
        _read(path)
    error = data_error_from(caught.value)
    assert error is not None and str(error).startswith(f"{path}:6: feature user"), caught.value


def test_a_text_file_is_not_a_tfrecord_file(tmp_path: Path):
    from etj_trainer.data.records import DataError

    path = tmp_path / "a.tfrecord"
    path.write_text("label,user\n1,u1\n")
    with pytest.raises(DataError, match=r"a.tfrecord:1: not a TFRecord file"):
        _read(path)


def test_first_record_type_mismatch_is_found_before_training(tmp_path: Path):
    from etj_trainer.data.records import DataError

    path = _write(tmp_path / "a.tfrecord", [_example(**{**GOOD, "price": [b"cheap"]})])
    with pytest.raises(
        DataError, match="feature price is a bytes_list but the spec reads a float_list"
    ):
        _read(path)


def test_missing_labels_are_bad_records_skipped_and_counted(tmp_path: Path):
    from etj_trainer.data.records import DataError, data_error_from

    no_label = {k: v for k, v in GOOD.items() if k != "click"}
    records = [_example(**GOOD), _example(**no_label), _example(**{**GOOD, "click": [3]})]
    path = _write(tmp_path / "a.tfrecord", records)
    batches = _read(path, max_bad=5)
    assert sum(int(b["bad_records"]) for b in batches) == 2
    assert sum(len(b["label"]) for b in batches) == 1
    with pytest.raises(Exception) as caught:
        _read(path)
    error = data_error_from(caught.value)
    assert isinstance(error, DataError) and f"{path}:2: label click is missing" in str(error)


def test_records_of_the_wrong_type_are_skipped_and_counted_when_allowed(tmp_path: Path):
    """With maxBadRecords, a record holding a feature as another list type is a bad record:
    the others of its batch are kept (parse_example alone would fail the whole batch)."""
    records = [_example(**GOOD)] * 3 + [
        _example(**{**GOOD, "user": [3]}),  # an int64_list where the spec reads bytes
        _example(**GOOD),
        _example(**{**GOOD, "price": [b"cheap"], "item": [b"x"]}),
        _example(**{**GOOD, "click": [0]}),
    ]
    path = _write(tmp_path / "a.tfrecord", records)
    batches = _read(path, max_bad=5)
    assert sum(int(b["bad_records"]) for b in batches) == 2
    labels = [v for b in batches for v in b["label"].tolist()]
    assert labels == [1.0, 1.0, 1.0, 1.0, 0.0]
    # A record whose features are all as declared is never counted.
    clean = _write(tmp_path / "b.tfrecord", [_example(**GOOD)] * 20)
    assert sum(int(b["bad_records"]) for b in _read(clean, max_bad=5)) == 0


def test_a_text_label_reads_positive_values_as_1(tmp_path: Path):
    from etj_trainer.data.pipeline import feature_dataset

    path = _write(
        tmp_path / "a.tfrecord",
        [
            _example(**{**GOOD, "click": [b"yes"]}),
            _example(**{**GOOD, "click": [b"no"]}),
            _example(**{**GOOD, "click": [b"maybe"]}),
        ],
    )
    label = {"name": "click", "kind": "label", "positive": ["yes"], "negative": ["no"]}
    model = ModelSpec.model_validate({**MODEL, "features": [label, *MODEL["features"][1:]]})
    data = DataSpec.model_validate(
        {
            "source": "files",
            "files": {"pattern": str(path), "format": "tfrecord"},
            "maxBadRecords": 1,
        }
    )
    (batch,) = [b for b in feature_dataset(model, data, 16, repeat=False)]
    assert batch["label"].numpy().tolist() == [1.0, 0.0]
    assert int(batch["bad_records"]) == 1
