"""The CTR model: embedding tables (sharded per the operator's plan), dense features, an MLP.

Raw TensorFlow variables, not Keras: Keras 3 cannot take gradients of partitioned
variables and reads whole tables every step. The order in which variables are created is
part of the contract with the operator's planner: under ParameterServerStrategy every
table is created first, in ``model.embeddings`` order, each split into exactly the planned
number of shards, so that TensorFlow's round-robin placement puts shard ``j`` of table
``t`` on ps ``(shards of the tables before t + j) % num_ps`` as the plan says. Nothing
else may be created before the tables.

This module builds variables and the forward pass; it does not train, checkpoint or
read data.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import tensorflow as tf

from etj.api.spec import ModelSpec
from etj.api.trainer import TrainerConfig

STORAGE_DTYPES = {"float32": tf.float32, "bfloat16": tf.bfloat16, "float16": tf.float16}
DENSE_KEY = "dense"
LABEL_KEY = "label"
# Initial embedding values are uniform in [-EMBEDDING_INIT, EMBEDDING_INIT].
EMBEDDING_INIT = 0.05


@dataclass(frozen=True)
class Lookup:
    """One pooled embedding input of the tower: batch key ``key`` looked up in table
    ``table`` (an index into ``model.embeddings``), ``width`` ids per example; ``masked``
    ids are padded with -1 (multi-valued features), which pooling leaves out."""

    key: str
    table: int
    width: int
    masked: bool


INPUT_PREFIX = "ids/"


def input_key(feature: str) -> str:
    """The batch key of a categorical feature's rows (apart from "label" and "dense")."""
    return f"{INPUT_PREFIX}{feature}"


def lookups(model: ModelSpec) -> list[Lookup]:
    """The tower's embedding inputs: one per table (etj's own layout), or one per
    categorical feature (``model.features``; several may share a table)."""
    if model.features is None:
        return [Lookup(t.name, i, t.ids_per_example, False) for i, t in enumerate(model.embeddings)]
    index = {t.name: i for i, t in enumerate(model.embeddings)}
    return [
        Lookup(input_key(f.name), index[f.table], f.values_per_example, f.multi_valued)
        for f in model.features
        if f.table is not None
    ]


def ids_per_table(model: ModelSpec) -> list[int]:
    """Most ids one example looks up in each table (all its features together)."""
    out = [0] * len(model.embeddings)
    for lookup in lookups(model):
        out[lookup.table] += lookup.width
    return out


class TablePartitioner:
    """``variable_partitioner`` for ParameterServerStrategy: the plan's shard count for
    the table being created, 1 for every other variable.

    TensorFlow calls a partitioner with only the shape and dtype, so two tables of the same
    shape could not be told apart; the model announces the table it is about to create with
    ``shards_for`` instead. FixedShards would also split the small dense variables.
    """

    def __init__(self) -> None:
        self._pending: int | None = None

    def __call__(self, shape: tf.TensorShape, dtype: tf.DType | None = None) -> list[int]:
        return [self._pending or 1] + [1] * (len(shape) - 1)

    @contextlib.contextmanager
    def shards_for(self, shards: int) -> Iterator[None]:
        self._pending = shards
        try:
            yield
        finally:
            self._pending = None


def _table_initializer(shape: tuple[int, int], dtype: tf.DType, seed: tuple[int, int]) -> Any:
    """An initial value a partitioned variable can build shard by shard, on its ps.

    ParameterServerStrategy passes ``partition_shape``/``partition_offset``; the value then
    never crosses the network and no 2 GB protobuf limit applies. Seeded by the row
    offset, so a shard's initial rows do not depend on where it runs.
    """

    def initial_value(
        partition_shape: tuple[int, ...] | None = None,
        partition_offset: tuple[int, ...] | None = None,
    ) -> tf.Tensor:
        part = partition_shape or shape
        offset = partition_offset[0] if partition_offset else 0
        value = tf.random.stateless_uniform(
            part,
            seed=tf.constant([seed[0], seed[1] * 1_000_003 + offset], tf.int64),
            minval=-EMBEDDING_INIT,
            maxval=EMBEDDING_INIT,
        )
        return tf.cast(value, dtype)

    return initial_value


def _glorot(shape: tuple[int, int], seed: tuple[int, int]) -> tf.Tensor:
    limit = (6.0 / (shape[0] + shape[1])) ** 0.5
    return tf.random.stateless_uniform(shape, seed=seed, minval=-limit, maxval=limit)


