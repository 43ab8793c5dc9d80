"""From raw column values to model input, per ``spec.model.features``: ids hashed to table
rows, dense transforms, labels, multi-valued id lists. Used by every input format.

Hashing: a string id becomes row ``1 + known + Fingerprint64(value) mod (vocab - 1 -
known)`` via ``tf.strings.to_hash_bucket_fast`` (FarmHash Fingerprint64: the same on every
machine, process and TensorFlow version, unlike Python's ``hash``); an integer id
(``valueType: int``) is taken modulo the same range. Row 0 is reserved for empty or
missing values; a ``vocabularyFile``'s values take rows 1..known in file order. Ids are
never parsed as numbers unless declared ``int``, so 20-digit ids past int64 hash as text.

A dynamic table's ids are not hashed here: they become keys (``etj_trainer.data.keys``)
that the table's index maps to rows.

Multi-valued features come out as ``[batch, maxLength]`` rows padded with -1 (absent),
which the model's pooling leaves out.

Vectorised TensorFlow ops on whole batches; this module reads no files besides a
vocabulary and knows nothing of formats, sharding or strategies.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import tensorflow as tf

from etj.api.features import MISSING_ROW, Feature, FeatureKind, Transform, ValueType
from etj.api.spec import ModelSpec
from etj_trainer.data.keys import keys_of

PAD = -1
# A decimal number as decode_csv and float() read it (no thousands separators).
NUMBER_RE = r"\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*|\s*[+-]?(?i:inf|nan|infinity)\s*"
# Integers an int64 holds for sure (18 digits); longer ids must be declared strings.
INT_RE = r"\s*[+-]?\d{1,18}\s*"


@dataclass
class Vocabulary:
    """Known values of a categorical feature and their rows (1..size)."""

    table: Any
    size: int


def load_vocabulary(path: str) -> Vocabulary:
    """A ``vocabularyFile``: one value per line, in row order."""
    with tf.io.gfile.GFile(path) as f:
        size = sum(1 for _ in f)
    init = tf.lookup.TextFileInitializer(
        path,
        tf.string,
        tf.lookup.TextFileIndex.WHOLE_LINE,
        tf.int64,
        tf.lookup.TextFileIndex.LINE_NUMBER,
    )
    return Vocabulary(tf.lookup.StaticHashTable(init, default_value=-1), size)


def hashed_range(vocabulary_size: int, known: int) -> int:
    """Rows that hashed values spread over (after row 0 and the known values)."""
    return max(vocabulary_size - 1 - known, 1)


def string_rows(
    values: tf.Tensor, vocabulary_size: int, vocabulary: Vocabulary | None = None
) -> tf.Tensor:
    """Rows of string ids (any shape); empty strings get the reserved row."""
    values = tf.convert_to_tensor(values, tf.string)
    known = vocabulary.size if vocabulary else 0
    if vocabulary_size == 1:
        return tf.zeros_like(values, dtype=tf.int64)
    rows = 1 + known + tf.strings.to_hash_bucket_fast(values, hashed_range(vocabulary_size, known))
    if vocabulary is not None:
        index = vocabulary.table.lookup(values)
        rows = tf.where(index >= 0, index + 1, rows)
    return tf.where(tf.strings.length(values) == 0, tf.constant(MISSING_ROW, tf.int64), rows)


def int_rows(
    values: tf.Tensor, vocabulary_size: int, vocabulary: Vocabulary | None = None
) -> tf.Tensor:
    """Rows of integer ids: modulo the hashed range (after row 0 and the known values).

    A vocabulary file holds integer ids as text; they are matched as text.
    """
    known = vocabulary.size if vocabulary else 0
    values = tf.cast(tf.convert_to_tensor(values), tf.int64)
    rows = 1 + known + tf.math.floormod(values, hashed_range(vocabulary_size, known))
    if vocabulary is not None:
        index = vocabulary.table.lookup(tf.strings.as_string(values))
        rows = tf.where(index >= 0, index + 1, rows)
    if vocabulary_size == 1:
        return tf.zeros_like(rows)
    return rows


def transform(values: tf.Tensor, feature: Feature) -> tf.Tensor:
    """A dense feature's transform on float32 values."""
    kind = Transform(feature.transform)
    if kind == Transform.LOG1P:
        return tf.math.log1p(tf.maximum(values, 0.0))
    if kind == Transform.STANDARDIZE:
        assert feature.mean is not None and feature.std is not None
        return (values - feature.mean) / feature.std
    if kind == Transform.CLIP:
        low = feature.min if feature.min is not None else float("-inf")
        high = feature.max if feature.max is not None else float("inf")
        return tf.clip_by_value(values, low, high)
    return values


