"""TFRecord input (``tf.train.Example``, plain or gzip) for jobs with ``spec.model.features``.

Each feature is read by its name as a ragged feature of its stored type (``bytes_list``
for string ids, ``int64_list`` for ``valueType: int``, ``float_list`` for labels and dense
values), so fixed- and variable-length lists both work: a missing dense value takes its
default, a missing id the reserved row, a multi-valued list keeps ``maxLength`` values.
Records are numbered per file (from 1) and that number is the ``example_names`` of
``tf.io.parse_example``, so a record of the wrong type fails as
``<file>:<record>: <what>``; records without a label or with a label that is not 0/1 are
bad records (skipped under ``data.maxBadRecords``). Under ``maxBadRecords`` a record of
the wrong type is a bad record too: its features' list kinds are read from the wire
format (``tf.io.decode_proto``) before ``parse_example``, which would fail the whole
batch, sees it.

Reads and parses; knows nothing of strategies or the model.
"""

from __future__ import annotations

import sys
from typing import Any

import tensorflow as tf

from etj.api.features import MISSING_ROW, Feature, ValueType
from etj.api.spec import FileData
from etj_trainer.data import features as fx
from etj_trainer.data.batch import DENSE_KEY, LABEL_KEY, input_key
from etj_trainer.data.records import (
    BAD_KEY,
    Check,
    DataError,
    Sharding,
    check_file_start,
    checked,
    compression_of,
    location,
    sharded_batches,
)

SHUFFLE_BATCHES = 16
_DTYPES = {ValueType.STRING: tf.string, ValueType.INT: tf.int64, ValueType.FLOAT: tf.float32}
# The list kinds of a tf.train.Feature, in its proto's field order.
_KINDS = ("bytes_list", "float_list", "int64_list")
_LISTS = {
    ValueType.STRING: "bytes_list",
    ValueType.INT: "int64_list",
    ValueType.FLOAT: "float_list",
}


def preflight(files: list[str], data: FileData, fs: fx.FeatureSet) -> None:
    """Check every file's start and its first record against the declared features."""
    for path in files:
        check_file_start(path, data)
        reader = tf.data.TFRecordDataset(path, compression_type=compression_of(path, data))
        try:
            first = next(iter(reader.take(1)), None)
        except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as e:
            raise DataError(
                f"{path}:1: not a TFRecord file ({e.message.splitlines()[0]})"
            ) from None
        if first is None:
            raise DataError(f"{path}:1: empty file (no records)")
        try:
            example = tf.train.Example.FromString(first.numpy())
        except Exception:  # protobuf's DecodeError: the record is not an Example
            raise DataError(f"{path}:1: the record is not a tf.train.Example") from None
        present = example.features.feature
        for f in fs.features:
            if f.source not in present:
                continue
            kind = present[f.source].WhichOneof("kind")
            want = _LISTS[f.stored_type]
            if kind is not None and kind != want:
                raise DataError(
                    f"{path}:1: feature {f.name} is a {kind} but the spec reads a {want} "
                    f"(valueType {f.stored_type})"
                )