class CtrModel(tf.Module):
    """Embedding tables + dense features -> MLP -> one logit per example."""

    def __init__(self, config: TrainerConfig, partitioner: TablePartitioner | None = None):
        super().__init__(name="ctr")
        spec, seed = config.model, config.training.seed
        self.specs = list(spec.embeddings)
        self.lookups = lookups(spec)
        self.dense_features = spec.dense_inputs
        plans = {t.name: t for t in config.shard_plan.tables}
        # Tables first, in the spec's order: see the module docstring.
        self.tables: list[Any] = []
        for i, table in enumerate(self.specs):
            shards = plans[table.name].shards if partitioner is not None else 1
            ctx = partitioner.shards_for(shards) if partitioner else contextlib.nullcontext()
            with ctx:
                self.tables.append(self._make_table(table, (seed, i)))
        width = sum(self.specs[x.table].dimension for x in self.lookups) + self.dense_features
        self.layer_shapes: list[tuple[int, int]] = []
        parts = []
        for i, units in enumerate([*spec.hidden_units, 1]):
            kernel = _glorot((width, units), (seed, 10_000 + i))
            parts += [tf.reshape(kernel, [-1]), tf.zeros([units])]
            self.layer_shapes.append((width, units))
            width = units
        # The whole MLP in one variable: under ParameterServerStrategy every variable costs
        # a read and an update round-trip to its ps each step, so one beats two per layer.
        self.tower_params = tf.Variable(tf.concat(parts, axis=0), name="tower")

    @staticmethod
    def _make_table(table: Any, seed: tuple[int, int]) -> Any:
        shape = (table.vocabulary_size, table.dimension)
        dtype = STORAGE_DTYPES[table.dtype]
        return tf.Variable(
            initial_value=_table_initializer(shape, dtype, seed),
            shape=shape,
            dtype=dtype,
            name=f"embedding/{table.name}",
        )

    def table_components(self, i: int) -> list[tf.Variable]:
        """The variables holding table ``i``: its shards, or the table itself."""
        table = self.tables[i]
        return list(getattr(table, "variables", [table]))

    @property
    def dense_variables(self) -> list[tf.Variable]:
        return [self.tower_params]

    def layers(self, params: Any = None) -> list[tuple[tf.Tensor, tf.Tensor]]:
        """(kernel, bias) of every layer, sliced out of one read of the tower variable."""
        flat = tf.convert_to_tensor(self.tower_params if params is None else params)
        out, offset = [], 0
        for width, units in self.layer_shapes:
            kernel = tf.reshape(flat[offset : offset + width * units], [width, units])
            offset += width * units
            out.append((kernel, flat[offset : offset + units]))
            offset += units
        return out

    def embed(self, i: int, ids: tf.Tensor, width: int | None = None, masked: bool = False) -> Any:
        """Pooled embedding from table ``i`` of ids ``[batch, width]``.

        Each distinct id is looked up once: with Zipf-distributed ids most of a batch
        repeats, so deduplication cuts the rows read from the ps (and the rows of the
        sparse gradient sent back) several-fold. ``masked``: -1 marks an absent value
        (a multi-valued feature with fewer values); the combiner pools the present ones
        only, and an example with none gets zeros.
        """
        spec = self.specs[i]
        width = spec.ids_per_example if width is None else width
        ids = tf.cast(ids, tf.int64)
        present = ids >= 0 if masked else None
        ids = tf.math.floormod(ids, spec.vocabulary_size)
        flat = tf.reshape(ids, [-1])
        unique, position = tf.unique(flat)
        rows = tf.nn.embedding_lookup(self.tables[i], unique)
        rows = tf.cast(rows, tf.float32)
        vectors = tf.gather(rows, position)
        if width == 1 and present is None:
            return vectors
        vectors = tf.reshape(vectors, [-1, width, spec.dimension])
        if present is None:
            if spec.combiner == "sum":
                return tf.reduce_sum(vectors, axis=1)
            return tf.reduce_mean(vectors, axis=1)
        weights = tf.cast(tf.reshape(present, [-1, width, 1]), tf.float32)
        pooled = tf.reduce_sum(vectors * weights, axis=1)
        if spec.combiner == "sum":
            return pooled
        return pooled / tf.maximum(tf.reduce_sum(weights, axis=1), 1.0)

    def tower(self, inputs: tf.Tensor) -> tf.Tensor:
        """The MLP on the concatenated pooled embeddings and dense features."""
        x = inputs
        layers = self.layers()
        last = len(layers) - 1
        for i, (kernel, bias) in enumerate(layers):
            x = tf.matmul(x, kernel) + bias
            if i < last:
                x = tf.nn.relu(x)
        return tf.squeeze(x, axis=1)

    def tower_inputs(self, features: dict[str, tf.Tensor]) -> tf.Tensor:
        parts = [self.embed(x.table, features[x.key], x.width, x.masked) for x in self.lookups]
        if self.dense_features:
            parts.append(tf.cast(features[DENSE_KEY], tf.float32))
        return tf.concat(parts, axis=1)

    def __call__(self, features: dict[str, tf.Tensor]) -> tf.Tensor:
        return self.tower(self.tower_inputs(features))
