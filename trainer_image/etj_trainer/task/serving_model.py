"""The serving SavedModel on raw features: raw column values in, click probability out.

Written by the end-of-training export (``etj_trainer.task.export``, directory ``serving/``) beside
the tower SavedModel and the memory-mappable tables; what TensorFlow Serving (or
``tf.saved_model.load``) serves without any etj code. Signature ``serving_default``:

- jobs with ``spec.model.features``: one ``tf.string`` input ``[batch]`` per raw column
  (every dense and categorical feature; not the label), named after the column (characters
  a signature name cannot hold, such as ``:``, become ``_``). A value is the column's text
  exactly as a delimited file holds it: a number for a dense column, an id for a
  categorical one (integer ids as decimal text), the values joined by the feature's
  delimiter for a multi-valued one, and ``""`` for a missing value.
- jobs with tables only: one ``int64`` input ``[batch, idsPerExample]`` per table (named
  after it; ids taken modulo the vocabulary, a dynamic table's as keys) and ``dense``
  ``float32 [batch, n]``.
- output ``probability``: ``float32 [batch]``.

The same code turns the values into model input as in training: the text cells go
through ``delimited.DelimitedParser.parse_cells`` (the parser delimited text and Parquet
use: missing defaults, transforms, ``features.string_rows``/``int_rows`` hashing — TF's
Fingerprint64 ops, so the graph computes them itself —, multi-valued splitting, vocabulary
files, which the SavedModel carries as assets), and the pooled lookups and the tower's
inputs are ``model.pooled``/``model.named_lookups``, as in ``CtrModel``. A value training
would call bad data fails the request with ``request:<row>: <what>``.

Tables stay variables, one per trained shard, read by a lookup over the shards
(``ShardedVariable`` itself cannot be loaded by ``tf.saved_model.load``): no table is a
constant in the graph, so ``saved_model.pb`` stays small whatever the tables' size, and
tables past 2 GB (protobuf's limit) work. The export references the trained variables
themselves: nothing is copied into the exporting process (under ParameterServer each ps
writes its own shards, as for a checkpoint, so the export directory must be on storage
every replica shares). The tower is any object called as ``tower(embeddings, dense,
training)``, its variables saved with it.

A dynamic table (``model.embeddings[].dynamic``) is served collisionless, as trained: its
index at export (every admitted key and its row, ``DynamicIndex``) is saved with it as two
variables (keys ascending, rows), read by binary search (``tf.searchsorted``) — stock ops
TensorFlow Serving runs, no hash-table resource to rebuild at load and nothing in
``saved_model.pb`` however many ids hold a row; a key without a row reads its fallback row
as in training (``models.dynamic.with_fallback``).

This module builds and saves the serving graph; it does not train, checkpoint, read data
files or write the rest of the export.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import tensorflow as tf

from etj.api.dynamic import table_rows
from etj.api.features import FeatureKind
from etj.api.spec import ModelSpec
from etj_trainer.data.batch import DENSE_KEY
from etj_trainer.data.delimited import DelimitedParser
from etj_trainer.data.features import FeatureSet
from etj_trainer.models.ctr import named_lookups, pooled
from etj_trainer.models.dynamic import with_fallback

SIGNATURE = "serving_default"
PROBABILITY = "probability"
# Where a bad value of a request is said to be: ``request:<row>: <what>``.
REQUEST = "request"
_NOT_IN_NAME = re.compile(r"[^A-Za-z0-9_.\-/]")


def input_name(column: str) -> str:
    """The signature input of a raw column (or table)."""
    return _NOT_IN_NAME.sub("_", column)


def raw_columns(spec: ModelSpec) -> list[str]:
    """The raw columns a request gives, in spec order: every feature but the label, or
    (tables only) every table, then ``dense`` when there are dense features."""
    if spec.features is not None:
        return [f.name for f in spec.features if f.kind != FeatureKind.LABEL]
    return [t.name for t in spec.embeddings] + ([DENSE_KEY] if spec.dense_inputs else [])


def input_signature(spec: ModelSpec) -> dict[str, tf.TensorSpec]:
    """The ``serving_default`` inputs by name (see the module docstring)."""
    out: dict[str, tf.TensorSpec] = {}
    if spec.features is not None:
        for column in raw_columns(spec):
            name = input_name(column)
            if name in out:
                raise ValueError(
                    f"features {column!r} and another column both serve as input {name!r}"
                )
            out[name] = tf.TensorSpec([None], tf.string, name=name)
        return out
    for t in spec.embeddings:
        out[t.name] = tf.TensorSpec([None, t.ids_per_example], tf.int64, name=t.name)
    if spec.dense_inputs:
        out[DENSE_KEY] = tf.TensorSpec([None, spec.dense_inputs], tf.float32, name=DENSE_KEY)
    return out


def shard_rows(shards: Sequence[Any], ids: tf.Tensor) -> tf.Tensor:
    """Rows ``ids`` (int64 ``[n]``, in ``[0, rows)``) of a table split into ``shards``
    (consecutive row ranges, as a partitioned variable splits it); each shard read once."""
    if len(shards) == 1:
        return tf.gather(shards[0], ids)
    sizes = [int(s.shape[0]) for s in shards]
    starts = tf.constant(np.cumsum([0, *sizes[:-1]]), tf.int64)
    which = tf.cast(tf.searchsorted(starts[1:], ids, side="right"), tf.int32)
    local = ids - tf.gather(starts, which)
    parts = tf.dynamic_partition(local, which, len(shards))
    where = tf.dynamic_partition(tf.range(tf.size(ids)), which, len(shards))
    rows = [tf.gather(s, p) for s, p in zip(shards, parts, strict=True)]
    return tf.dynamic_stitch(where, rows)


class DynamicIndex(tf.Module):
    """A dynamic table's index as served: admitted keys and their table rows (see the
    module docstring)."""

    def __init__(self, name: str, keys: Any, rows: Any, fallback_rows: int):
        """``keys``/``rows``: every admitted key, ascending, and its row of the table."""
        super().__init__(name=f"{name}_index")
        keys, rows = np.asarray(keys, np.int64), np.asarray(rows, np.int64)
        if keys.shape != rows.shape or np.any(np.diff(keys) <= 0):
            raise ValueError(f"index of {name}: keys must ascend, one row each")
        # A last entry no lookup takes as a row (-1): the search always lands on an entry.
        self.keys = tf.Variable(
            np.append(keys, np.iinfo(np.int64).max), trainable=False, name=f"{name}_index_keys"
        )
        self.rows = tf.Variable(np.append(rows, -1), trainable=False, name=f"{name}_index_rows")
        self.fallback_rows = fallback_rows

    def __call__(self, keys: tf.Tensor) -> tf.Tensor:
        """The table's row of each key (int64 ``[n]``): its own, else its fallback row."""
        at = tf.searchsorted(self.keys, keys, side="left", out_type=tf.int64)
        own = tf.where(tf.gather(self.keys, at) == keys, tf.gather(self.rows, at), -1)
        return with_fallback(own, keys, self.fallback_rows)


