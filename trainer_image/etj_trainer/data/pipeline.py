"""Training input as ``tf.data`` pipelines: synthetic CTR data, or TFRecord / CSV files.

Every batch is a dict: one int64 ``[batch, idsPerExample]`` tensor per embedding table
(keyed by the table name), ``dense`` float32 ``[batch, denseFeatures]`` (when the model
has dense features) and ``label`` float32 ``[batch]``.

Synthetic data has Zipf-distributed ids (a few ids are very frequent, as in click logs),
scattered over the id space so the popular ids do not all land in one shard, and a
learnable signal: each id has a fixed hidden score (a hash of the id), and the click
probability is a logistic function of the example's id scores and dense features, so a
model that learns its embeddings sees the loss really fall.

File layout (what ``etj_trainer.data.datagen`` writes):
- TFRecord: ``tf.train.Example`` with an int64 list of ``idsPerExample`` ids per table
  (feature = table name), a float list ``dense`` and a float ``<labelKey>``.
- CSV with a header: ``<labelKey>``, ``dense_0 .. dense_{n-1}``, and per table either
  ``<name>`` (one id) or ``<name>_0 .. <name>_{k-1}``; columns may come in any order.

Jobs with ``spec.model.features`` read their files through the format modules
(``etj_trainer.data.delimited``, ``etj_trainer.data.tfrecord``, ``etj_trainer.data.parquet``) and ``etj_trainer.data.features``: each
categorical feature's rows under ``ids/<feature>``, the dense features (in spec order)
under ``dense``, the label under ``label``, and the count of skipped bad records under
``bad_records``.

This module builds pipelines; it does not know about strategies or workers beyond the
shard index it is given (``ps_worker_dataset`` asks TensorFlow for a ParameterServer
worker's index).
"""

from __future__ import annotations

import math
from typing import Any

import tensorflow as tf

from etj.api.spec import DataSpec, EmbeddingTable, FileFormat, ModelSpec
from etj_trainer.data import delimited, parquet, tfrecord
from etj_trainer.data.batch import DENSE_KEY, LABEL_KEY, lookups
from etj_trainer.data.features import FeatureSet
from etj_trainer.data.records import BAD_KEY, DataError, Sharding, files_of

__all__ = [
    "DataError",
    "make_dataset",
    "ps_worker_dataset",
    "validation_dataset",
]

_SHUFFLE_RECORDS = 10_000
# 1 / golden ratio: consecutive multiples of ~0.618 x vocab modulo vocab fall evenly over
# [0, vocab) (a Weyl sequence), so the popular ranks spread over every range of rows.
_GOLDEN = (math.sqrt(5.0) - 1.0) / 2.0