class ExampleParser:
    """Parses a batch of numbered serialized Examples into model input."""

    def __init__(self, fs: fx.FeatureSet, max_bad: int):
        self.fs = fs
        self.max_bad = max_bad
        self.spec = {
            f.source: tf.io.RaggedFeature(_DTYPES[f.stored_type], row_splits_dtype=tf.int64)
            for f in fs.features
        }

    def __call__(self, file: tf.Tensor, number: tf.Tensor, record: tf.Tensor) -> dict[str, Any]:
        if self.max_bad == 0:
            return self._parse(file, number, record)
        # parse_example fails a whole batch on one record of the wrong type: when bad
        # records may be skipped, find those first (from the records' wire format) and
        # parse the others.
        wrong, what = self._wrong_types(record)
        keep = tf.logical_not(wrong)

        def log() -> tf.Tensor:
            i = tf.argmax(tf.cast(wrong, tf.int32), output_type=tf.int32)
            note = tf.strings.join(
                ["skipped bad record: ", location(file[i], number[i]), ": ", what[i]]
            )
            with tf.control_dependencies([tf.print(note, output_stream=sys.stderr)]):
                return tf.constant(True)

        logged = tf.cond(tf.reduce_any(wrong), log, lambda: tf.constant(False))
        with tf.control_dependencies([logged]):
            file, number, record = (tf.boolean_mask(t, keep) for t in (file, number, record))
        out = self._parse(file, number, record)
        out[BAD_KEY] += tf.reduce_sum(tf.cast(wrong, tf.int64))
        return out

    def _wrong_types(self, record: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """Which records hold a declared feature as another list type than the spec reads,
        and what is wrong with each (decoded with ``tf.io.decode_proto``: Example ->
        Features -> its entries -> each Feature's list kind; nothing fails)."""
        _, (features,) = tf.io.decode_proto(record, "tensorflow.Example", ["features"], [tf.string])
        counts, (entries,) = tf.io.decode_proto(
            features[:, 0], "tensorflow.Features", ["feature"], [tf.string]
        )
        width = tf.shape(entries)[1]
        present = tf.sequence_mask(counts[:, 0], width)
        _, (keys, values) = tf.io.decode_proto(
            tf.reshape(entries, [-1]),
            "tensorflow.Features.FeatureEntry",
            ["key", "value"],
            [tf.string, tf.string],
        )
        kinds, _ = tf.io.decode_proto(
            values[:, 0], "tensorflow.Feature", list(_KINDS), [tf.string] * len(_KINDS)
        )
        kinds = tf.reshape(kinds > 0, [-1, width, len(_KINDS)])
        keys = tf.reshape(keys[:, 0], [-1, width])
        set_kind = tf.reduce_any(kinds, axis=2)
        wrong = tf.zeros_like(counts[:, 0], tf.bool)
        what = tf.fill(tf.shape(wrong), "")
        for f in reversed(self.fs.features):  # the first feature's message wins
            want = _LISTS[f.stored_type]
            other = tf.logical_not(kinds[:, :, _KINDS.index(want)])
            bad = tf.reduce_any(present & tf.equal(keys, f.source) & set_kind & other, axis=1)
            message = f"feature {f.name} is not a {want} (valueType {f.stored_type})"
            what = tf.where(bad, message, what)
            wrong = tf.logical_or(wrong, bad)
        return wrong, what

    def _parse(self, file: tf.Tensor, number: tf.Tensor, record: tf.Tensor) -> dict[str, Any]:
        names = location(file, number)
        parsed = tf.io.parse_example(record, self.spec, example_names=names)
        label = self.fs.label
        values = parsed[label.source]
        count = values.row_lengths()
        missing = tf.not_equal(count, 1)
        if label.positive is not None:
            text = values.to_tensor(default_value="", shape=[None, 1])[:, 0]
            value, bad = fx.text_label(text, label)
            unusable = tf.logical_and(tf.logical_not(missing), bad)
            first = text
        else:
            first = tf.cast(values.to_tensor(shape=[None, 1])[:, 0], tf.float32)
            unusable = tf.logical_and(
                tf.logical_not(missing), tf.logical_not(fx.label_ok(first, label))
            )
            value = fx.label(first, label)
            first = tf.strings.as_string(first)
        need = label.label_values
        checks: list[Check] = [
            (missing, lambda i: tf.constant(f"label {label.name} is missing (or not one value)")),
            (
                unusable,
                lambda i: tf.strings.join([f"label {label.name} is not {need}: ", first[i]]),
            ),
        ]
        out: dict[str, Any] = {LABEL_KEY: value}
        if self.fs.dense:
            out[DENSE_KEY] = tf.stack([self._dense(f, parsed[f.source]) for f in self.fs.dense], 1)
        for f in self.fs.categorical:
            out[input_key(f.name)] = self._categorical(f, parsed[f.source])
        return checked(out, checks, file, number, self.max_bad)

    @staticmethod
    def _dense(f: Feature, values: tf.RaggedTensor) -> tf.Tensor:
        present = values.row_lengths() > 0
        first = tf.cast(values.to_tensor(shape=[None, 1])[:, 0], tf.float32)
        return fx.transform(tf.where(present, first, tf.constant(f.default, tf.float32)), f)

    def _categorical(self, f: Feature, values: tf.RaggedTensor) -> tf.Tensor:
        if f.stored_type == ValueType.STRING:
            values = tf.ragged.boolean_mask(values, tf.strings.length(values) > 0)
        values = values[:, : f.values_per_example]
        rows = self.fs.rows(f, values)
        if f.multi_valued:
            return fx.padded(rows, f.values_per_example)
        return rows.to_tensor(default_value=MISSING_ROW, shape=[None, 1])


def dataset(
    files: list[str],
    data: FileData,
    fs: fx.FeatureSet,
    batch_size: int,
    max_bad: int,
    sharding: Sharding,
) -> tf.data.Dataset:
    """Batches of parsed Examples from this shard of the files."""

    def read(name: tf.Tensor, compression: tf.Tensor) -> tf.data.Dataset:
        return tf.data.TFRecordDataset(name, compression_type=compression)

    batches = sharded_batches(files, data, read, 0, sharding, batch_size, SHUFFLE_BATCHES)
    return batches.map(ExampleParser(fs, max_bad), num_parallel_calls=tf.data.AUTOTUNE)