@dataclass
class _Parsing:
    """What turns raw values into model input (plain Python: not saved as objects)."""

    spec: ModelSpec
    parser: DelimitedParser | None


class RawServingModel(tf.Module):
    """Raw column values -> click probability, on the trained tables and tower."""

    def __init__(
        self,
        spec: ModelSpec,
        tables: Sequence[Sequence[Any]],
        tower: Any,
        indexes: dict[str, tuple[Any, Any]] | None = None,
    ):
        """``tables``: the variables of each table of ``spec.tables`` (its shards in row
        order, or the one variable); ``tower``: called as ``tower(embeddings, dense,
        training)`` -> logits ``[batch]``; ``indexes``: per dynamic table, its admitted
        keys (ascending) and their rows."""
        super().__init__(name="serving")
        if len(tables) != len(spec.tables):
            raise ValueError(f"{len(tables)} tables given, the model has {len(spec.tables)}")
        for t, shards in zip(spec.tables, tables, strict=True):
            rows = sum(int(s.shape[0]) for s in shards)
            if rows != table_rows(t):
                raise ValueError(f"table {t.name}: {rows} rows given, {table_rows(t)} expected")
        self.tables = [list(shards) for shards in tables]
        indexes = indexes or {}
        missing = [t.name for t in spec.tables if t.dynamic is not None and t.name not in indexes]
        if missing:
            raise ValueError(f"dynamic table {missing[0]}: its index (keys, rows) is needed")
        self.indexes = {
            t.name: DynamicIndex(t.name, *indexes[t.name], t.vocabulary_size)
            for t in spec.tables
            if t.dynamic is not None
        }
        self.tower = tower
        parser = None
        vocabularies = []
        if spec.features is not None:
            fs = FeatureSet(spec)
            # Built now, so the module tracks them and the SavedModel keeps their files.
            vocabularies = [v.table for f in fs.categorical if (v := fs.vocabulary(f))]
            parser = DelimitedParser(fs, [f.source for f in fs.features], ",", max_bad=0)
        self.vocabularies = vocabularies
        self._parsing = _Parsing(spec, parser)
        self.serve = tf.function(self.probability, input_signature=[input_signature(spec)])

    def model_input(self, inputs: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        """The batch the trainer's model takes (ids per input key, ``dense``)."""
        spec, parser = self._parsing.spec, self._parsing.parser
        if parser is None:
            return dict(inputs)
        first = inputs[input_name(raw_columns(spec)[0])]
        n = tf.shape(first)[0]
        # The label column: parse_cells reads one (a valid value); unused here.
        fill = tf.fill([n], parser.fs.label.placeholder_label)
        cells = tf.stack(
            [
                fill if f.kind == FeatureKind.LABEL else inputs[input_name(f.name)]
                for f in parser.fs.features
            ],
            axis=1,
        )
        number = tf.range(1, tf.cast(n, tf.int64) + 1)
        out = parser.parse_cells(tf.fill([n], REQUEST), number, cells, [])
        return {k: v for k, v in out.items() if k == DENSE_KEY or k.startswith("ids/")}

    def probability(self, inputs: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        spec = self._parsing.spec
        batch = self.model_input(inputs)
        tables = spec.tables
        embeddings = {
            name: pooled(tables[x.table], self._rows_of(x.table), batch[x.key], x.width, x.masked)
            for name, x in named_lookups(spec)
        }
        dense = tf.cast(batch[DENSE_KEY], tf.float32) if spec.dense_inputs else None
        logits = tf.reshape(self.tower(embeddings, dense, False), [-1])
        return {PROBABILITY: tf.sigmoid(logits)}

    def _rows_of(self, i: int) -> Any:
        """How table ``i``'s vectors are read for distinct ids (a dynamic table's: keys)."""
        shards, index = self.tables[i], self.indexes.get(self._parsing.spec.tables[i].name)
        if index is None:
            return lambda ids: shard_rows(shards, ids)
        return lambda keys: shard_rows(shards, index(keys))


def local_io() -> tf.saved_model.SaveOptions:
    """Save options that write every variable from this process's own CPU.

    By default each variable is written by the host that holds it: under
    ParameterServer every ps would write its shards into ``directory`` on its own
    filesystem — a local staging directory of the chief that the ps's pods do not have
    (``NotFoundError .../variables_temp``; a gs:// export stages locally). The export is
    the chief's file, so the chief does the I/O."""
    return tf.saved_model.SaveOptions(experimental_io_device=tf.constant(0).device)


def save(
    spec: ModelSpec,
    tables: Sequence[Sequence[Any]],
    tower: Any,
    directory: str,
    indexes: dict[str, tuple[Any, Any]] | None = None,
) -> None:
    """Write the serving SavedModel of ``tables``, ``tower`` (and the dynamic tables'
    ``indexes``) to ``directory``."""
    module = RawServingModel(spec, tables, tower, indexes)
    tf.saved_model.save(
        module,
        directory,
        signatures={SIGNATURE: module.serve.get_concrete_function()},
        options=local_io(),
    )
