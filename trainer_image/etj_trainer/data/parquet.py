"""Parquet input (``data.files.format: parquet``) for jobs with ``spec.model.features``.

Read with pyarrow (``ParquetFile.iter_batches``: columnar decoding in C++, about 350k rows/s
per core here): only the declared columns, one record batch per training batch. Each
batch's columns become text cells (nulls empty, list columns joined with the feature's
delimiter, booleans 0/1) and go through the very parser delimited text uses
(``delimited.DelimitedParser.parse_cells``), so string ids hash to the same rows, empty or
null values (and ``data.files.nullValues`` tokens) take the same defaults and a value of the wrong type in a row is reported the
same way: ``<file>:<row>: <what>`` naming the column (rows from 1), or skipped and counted
under ``data.maxBadRecords``. A column of the wrong *type* for its feature (a list for a
single-valued feature, floats for ids, a struct) is a schema error found before training.

pyarrow runs in the Python process that runs the pipeline (``tf.data`` from a generator).
ParameterServer workers run pipelines the coordinator ships to them as graphs, which cannot
call Python: Parquet is for single-process and MultiWorkerMirrored jobs (the trainer says
so before training; convert to TFRecord for ParameterServer).

Reads and parses; knows nothing of strategies or the model.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

from etj.api.features import Feature, FeatureKind
from etj.api.spec import FileData
from etj_trainer.data import features as fx
from etj_trainer.data.batch import LABEL_KEY
from etj_trainer.data.delimited import DelimitedParser
from etj_trainer.data.records import BAD_KEY, DataError, Sharding

SHUFFLE_BATCHES = 16


def _arrow() -> Any:
    try:
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.parquet as pq
    except ImportError:  # pragma: no cover - the trainer extra and image include it
        raise DataError(
            "data.files.format parquet needs pyarrow (pip install 'etj[parquet]')"
        ) from None
    return pa, pc, pq


def _source(path: str) -> Any:
    """What pyarrow opens: a local path as it is; a remote one (gs://, s3://, hdfs://...)
    read whole through TensorFlow's filesystems (pyarrow cannot use a GFile)."""
    if "://" not in path:
        return path
    pa = _arrow()[0]
    with tf.io.gfile.GFile(path, "rb") as raw:
        return pa.BufferReader(raw.read())


def type_problem(feature: Feature, arrow_type: Any) -> str | None:
    """Why a column of ``arrow_type`` cannot feed ``feature`` (None when it can)."""
    pa = _arrow()[0]
    t = arrow_type.value_type if pa.types.is_dictionary(arrow_type) else arrow_type
    listed = pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)
    text = pa.types.is_string(t) or pa.types.is_large_string(t)
    text = text or pa.types.is_binary(t) or pa.types.is_large_binary(t)
    numeric = pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)
    numeric = numeric or pa.types.is_boolean(t)
    if listed:
        inner = t.value_type
        if feature.kind != FeatureKind.CATEGORICAL or not feature.multi_valued:
            return (
                f"is a list ({t}) but feature {feature.name} is single-valued (a list column "
                "needs a multi-valued categorical feature: give it a delimiter and maxLength)"
            )
        if pa.types.is_floating(inner) or pa.types.is_decimal(inner):
            return f"is a list of floating-point numbers ({t}); ids are strings or integers"
        if not (
            pa.types.is_integer(inner)
            or pa.types.is_string(inner)
            or pa.types.is_binary(inner)
            or pa.types.is_large_string(inner)
            or pa.types.is_large_binary(inner)
        ):
            return f"is a list of {inner}; ids are strings or integers"
        return None
    if feature.kind == FeatureKind.CATEGORICAL:
        if pa.types.is_floating(t) or pa.types.is_decimal(t):
            return f"holds floating-point numbers ({t}); ids are strings or integers"
        if not (text or pa.types.is_integer(t)):
            return f"is {t}; ids are strings or integers"
        return None
    if not (numeric or text):
        return f"is {t}; a {feature.kind} feature reads numbers"
    return None


