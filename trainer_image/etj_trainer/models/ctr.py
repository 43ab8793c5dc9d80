"""The CTR model: embedding tables (sharded per the operator's plan), dense features, a tower.

The tower is the architecture's (``etj_trainer.models``); this module owns the tables,
their lookups and pooling, and feeds the tower ``tower(embeddings, dense, training)``.

Raw TensorFlow variables, not Keras: Keras 3 cannot take gradients of partitioned
variables and reads whole tables every step. The order in which variables are created is
part of the contract with the operator's planner: under ParameterServerStrategy every
table is created first, in ``ModelSpec.tables`` order (the user's tables, then any
first-order tables of the architecture), each split into exactly the planned
number of shards, so that TensorFlow's round-robin placement puts shard ``j`` of table
``t`` on ps ``(shards of the tables before t + j) % num_ps`` as the plan says. Nothing
else may be created before the tables.

This module builds variables and the forward pass; it does not train, checkpoint or
read data (the layout of a batch is ``etj_trainer.data.batch``'s).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import tensorflow as tf

from etj.api.architectures import linear_table_name
from etj.api.disk import disk_of
from etj.api.dynamic import table_rows
from etj.api.plan import TablePlan
from etj.api.spec import Dtype, EmbeddingTable, ModelSpec, Optimizer
from etj.api.trainer import TrainerConfig
from etj_trainer.data.batch import DENSE_KEY, INPUT_PREFIX, Lookup, lookups
from etj_trainer.models import TowerInputs, build_model_tower, disk, has_first_order
from etj_trainer.models.custom import tower_variables, trainable_variables
from etj_trainer.models.disk import DiskTableShards
from etj_trainer.models.dynamic import SlotReset
from etj_trainer.models.dynamic_shards import ShardedDynamicTable

STORAGE_DTYPES = {Dtype.FLOAT32: tf.float32, Dtype.BFLOAT16: tf.bfloat16, Dtype.FLOAT16: tf.float16}
# Initial embedding values are uniform in [-EMBEDDING_INIT, EMBEDDING_INIT].
EMBEDDING_INIT = 0.05


def named_lookups(model: ModelSpec) -> list[tuple[str, Lookup]]:
    """Every pooled input of the tower by its name in ``embeddings``: one per table or
    categorical feature, then (wideDeep/deepFM) each one's first-order lookup, named
    ``linear_table_name(name)``, of the same ids in table ``len(embeddings) + table``.
    Training and the serving SavedModel both feed the tower from this list."""
    own = lookups(model)
    names = [x.key.removeprefix(INPUT_PREFIX) for x in own]
    out = list(zip(names, own, strict=True))
    if has_first_order(model):
        n = len(model.embeddings)
        out += [
            (linear_table_name(name), Lookup(x.key, n + x.table, x.width, x.masked))
            for name, x in zip(names, own, strict=True)
        ]
    return out


def pooled(
    spec: EmbeddingTable,
    rows_of: Callable[[tf.Tensor], tf.Tensor],
    ids: tf.Tensor,
    width: int | None = None,
    masked: bool = False,
) -> tf.Tensor:
    """Pooled embedding of ids ``[batch, width]`` in the table ``spec``, whose rows
    ``rows_of(unique ids)`` reads (training: the table or its shards on the ps; serving:
    the exported shards).

    Each distinct id is looked up once: with Zipf-distributed ids most of a batch
    repeats, so deduplication cuts the rows read from the ps (and the rows of the
    sparse gradient sent back) several-fold. Ids are taken modulo the vocabulary, but a
    dynamic table's, which are keys its index maps (``rows_of`` does).
    ``masked``: -1 marks an absent value (a multi-valued feature with fewer values); the
    combiner pools the present ones only, and an example with none gets zeros.
    """
    distinct = unique_ids(spec, ids, masked)
    rows = tf.cast(rows_of(distinct.ids), tf.float32)
    return pool(spec, rows, distinct, width)


class DistinctIds(NamedTuple):
    """A lookup's ids deduplicated: ``ids`` (int64, each once), ``position`` (where each
    of the flattened batch ids is in ``ids``) and ``present`` (``masked``: which ids
    are not -1; else None)."""

    ids: tf.Tensor
    position: tf.Tensor
    present: tf.Tensor | None


def unique_ids(spec: EmbeddingTable, ids: tf.Tensor, masked: bool = False) -> DistinctIds:
    """The distinct ids of a lookup in ``spec`` (the first half of ``pooled``)."""
    ids = tf.cast(ids, tf.int64)
    present = ids >= 0 if masked else None
    if spec.dynamic is None:
        ids = tf.math.floormod(ids, spec.vocabulary_size)
    unique, position = tf.unique(tf.reshape(ids, [-1]))
    return DistinctIds(unique, position, present)


def pool(
    spec: EmbeddingTable, rows: tf.Tensor, distinct: DistinctIds, width: int | None = None
) -> tf.Tensor:
    """The pooled embeddings ``[batch, dimension]`` from the float32 ``rows`` of
    ``distinct.ids`` (the second half of ``pooled``)."""
    width = spec.ids_per_example if width is None else width
    present = distinct.present
    vectors = tf.gather(rows, distinct.position)
    if width == 1 and present is None:
        return vectors
    vectors = tf.reshape(vectors, [-1, width, spec.dimension])
    if present is None:
        if spec.combiner == "sum":
            return tf.reduce_sum(vectors, axis=1)
        return tf.reduce_mean(vectors, axis=1)
    weights = tf.cast(tf.reshape(present, [-1, width, 1]), tf.float32)
    total = tf.reduce_sum(vectors * weights, axis=1)
    if spec.combiner == "sum":
        return total
    return total / tf.maximum(tf.reduce_sum(weights, axis=1), 1.0)


def ids_per_table(model: ModelSpec) -> list[int]:
    """Most ids one example looks up in each table of ``model.tables`` (all its features
    together); a first-order table sees the ids of the table it belongs to."""
    out = [0] * len(model.embeddings)
    for lookup in lookups(model):
        out[lookup.table] += lookup.width
    return out + out if has_first_order(model) else out


def tower_inputs_of(spec: ModelSpec) -> TowerInputs:
    """What the tower of ``spec`` is fed: its embedding inputs in order, their widths, the
    dense width and whether each has a first-order lookup."""
    tables = list(spec.tables)
    own = lookups(spec)
    return TowerInputs(
        names=tuple(x.key.removeprefix(INPUT_PREFIX) for x in own),
        dims=tuple(tables[x.table].dimension for x in own),
        dense=spec.dense_inputs,
        linear=has_first_order(spec),
    )


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


class CtrModel(tf.Module):
    """Embedding tables + dense features -> the architecture's tower -> one logit per example."""

    def __init__(self, config: TrainerConfig, partitioner: TablePartitioner | None = None):
        super().__init__(name="ctr")
        spec, seed = config.model, config.training.seed
        # Every table: the user's, then the architecture's first-order ones (ModelSpec.tables,
        # the planner's list too).
        self.specs = list(spec.tables)
        self.lookups = lookups(spec)
        self.dense_features = spec.dense_inputs
        plans = {t.name: t for t in config.shard_plan.tables}
        # Tables first, in the spec's order: see the module docstring.
        self.tables: list[Any] = []
        for i, table in enumerate(self.specs):
            shards = plans[table.name].shards if partitioner is not None else 1
            ctx = partitioner.shards_for(shards) if partitioner else contextlib.nullcontext()
            if disk_of(table) is not None:
                self.tables.append(
                    self._make_disk_table(config, table, plans[table.name], (seed, i), partitioner)
                )
                continue
            with ctx:
                self.tables.append(self._make_table(table, (seed, i)))
        # A dynamic table's index and row state: after every table, next to each pool shard
        # (colocated: they take no turn in the round-robin placement), by table name.
        self.dynamic: dict[str, ShardedDynamicTable] = {}
        for i, table in enumerate(self.specs):
            if table.dynamic is not None:
                self.dynamic[table.name] = ShardedDynamicTable(
                    table, self.tables[i], (seed, i), STORAGE_DTYPES[table.dtype], EMBEDDING_INIT
                )
        # First-order table of user table i (wideDeep/deepFM): table n + i.
        self.first_order = has_first_order(spec)
        n = len(spec.embeddings)
        self.inputs = tower_inputs_of(spec)
        self.linear_lookups = (
            [Lookup(x.key, n + x.table, x.width, x.masked) for x in self.lookups]
            if self.first_order
            else []
        )
        self.named_lookups = named_lookups(spec)
        # The job's own tower (model.custom) or the architecture's.
        tower = build_model_tower(spec, self.inputs, seed)
        self.custom = spec.custom is not None
        if not self.custom:
            # The checkpoint key of the tower's weights stays model/tower_params (the path
            # found first), whatever the architecture: assigned before the tower itself.
            self.tower_params = tower.params
        # A custom tower's variables are saved under model/tower/<its own attribute path>.
        self.tower = tower

    @staticmethod
    def _make_table(table: Any, seed: tuple[int, int]) -> Any:
        shape = (table_rows(table), table.dimension)
        dtype = STORAGE_DTYPES[table.dtype]
        return tf.Variable(
            initial_value=_table_initializer(shape, dtype, seed),
            shape=shape,
            dtype=dtype,
            name=f"embedding/{table.name}",
        )

    @staticmethod
    def _make_disk_table(
        config: TrainerConfig,
        table: EmbeddingTable,
        plan: TablePlan,
        seed: tuple[int, int],
        partitioner: TablePartitioner | None,
    ) -> DiskTableShards:
        """A ``storage.disk`` table (``etj_trainer.models.disk``): its planned shards on the
        ps the plan names. Under ParameterServer a placeholder of one element per shard,
        partitioned as the table would be, takes the table's turns of the strategy's
        round-robin placement (so the tables after it land where the plan says) and names
        the ps of each shard; it is dropped, never saved. One process: one shard."""
        optimizer = Optimizer(table.optimizer or config.training.optimizer)
        shape = (table_rows(table), table.dimension)
        initial = _table_initializer(shape, tf.float32, seed)
        fill = disk.INITIAL_ACCUMULATOR if optimizer != Optimizer.SGD else 0.0
        if partitioner is None:
            assert plan.disk is not None
            whole = plan.disk.model_copy(
                update={"cache_rows_per_shard": [sum(plan.disk.cache_rows_per_shard)]}
            )
            plan = plan.model_copy(
                update={"rows_per_shard": [plan.rows], "shards": 1, "disk": whole}
            )
            return disk.build(table, plan, optimizer, initial, fill, [""], distributed=False)
        with partitioner.shards_for(plan.shards):
            anchor = tf.Variable(
                tf.zeros([plan.shards]), trainable=False, name=f"disk/{table.name}"
            )
        devices = [v.device for v in getattr(anchor, "variables", [anchor])]
        del anchor
        return disk.build(table, plan, optimizer, initial, fill, devices, distributed=True)

    def table_components(self, i: int) -> list[tf.Variable]:
        """The variables holding table ``i``: its shards, or the table itself."""
        table = self.tables[i]
        return list(getattr(table, "variables", [table]))

    @property
    def dense_variables(self) -> list[tf.Variable]:
        """The tower's variables the optimizer updates."""
        return trainable_variables(self.tower) if self.custom else [self.tower.params]

    @property
    def tower_variables(self) -> list[tf.Variable]:
        """Every variable of the tower the checkpoint holds (a custom tower's
        non-trainable ones too)."""
        return tower_variables(self.tower) if self.custom else [self.tower.params]

    def embed(self, i: int, ids: tf.Tensor, width: int | None = None, masked: bool = False) -> Any:
        """Pooled embedding from table ``i`` of ids ``[batch, width]`` (see ``pooled``)."""
        table = self.tables[i]
        dynamic = self.dynamic.get(self.specs[i].name)
        if dynamic is not None:

            def read(keys: tf.Tensor) -> tf.Tensor:
                # Distinct keys share fallback rows: each row is read once, so its gradient
                # comes as one summed row (an optimizer's slot update, Adagrad's square,
                # sees the row's gradient, not each key's), as under MultiWorkerMirrored.
                rows, position = tf.unique(dynamic.rows(keys))
                return tf.gather(tf.nn.embedding_lookup(table, rows), position)

            return pooled(self.specs[i], read, ids, width, masked)
        if isinstance(table, DiskTableShards):
            return pooled(self.specs[i], table.lookup, ids, width, masked)
        return pooled(self.specs[i], lambda u: tf.nn.embedding_lookup(table, u), ids, width, masked)

    def observe(self, features: dict[str, tf.Tensor], step: tf.Tensor) -> None:
        """Count a training batch's keys in its dynamic tables (none: nothing)."""
        for _, x in self.named_lookups:
            dynamic = self.dynamic.get(self.specs[x.table].name)
            if dynamic is not None:
                keys = tf.reshape(tf.cast(features[x.key], tf.int64), [-1])
                unique, _, occurrences = tf.unique_with_counts(keys)
                dynamic.observe(unique, occurrences, step)

    def dynamic_keys(
        self, features: dict[str, tf.Tensor], bound: dict[str, int]
    ) -> dict[str, tf.Tensor]:
        """Per dynamic table, a batch's keys (every lookup of it), padded with missing keys
        to ``bound[table]`` (a static shape, for collectives)."""
        keys: dict[str, list[tf.Tensor]] = {}
        for _, x in self.named_lookups:
            name = self.specs[x.table].name
            if name in self.dynamic:
                keys.setdefault(name, []).append(
                    tf.reshape(tf.cast(features[x.key], tf.int64), [-1])
                )
        out = {}
        for name, parts in keys.items():
            flat = tf.concat(parts, 0)
            pad = tf.fill([bound[name] - tf.size(flat)], tf.constant(-1, tf.int64))
            out[name] = tf.ensure_shape(tf.concat([flat, pad], 0), [bound[name]])
        return out

    def maintain(self, step: tf.Tensor, slots: dict[str, list[list[SlotReset]]]) -> None:
        """Admission and eviction in every dynamic table whose pass is due at ``step``
        (the one writer: called between steps, never from two places at once); ``slots``:
        per table, per pool component, the optimizer slots a freed row resets."""
        for name, dynamic in self.dynamic.items():
            dynamic.maintain_if_due(step, slots.get(name, []))

    def tower_inputs(
        self, features: dict[str, tf.Tensor]
    ) -> tuple[dict[str, tf.Tensor], tf.Tensor | None]:
        """The tower's arguments: each input's pooled embedding (and first-order lookup,
        under ``linear_table_name(name)``) by name, and the dense features or ``None``."""
        embeddings = {
            name: self.embed(x.table, features[x.key], x.width, x.masked)
            for name, x in self.named_lookups
        }
        dense = tf.cast(features[DENSE_KEY], tf.float32) if self.dense_features else None
        return embeddings, dense

    def logits_from_rows(
        self,
        features: dict[str, tf.Tensor],
        distinct: list[DistinctIds],
        rows: list[tf.Tensor],
        training: bool = False,
        params: tf.Tensor | None = None,
    ) -> tf.Tensor:
        """The logits from rows already read: ``rows[k]`` (float32) of ``distinct[k].ids``,
        for each of ``named_lookups`` in order (``etj_trainer.models.fused`` reads them),
        and the tower's weights already read (``params``, flat) if given."""
        embeddings = {
            name: pool(self.specs[x.table], r, d, x.width)
            for (name, x), d, r in zip(self.named_lookups, distinct, rows, strict=True)
        }
        dense = tf.cast(features[DENSE_KEY], tf.float32) if self.dense_features else None
        if params is not None:
            w = self.tower.weights(params)
            return tf.cast(self.tower.forward(w, embeddings, dense, training), tf.float32)
        return tf.cast(self.tower(embeddings, dense, training), tf.float32)

    def __call__(self, features: dict[str, tf.Tensor], training: bool = False) -> tf.Tensor:
        embeddings, dense = self.tower_inputs(features)
        # float32 logits whatever the tower computes in (a custom tower may use another).
        return tf.cast(self.tower(embeddings, dense, training), tf.float32)