def label(values: tf.Tensor, feature: Feature) -> tf.Tensor:
    """0/1 labels: value >= threshold, or the value itself (checked to be 0 or 1)."""
    if feature.threshold is not None:
        return tf.cast(values >= feature.threshold, tf.float32)
    return tf.cast(values, tf.float32)


def label_ok(values: tf.Tensor, feature: Feature) -> tf.Tensor:
    """Whether each label value is usable (0 or 1 without a threshold, finite with one)."""
    if feature.threshold is not None:
        return tf.math.is_finite(values)
    return tf.logical_or(tf.equal(values, 0.0), tf.equal(values, 1.0))


def text_label(cells: tf.Tensor, feature: Feature) -> tuple[tf.Tensor, tf.Tensor]:
    """0/1 labels of a label with ``positive`` values (text cells, trimmed) and which
    cells are bad (empty; with ``negative``: neither positive nor negative)."""
    assert feature.positive is not None
    cell = tf.strings.strip(cells)
    positive = _is_in(cell, feature.positive)
    bad = tf.equal(tf.strings.length(cell), 0)
    if feature.negative is not None:
        known = tf.logical_or(positive, _is_in(cell, feature.negative))
        bad = tf.logical_or(bad, tf.logical_not(known))
    return tf.cast(positive, tf.float32), bad


def _is_in(cell: tf.Tensor, values: list[str]) -> tf.Tensor:
    wanted = tf.constant([v.strip() for v in values])
    return tf.reduce_any(tf.equal(tf.expand_dims(cell, -1), wanted), axis=-1)


def split_values(cells: tf.Tensor, feature: Feature) -> tf.RaggedTensor:
    """A multi-valued column's values (empty values dropped), at most ``maxLength``."""
    assert feature.delimiter is not None
    parts = tf.strings.split(cells, feature.delimiter)
    parts = tf.ragged.boolean_mask(parts, tf.strings.length(parts) > 0)
    return parts[:, : feature.values_per_example]


def padded(rows: tf.RaggedTensor, width: int) -> tf.Tensor:
    """Ragged rows as ``[batch, width]``, absent values -1."""
    return rows.to_tensor(default_value=PAD, shape=[None, width])


class FeatureSet:
    """The model's features with what each needs at parse time (tables, vocabularies)."""

    def __init__(self, model: ModelSpec):
        assert model.features is not None
        self.features = list(model.features)
        self.label = next(f for f in self.features if f.kind == FeatureKind.LABEL)
        self.dense = [f for f in self.features if f.kind == FeatureKind.DENSE]
        self.categorical = [f for f in self.features if f.kind == FeatureKind.CATEGORICAL]
        self.vocabulary_size = {t.name: t.vocabulary_size for t in model.embeddings}
        self.dynamic = {t.name for t in model.embeddings if t.dynamic is not None}
        self._vocabularies: dict[str, Vocabulary] = {}

    def vocabulary(self, feature: Feature) -> Vocabulary | None:
        """The feature's vocabulary table, loaded once per pipeline."""
        if feature.vocabulary_file is None:
            return None
        if feature.name not in self._vocabularies:
            self._vocabularies[feature.name] = load_vocabulary(feature.vocabulary_file)
        return self._vocabularies[feature.name]

    def rows(self, feature: Feature, values: Any) -> Any:
        """Rows of ``values`` (strings, or int64 for ``valueType: int``; ragged or dense)."""
        assert feature.table is not None
        if feature.table in self.dynamic:
            # A dynamic table's index maps keys to rows (etj_trainer.data.keys).
            if isinstance(values, tf.RaggedTensor):
                return values.with_flat_values(keys_of(values.flat_values))
            return keys_of(values)
        size = self.vocabulary_size[feature.table]
        vocab = self.vocabulary(feature)
        convert = int_rows if feature.stored_type == ValueType.INT else string_rows
        if isinstance(values, tf.RaggedTensor):
            return values.with_flat_values(convert(values.flat_values, size, vocab))
        return convert(values, size, vocab)