def preflight(files: list[str], data: FileData, fs: fx.FeatureSet) -> list[str]:
    """The columns read (the features, in spec order), after checking every file: a
    Parquet file with rows and every declared column, of a type its feature can read."""
    _, _, pq = _arrow()
    columns = [f.source for f in fs.features]
    for path in files:
        try:
            meta = pq.ParquetFile(_source(path))
            schema, rows = meta.schema_arrow, meta.metadata.num_rows
        except tf.errors.OpError as e:
            raise DataError(f"{path}: cannot read: {e.message}") from None
        except Exception as e:  # pyarrow's ArrowInvalid and friends: not Parquet
            raise DataError(f"{path}: not a Parquet file ({str(e).splitlines()[0]})") from None
        if rows == 0:
            raise DataError(f"{path}:1: empty file (no rows)")
        missing = [c for c in columns if c not in schema.names]
        if missing:
            raise DataError(
                f"{path}: no column(s) {', '.join(missing)} (it has: {', '.join(schema.names[:50])})"
            )
        for f in fs.features:
            problem = type_problem(f, schema.field(f.source).type)
            if problem:
                raise DataError(f"{path}: column {f.source} {problem}")
    return columns


def text_cells(array: Any, feature: Feature) -> np.ndarray:
    """One column of a record batch as text cells (an object array; nulls empty)."""
    pa, pc, _ = _arrow()
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if pa.types.is_dictionary(array.type):
        array = array.dictionary_decode()
    t = array.type
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        # The delimiter only splits them again (a value holding it splits in two).
        strings = pc.cast(array, pa.list_(pa.string()))
        array = pc.binary_join(strings, feature.delimiter or "|")
    elif pa.types.is_boolean(t):
        array = pc.cast(pc.cast(array, pa.int8()), pa.string())
    elif not (pa.types.is_binary(t) or pa.types.is_large_binary(t)):
        array = pc.cast(array, pa.string())
    filled = pc.fill_null(
        array, pa.scalar(b"" if pa.types.is_binary(array.type) else "", array.type)
    )
    return filled.to_numpy(zero_copy_only=False)


class _Batches:
    """A generator of one file's ``(row numbers, cells)`` batches (this shard's)."""

    def __init__(self, fs: fx.FeatureSet, columns: list[str], batch_size: int):
        self.features = {f.source: f for f in fs.features}
        self.columns = columns
        self.batch_size = batch_size

    def __call__(self, path: bytes, shards: int, index: int) -> Any:
        _, _, pq = _arrow()
        first = 1
        reader = pq.ParquetFile(_source(path.decode()))
        batches = reader.iter_batches(batch_size=self.batch_size, columns=self.columns)
        for i, batch in enumerate(batches):
            n = batch.num_rows
            if i % shards == index:
                cells = np.empty((n, len(self.columns)), dtype=object)
                for j, name in enumerate(self.columns):
                    cells[:, j] = text_cells(batch.column(j), self.features[name])
                yield np.arange(first, first + n, dtype=np.int64), cells
            first += n


def dataset(
    files: list[str],
    data: FileData,
    fs: fx.FeatureSet,
    columns: list[str],
    batch_size: int,
    max_bad: int,
    sharding: Sharding,
) -> tf.data.Dataset:
    """Batches of parsed rows from this shard of the files: whole files when there are at
    least as many files as shards, else every ``num_shards``-th batch of each file."""
    repeat, seed = sharding.repeat, sharding.seed
    by_file = len(files) >= sharding.num_shards
    names = tf.data.Dataset.from_tensor_slices(files)
    if by_file and sharding.num_shards > 1:
        names = names.shard(sharding.num_shards, sharding.shard_index)
    if repeat:
        names = names.shuffle(len(files), seed=seed, reshuffle_each_iteration=True).repeat()
    split = (1, 0) if by_file else (sharding.num_shards, sharding.shard_index)
    generate = _Batches(fs, columns, batch_size)
    signature = (
        tf.TensorSpec([None], tf.int64),
        tf.TensorSpec([None, len(columns)], tf.string),
    )

    def one(name: tf.Tensor) -> tf.data.Dataset:
        rows = tf.data.Dataset.from_generator(
            generate, args=(name, split[0], split[1]), output_signature=signature
        )
        return rows.map(lambda number, cells: (tf.fill(tf.shape(number), name), number, cells))

    batches = names.interleave(
        one, cycle_length=min(4, len(files)), num_parallel_calls=tf.data.AUTOTUNE
    )
    if repeat:
        batches = batches.shuffle(SHUFFLE_BATCHES, seed=seed)
    parser = DelimitedParser(fs, columns, data.delimiter, max_bad, null_values=data.null_values)
    parsed = batches.map(
        lambda file, number, cells: parser.parse_cells(file, number, cells, []),
        num_parallel_calls=tf.data.AUTOTUNE,
    )
    return parsed.filter(lambda b: tf.logical_or(tf.size(b[LABEL_KEY]) > 0, b[BAD_KEY] > 0))