def scatter_multiplier(vocab: int) -> int:
    """The multiplier that maps Zipf ranks to ids (``rank * m mod vocab``): coprime with
    ``vocab`` (a bijection: the law over distinct ids is kept) and near ``0.618 vocab``.

    A table's shards hold contiguous ranges of rows, so popular ranks left at low ids would
    all load its first shard and that shard's ps, where hashed real ids spread evenly. A
    fixed prime does not do it: 1,000,003 is 3 modulo 1,000,000, 200,000 and 1,000 (ranks
    below a third of the table at the low ids: 96 % of a 1M-row table's lookups on its
    first half). Capped so ``rank * m`` stays within int64: the search for a coprime goes
    down from there (1 always is)."""
    m = max(1, min(round(vocab * _GOLDEN), (2**63 - 1) // max(vocab, 1)))
    while math.gcd(m, vocab) != 1:
        m -= 1
    return m


def zipf_ids(shape: Any, vocab: int, exponent: float, seed: tf.Tensor, salt: int) -> tf.Tensor:
    """Ids in ``[0, vocab)`` whose rank r has probability ~ r^-exponent (inverse CDF),
    scattered over the table (``scatter_multiplier``)."""
    u = tf.random.stateless_uniform(shape, seed=seed, dtype=tf.float64)
    one_minus_s = 1.0 - exponent
    top = math.pow(vocab + 1.0, one_minus_s)
    rank = tf.floor(tf.pow(u * (top - 1.0) + 1.0, 1.0 / one_minus_s)) - 1.0
    rank = tf.clip_by_value(tf.cast(rank, tf.int64), 0, vocab - 1)
    return tf.math.floormod(rank * scatter_multiplier(vocab) + salt * 7919, vocab)


def synthetic_ids(table: EmbeddingTable) -> int:
    """Distinct ids the generator draws for ``table``: its rows, or for a dynamic table
    twice its capacity (so admission, not the data, decides which ids hold a row)."""
    return table.vocabulary_size if table.dynamic is None else 2 * table.dynamic.capacity


def hidden_score(ids: tf.Tensor, salt: int) -> tf.Tensor:
    """A fixed pseudo-random score in [-1, 1] per id: the signal the model can learn."""
    # Integer mixing (wrapping multiply, shifts) is far cheaper than string hashing.
    h = ids * 0x9E3779B1 + salt * 0x85EBCA6B
    h = tf.bitwise.bitwise_xor(h, tf.bitwise.right_shift(h, 29))
    h = tf.math.floormod(h, 2001)
    return tf.cast(h, tf.float32) / 1000.0 - 1.0


def synthetic_batch_fn(model: ModelSpec, data: DataSpec, batch_size: int, stream: Any) -> Any:
    """A function of the batch counter returning one generated batch (vectorised).

    ``stream`` (an int or a scalar tensor) selects an independent stream of batches.
    """
    settings = data.synthetic
    exponent = settings.zipf_exponent if settings else 1.1
    seed = settings.seed if settings else 0
    # One input per table (etj's own layout) or per categorical feature (a feature schema:
    # the same keys and widths as its files would give, so a schema can be tried on
    # generated data before any file exists).
    tables = [(x.key, model.embeddings[x.table], x.width) for x in lookups(model)]
    n_dense = model.dense_inputs
    # Total signal of comparable size whatever the number of tables.
    table_scale = 2.5 / math.sqrt(len(tables))
    dense_weights = tf.constant([math.sin(1.7 * (i + 1)) for i in range(n_dense)], tf.float32)

    def make_batch(counter: tf.Tensor) -> dict[str, tf.Tensor]:
        base = tf.stack([tf.cast(stream, tf.int64) + seed * 1_000_003, counter])
        features: dict[str, tf.Tensor] = {}
        logit = tf.fill([batch_size], -0.3)
        for i, (name, t, width) in enumerate(tables):
            key = base + tf.constant([7 * (i + 1), 0], tf.int64)
            ids = zipf_ids([batch_size, width], synthetic_ids(t), exponent, key, i)
            features[name] = ids
            logit += table_scale * tf.reduce_mean(hidden_score(ids, i), axis=1)
        if n_dense:
            dense = tf.random.stateless_normal(
                [batch_size, n_dense], seed=base + tf.constant([5, 0], tf.int64)
            )
            features[DENSE_KEY] = dense
            logit += tf.linalg.matvec(dense, dense_weights) / math.sqrt(n_dense)
        u = tf.random.stateless_uniform([batch_size], seed=base + tf.constant([3, 0], tf.int64))
        features[LABEL_KEY] = tf.cast(u < tf.sigmoid(logit), tf.float32)
        return features

    return make_batch


def synthetic_dataset(
    model: ModelSpec, data: DataSpec, batch_size: int, stream: Any = 0
) -> tf.data.Dataset:
    """An endless stream of generated batches; ``stream`` picks an independent stream."""
    make_batch = synthetic_batch_fn(model, data, batch_size, stream)
    ds = tf.data.Dataset.counter().map(make_batch, num_parallel_calls=tf.data.AUTOTUNE)
    return ds.prefetch(tf.data.AUTOTUNE)


def _files(data: DataSpec) -> list[str]:
    assert data.files is not None
    return files_of(data.files.pattern)


def _tfrecord_parser(model: ModelSpec, label_key: str) -> Any:
    spec = {t.name: tf.io.FixedLenFeature([t.ids_per_example], tf.int64) for t in model.embeddings}
    spec[label_key] = tf.io.FixedLenFeature([], tf.float32)
    if model.dense_features:
        spec[DENSE_KEY] = tf.io.FixedLenFeature([model.dense_features], tf.float32)

    def parse(records: tf.Tensor) -> dict[str, tf.Tensor]:
        parsed = tf.io.parse_example(records, spec)
        out = {t.name: parsed[t.name] for t in model.embeddings}
        if model.dense_features:
            out[DENSE_KEY] = parsed[DENSE_KEY]
        out[LABEL_KEY] = parsed[label_key]
        return out

    return parse


def csv_columns(model: ModelSpec, label_key: str) -> list[str]:
    """The columns a CSV file must have (in any order)."""
    columns = [label_key, *(f"dense_{i}" for i in range(model.dense_features))]
    for t in model.embeddings:
        k = t.ids_per_example
        columns += [t.name] if k == 1 else [f"{t.name}_{j}" for j in range(k)]
    return columns


def _csv_parser(model: ModelSpec, label_key: str, header: list[str]) -> Any:
    wanted = csv_columns(model, label_key)
    missing = [c for c in wanted if c not in header]
    if missing:
        raise DataError(f"CSV files lack the columns {missing} (header: {header})")
    # decode_csv wants the selected columns in file order; remember where each one lands.
    selected = sorted(header.index(c) for c in wanted)
    slot = {header[i]: n for n, i in enumerate(selected)}
    floats = {label_key, *(f"dense_{i}" for i in range(model.dense_features))}
    defaults = [
        [tf.constant(0.0, tf.float32)] if header[i] in floats else [tf.constant(0, tf.int64)]
        for i in selected
    ]

    def parse(lines: tf.Tensor) -> dict[str, tf.Tensor]:
        cols = tf.io.decode_csv(lines, record_defaults=defaults, select_cols=selected)
        out: dict[str, tf.Tensor] = {LABEL_KEY: cols[slot[label_key]]}
        if model.dense_features:
            dense = [cols[slot[f"dense_{i}"]] for i in range(model.dense_features)]
            out[DENSE_KEY] = tf.stack(dense, axis=1)
        for t in model.embeddings:
            k = t.ids_per_example
            names = [t.name] if k == 1 else [f"{t.name}_{j}" for j in range(k)]
            out[t.name] = tf.stack([cols[slot[n]] for n in names], axis=1)
        return out

    return parse


def _csv_header(path: str) -> list[str]:
    with tf.io.gfile.GFile(path) as f:
        return [c.strip() for c in f.readline().strip().split(",")]


def file_dataset(
    model: ModelSpec,
    data: DataSpec,
    batch_size: int,
    num_shards: int = 1,
    shard_index: int | tf.Tensor = 0,
    seed: int | None = None,
) -> tf.data.Dataset:
    """Batches read from the files, this worker's shard of them, repeated forever.

    Whole files are sharded when there are enough of them (each worker reads only its own
    files); otherwise records are. ``seed=None`` shuffles differently in every process.
    """
    assert data.files is not None
    files = _files(data)
    fmt, label_key = data.files.format, data.files.label_key
    by_file = len(files) >= num_shards
    names = tf.data.Dataset.from_tensor_slices(files)
    if by_file and num_shards > 1:
        names = names.shard(num_shards, shard_index)
    names = names.shuffle(len(files), seed=seed, reshuffle_each_iteration=True).repeat()

    # No more readers than this worker's files (the fewest any worker has): the list
    # repeats, so a fifth reader of four files (a second of one) would read a file again
    # alongside itself, each record twice in a row.
    cycle = min(4, len(files) // num_shards if by_file else len(files))

    def own(records: tf.data.Dataset) -> tf.data.Dataset:
        # Fewer files than shards: every num_shards-th record of each file, the same
        # ones in every pass whatever the file order.
        return records.shard(num_shards, shard_index) if not by_file else records

    if fmt == FileFormat.TFRECORD:
        records = names.interleave(
            lambda f: own(tf.data.TFRecordDataset(f)),
            cycle_length=cycle,
            num_parallel_calls=tf.data.AUTOTUNE,
        )
        parse = _tfrecord_parser(model, label_key)
    else:
        records = names.interleave(
            lambda f: own(tf.data.TextLineDataset(f).skip(1)),
            cycle_length=cycle,
            num_parallel_calls=tf.data.AUTOTUNE,
        )
        parse = _csv_parser(model, label_key, _csv_header(files[0]))
    records = records.shuffle(_SHUFFLE_RECORDS, seed=seed)
    # Batch first, then parse whole batches: one vectorised op per batch.
    ds = records.batch(batch_size, drop_remainder=True)
    ds = ds.map(parse, num_parallel_calls=tf.data.AUTOTUNE)
    return _prefetched(ds, deterministic=False)


def make_dataset(
    model: ModelSpec,
    data: DataSpec,
    batch_size: int,
    num_shards: int = 1,
    shard_index: int | tf.Tensor = 0,
    seed: int | None = None,
    stream: Any = None,
) -> tf.data.Dataset:
    """This worker's input: shard ``shard_index`` of ``num_shards``.

    ``stream`` overrides the synthetic stream (default: the shard index); see
    ``ps_worker_dataset`` for ParameterServer workers. ``shard_index`` may be a tensor
    (a worker index known only where the pipeline runs).
    """
    if data.source == "files" and model.features is not None:
        return feature_dataset(model, data, batch_size, num_shards, shard_index, seed)
    if (
        data.source == "files"
        and data.files is not None
        and data.files.format == FileFormat.PARQUET
    ):
        raise DataError("data.files.format parquet needs spec.model.features (the columns)")
    if data.source == "files":
        return file_dataset(model, data, batch_size, num_shards, shard_index, seed)
    return synthetic_dataset(
        model, data, batch_size, stream=shard_index if stream is None else stream
    )


def ps_worker_dataset(
    model: ModelSpec, data: DataSpec, batch_size: int, num_workers: int
) -> tf.data.Dataset:
    """One ParameterServer worker's input; call it inside the ``dataset_fn`` given to
    ``ClusterCoordinator.create_per_worker_dataset``.

    TensorFlow traces that function once for every worker; the worker's index is a value
    bound when it runs there (``experimental_get_current_worker_index``, TF's own way to
    shard by worker), so each worker reads its own files (every ``num_workers``-th, from
    its index; every ``num_workers``-th batch when there are fewer files than workers).
    A restarted worker gets the same index back (the coordinator rebuilds its dataset),
    so it reads the same files. Synthetic data takes an unseeded random stream per worker.
    """
    if data.source != "files":
        stream = tf.random.uniform([], maxval=2**31 - 1, dtype=tf.int64)
        return make_dataset(model, data, batch_size, stream=stream)
    if data.files is not None and data.files.format == FileFormat.PARQUET:
        raise DataError(
            "data.files.format parquet cannot be read under ParameterServer: its workers run "
            "input pipelines the coordinator ships as graphs, which cannot call pyarrow. "
            "Convert the files to TFRecord, or use strategy MultiWorkerMirrored"
        )
    index = tf.distribute.coordinator.experimental_get_current_worker_index()
    # File order and record shuffling differ in every worker process (no seed): a
    # restarted worker does not replay its first batches.
    return make_dataset(model, data, batch_size, num_shards=num_workers, shard_index=index)


def feature_dataset(
    model: ModelSpec,
    data: DataSpec,
    batch_size: int,
    num_shards: int = 1,
    shard_index: int | tf.Tensor = 0,
    seed: int | None = None,
    files: list[str] | None = None,
    repeat: bool = True,
) -> tf.data.Dataset:
    """Batches of ``model.features`` read from the files (all of them checked first: a
    missing file, an empty one, a header without a declared column stop here, before any
    training), this shard of them, shuffled and repeated forever unless ``repeat`` is off."""
    assert data.files is not None
    fs = FeatureSet(model)
    files = files or files_of(data.files.pattern)
    sharding = Sharding(num_shards, shard_index, seed, repeat)
    max_bad = data.max_bad_records
    if data.files.format == FileFormat.CSV:
        columns = delimited.preflight(files, data.files, fs, max_bad)
        ds = delimited.dataset(files, data.files, fs, columns, batch_size, max_bad, sharding)
    elif data.files.format == FileFormat.PARQUET:
        columns = parquet.preflight(files, data.files, fs)
        ds = parquet.dataset(files, data.files, fs, columns, batch_size, max_bad, sharding)
    else:
        tfrecord.preflight(files, data.files, fs)
        ds = tfrecord.dataset(files, data.files, fs, batch_size, max_bad, sharding)
    return _prefetched(ds, deterministic=not repeat)


def _prefetched(ds: tf.data.Dataset, deterministic: bool) -> tf.data.Dataset:
    """``ds`` prefetched; a training stream need not keep its order (faster)."""
    options = tf.data.Options()
    options.deterministic = deterministic
    return ds.with_options(options).prefetch(tf.data.AUTOTUNE)


def validation_dataset(model: ModelSpec, data: DataSpec, batch_size: int) -> tf.data.Dataset:
    """The held-out batches of ``data.validation``: the first ``maxExamples`` examples, in
    file order, the same every time (finite)."""
    assert data.validation is not None
    files = files_of(data.validation.pattern)
    ds = feature_dataset(model, data, batch_size, files=files, repeat=False)
    examples = ds.map(lambda b: {k: v for k, v in b.items() if k != BAD_KEY})
    return examples.unbatch().take(data.validation.max_examples).batch(batch_size)


def count_records(model: ModelSpec, data: DataSpec) -> int:
    """Examples in ``data.files`` (one full read; what ``training.epochs`` multiplies).

    With ``model.features`` the good records are counted (bad ones a job may skip are
    not); in etj's own layout, the records."""
    assert data.files is not None
    if model.features is not None:
        ds = feature_dataset(model, data, 4096, repeat=False)
        total = ds.reduce(
            tf.constant(0, tf.int64),
            lambda n, b: n + tf.cast(tf.shape(b[LABEL_KEY])[0], tf.int64),
        )
        return int(total.numpy())
    names = tf.data.Dataset.from_tensor_slices(_files(data))
    if data.files.format == FileFormat.CSV:
        records = names.interleave(lambda f: tf.data.TextLineDataset(f).skip(1))
    else:
        records = names.interleave(tf.data.TFRecordDataset)
    return int(records.reduce(tf.constant(0, tf.int64), lambda n, _: n + 1).numpy())
