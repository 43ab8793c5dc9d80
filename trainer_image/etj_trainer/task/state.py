"""The training state and the training function, shared by every strategy (a chunk's
length, histogram and results: ``etj_trainer.task.step``).

``TrainingState`` owns the model, the optimizer slots (built eagerly, so they exist before
any restore — sharded Adagrad accumulators come back wrong otherwise), the global step and
the restart counter, and the checkpoint object that names them. ``train_chunk`` runs
``stepsPerExecution`` steps in one ``tf.function`` (one round-trip per chunk under
ParameterServerStrategy) and returns the chunk's mean loss and a prediction histogram the
chief turns into AUC.

Strategy-neutral: the same code runs under ParameterServerStrategy (one replica per
worker, asynchronous), MultiWorkerMirroredStrategy (gradients all-reduced) and the default
strategy (one process). It does not schedule, checkpoint to disk or report.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from etj.api.spec import Dtype
from etj.api.trainer import TrainerConfig
from etj_trainer.data.batch import LABEL_KEY
from etj_trainer.data.records import BAD_KEY
from etj_trainer.models.ctr import CtrModel, TablePartitioner, ids_per_table
from etj_trainer.models.disk import DiskPart, DiskTableShards
from etj_trainer.models.dynamic import SlotReset
from etj_trainer.models.dynamic_relayout import restore_dynamic
from etj_trainer.models.fused import Fetched, FusedTables, Pending
from etj_trainer.task.auc import BINS
from etj_trainer.task.optim import (
    SLOTS,
    Slotted,
    apply_update,
    create_slots,
    dense_optimizer,
    slot_initial,
)
from etj_trainer.task.position import CHECKPOINT_KEY, InputPosition
from etj_trainer.task.rounding import key_of
from etj_trainer.task.step import block_steps, histogram


class SlotStore(tf.Module):
    """The optimizer slots as the checkpoint sees them: one (sharded) variable per slot.

    A sharded table's slots are wrapped in a ShardedVariable like the table, so a
    checkpoint restores into a different number of shards or ps.
    """

    def __init__(self) -> None:
        super().__init__(name="slots")
        self.tables: dict[str, dict[str, Any]] = {}
        self.dense: list[list[tf.Variable]] = []


class TrainingState:
    """Model, slots, step counter and the checkpoint object; built under the strategy scope."""

    def __init__(
        self,
        config: TrainerConfig,
        strategy: tf.distribute.Strategy,
        partitioner: TablePartitioner | None = None,
        sync_replicas: bool = False,
        fused: bool | None = None,
    ):
        self.config = config
        self.strategy = strategy
        self.sync_replicas = sync_replicas
        # Under ParameterServer (a partitioner) many workers run steps at once: the dynamic
        # tables' one writer is the coordinator, between steps (``maintain_between_steps``),
        # not the step function.
        self.maintain_in_step = partitioner is None
        # The step of each dynamic table's last pass run by the coordinator.
        self._maintained: dict[str, int] = {}
        self._maintain_fns: dict[tuple[str, ...], Any] = {}
        self._stats_fn: Any = None
        self._disk_stats_fn: Any = None
        default_opt = str(config.training.optimizer)
        lr = config.training.learning_rate
        with strategy.scope():
            # The model first: its tables must be the first variables created.
            self.model = CtrModel(config, partitioner)
            self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
            # A following job's position in its input: model state, in the checkpoint.
            files = config.data.files
            kafka = config.data.kafka is not None
            follows = kafka or (files is not None and files.follow is not None)
            records = InputPosition.records_variable() if follows else None
            self.items: list[Slotted] = []
            self.table_items: list[list[Slotted]] = []
            self.slots = SlotStore()
            # Per dynamic table, per pool component: the optimizer slots a freed row resets.
            self.dynamic_slots: dict[str, list[list[SlotReset]]] = {}
            for i, table in enumerate(config.model.tables):
                opt = str(table.optimizer or default_opt)
                # A shard's first row in the table: stochastic rounding draws by global row.
                key, offset, parts = key_of(table.name, config.training.seed), 0, []
                on_disk = isinstance(self.model.tables[i], DiskTableShards)
                for v in self.model.table_components(i):
                    # A disk table's slots are in its records, beside each row.
                    slots = [] if on_disk else create_slots(strategy, v, opt)
                    parts.append(Slotted(v, opt, lr, slots, key=key, row_offset=offset))
                    offset += int(v.shape[0])
                self.items += parts
                self.table_items.append(parts)
                self.slots.tables[table.name] = (
                    _disk_slots(opt, self.model.tables[i]) if on_disk else _group_slots(opt, parts)
                )
                if table.dynamic is not None:
                    # What a dynamic table's eviction resets with a freed row.
                    self.dynamic_slots[table.name] = [
                        [
                            SlotReset(var, slot_initial(opt, name))
                            for name, var in zip(SLOTS[opt], part.slots, strict=True)
                        ]
                        for part in parts
                    ]
            dense_opt = dense_optimizer(default_opt)
            for v in self.model.dense_variables:
                item = Slotted(v, dense_opt, lr, create_slots(strategy, v, dense_opt))
                self.items.append(item)
                self.slots.dense.append(item.slots)
        self.variables = [item.var for item in self.items]
        self.dense_items = self.items[sum(len(p) for p in self.table_items) :]
        # Under ParameterServerStrategy (``fused`` None), table rows travel packed, one
        # tensor per ps each way (``etj_trainer.models.fused``); elsewhere every table is
        # local or mirrored and read as it is. A dynamic table's rows too: its index
        # shards map keys to rows first (on their own ps), and the rows join the packed
        # reads and updates, so a dynamic table keeps the hashed tables of its model off
        # the plain path (``benchmarks/trainer_throughput.py --dynamic``).
        # Low-precision tables keep the plain path: its gradient rows are in the table's
        # dtype, the fused path's would not be, and the stochastic rounding must see the
        # same values whatever the strategy (the same-math tests hold it to that).
        # A disk table is read and updated through its kernels: on the fused path always.
        on_disk = any(isinstance(t, DiskTableShards) for t in self.model.tables)
        if fused is None:
            fused = on_disk or (
                isinstance(strategy, tf.distribute.experimental.ParameterServerStrategy)
                and all(t.dtype == Dtype.FLOAT32 for t in config.model.tables)
            )
        # The flat tower (not a custom one) travels with the rows of its ps.
        tower = None if self.model.custom else self.model.tower.params
        self.fused = FusedTables(self.model, tower) if fused else None
        # Most rows a sparse gradient can have: every id of a batch distinct.
        batch = config.training.batch_size_per_replica
        self._row_bound = [
            batch * n
            for i, n in enumerate(ids_per_table(config.model))
            for _ in self.model.table_components(i)
        ] + [0] * len(self.model.dense_variables)
        # Most keys one replica's batch gives each dynamic table.
        self._key_bound = {
            t.name: batch * n
            for t, n in zip(config.model.tables, ids_per_table(config.model), strict=True)
            if t.dynamic is not None
        }
        # The position's file name on the loop's device (outside the scope).
        self.position = InputPosition(records, kafka) if records is not None else None
        saved: dict[str, Any] = {CHECKPOINT_KEY: self.position} if self.position else {}
        self.checkpoint = tf.train.Checkpoint(
            model=self.model, slots=self.slots, step=self.step, **saved
        )
        # The tower's variables by checkpoint key (model/tower_params, or a custom tower's).
        self.tower_keys = checkpoint_keys(self.checkpoint, self.model.tower_variables)

    def named_variables(self) -> dict[str, list[Any]]:
        """Every saved variable by its checkpoint key, as its components (shards)."""
        out: dict[str, list[Any]] = {}
        for i in range(len(self.model.tables)):
            out[f"model/tables/{i}"] = self.model.table_components(i)
        # model/tower_params (every architecture), or a custom tower's own paths.
        out.update(self.tower_keys)
        for name, table_slots in self.slots.tables.items():
            for slot, var in table_slots.items():
                out[f"slots/tables/{name}/{slot}"] = list(getattr(var, "variables", [var]))
        for i, dense_slots in enumerate(self.slots.dense):
            for j, var in enumerate(dense_slots):
                out[f"slots/dense/{i}/{j}"] = [var]
        return out

    def restore_dynamic(self, path: str) -> None:
        """Restore the dynamic tables' index, row state and candidates from ``path`` (their
        pools and slots are restored by row with the other tables, and the step first);
        see ``models.dynamic_relayout.restore_dynamic``."""
        pools = {t.name: self.model.tables[i] for i, t in enumerate(self.config.model.tables)}
        restore_dynamic(self.model.dynamic, pools, self.dynamic_slots, path, int(self.step.numpy()))

    def maintain_every(self) -> int | None:
        """Steps between the coordinator's pauses for dynamic tables' passes (the smallest
        ``maintainEverySteps``); None when it has none to run (no dynamic table, or the
        step function runs them)."""
        if self.maintain_in_step or not self.model.dynamic:
            return None
        return min(d.maintain_every_steps for d in self.model.dynamic.values())

    def maintain_between_steps(self, step: int) -> None:
        """Run the passes due at ``step`` (a multiple of ``maintainEverySteps`` was passed
        since a table's last one), called by the coordinator while no step is in flight:
        the one writer of every index. Every table due runs in one function call, each
        shard's pass on its ps at once (a pause idles every worker: it must be short)."""
        due = tuple(
            name
            for name, d in self.model.dynamic.items()
            if step // d.maintain_every_steps
            > self._maintained.get(name, 0) // d.maintain_every_steps
        )
        if not due:
            return
        fn = self._maintain_fns.get(due)
        if fn is None:

            def passes(s: tf.Tensor) -> None:
                for name in due:
                    self.model.dynamic[name].maintain(s, self.dynamic_slots[name])

            fn = self._maintain_fns[due] = tf.function(passes)
        fn(tf.constant(step, tf.int64))
        for name in due:
            self._maintained[name] = step

    def dynamic_stats(self) -> dict[str, dict[str, int]]:
        """Per dynamic table: rows used, capacity, admitted, evicted, fallback lookups. The
        counters of every shard in one function call (one round trip, not one per
        counter: the chief reads them at every progress report)."""
        if self._stats_fn is None:
            tables = self.model.dynamic
            self._stats_fn = tf.function(lambda: {n: d.counters() for n, d in tables.items()})
        counters = self._stats_fn()
        return {n: d.stats(counters[n].numpy()) for n, d in self.model.dynamic.items()}

    def disk_tables(self) -> dict[str, DiskTableShards]:
        """The tables on the ps' disks (storage.disk), by name."""
        return {
            t.name: table
            for t, table in zip(self.model.specs, self.model.tables, strict=True)
            if isinstance(table, DiskTableShards)
        }

    def disk_counters(self) -> dict[str, dict[str, int]]:
        """Per disk table, its shards' counters summed and its shape
        (``DiskTableShards.stats``): every shard's in one function call, as
        ``dynamic_stats``."""
        tables = self.disk_tables()
        if self._disk_stats_fn is None:
            self._disk_stats_fn = tf.function(lambda: {n: t.counters() for n, t in tables.items()})
        counters = self._disk_stats_fn()
        return {n: t.stats(counters[n].numpy().tolist()) for n, t in tables.items()}

    def digest(self) -> dict[str, float]:
        """Sum of every saved variable (computed next to each shard; only scalars move)."""
        return {
            key: float(sum(variable_sum(c).numpy() for c in components))
            for key, components in self.named_variables().items()
        }

    # --- one step, in replica context -------------------------------------------------

    def _replica_step(
        self, batch: dict[str, tf.Tensor], t: tf.Tensor
    ) -> tuple[Any, Any, Any, dict[str, Any]]:
        labels = tf.cast(batch[LABEL_KEY], tf.float32)
        ctx = tf.distribute.get_replica_context()
        seen: dict[str, Any] = {}
        if self.sync_replicas and self.model.dynamic:
            # MultiWorkerMirrored: every worker holds the whole dynamic table and must count
            # the same keys to admit the same ids: every replica's keys, gathered (padded
            # to a static bound with missing keys, as collectives need equal shapes); they
            # are counted after the step, in cross-replica context, where the mirrored row
            # state takes one update for all.
            seen = {
                name: ctx.all_gather(keys, axis=0)
                for name, keys in self.model.dynamic_keys(batch, self._key_bound).items()
            }
        else:
            self.model.observe(batch, tf.cast(t, tf.int64))
        with tf.GradientTape() as tape:
            logits = self.model(batch, training=True)
            # A mean that is 0, not NaN, for a batch whose records were all skipped as bad.
            loss = tf.reduce_sum(
                tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits)
            ) / tf.maximum(tf.cast(tf.size(labels), tf.float32), 1.0)
        grads = tape.gradient(loss, self.variables)
        if self.sync_replicas:
            grads = self._all_reduce(ctx, grads)
        ctx.merge_call(self._apply, args=(grads, t))
        bad = batch.get(BAD_KEY, tf.constant(0, tf.int64))
        return loss, histogram(tf.sigmoid(logits), labels), bad, seen

    def _fused_steps(
        self, fused: FusedTables, batches: list[dict[str, tf.Tensor]], ts: list[tf.Tensor]
    ) -> list[tuple[Any, Any, Any]]:
        """Steps on a ParameterServer worker, in order: the table rows read and updated one
        packed tensor per ps each way, the tower's variables as in ``_replica_step``.
        The same math: the tape's gradient of a table is the gradient of its rows.

        A step's gradient rows go to each ps with the next step's ids (``Pending``), and
        the ps applies them before it gathers: two messages per ps and step, not three;
        the last step's go alone."""
        ctx = tf.distribute.get_replica_context()
        # The tower's weights come with the rows (``fused.tower``), or are read as variables.
        tower_item = self.dense_items[0] if fused.tower is not None else None
        dense_vars = [] if tower_item else [item.var for item in self.dense_items]
        pending: Pending | None = None
        out = []
        # Dynamic tables count the block's keys and map them to rows (on their index's ps)
        # first, as the plain path counts and maps before each step's lookups.
        dynamic_rows = (
            fused.dynamic_rows(batches, ts) if self.model.dynamic else [{} for _ in batches]
        )
        for batch, t, rows_of_keys in zip(batches, ts, dynamic_rows, strict=True):
            labels = tf.cast(batch[LABEL_KEY], tf.float32)
            fetched: Fetched = fused.fetch(batch, pending, rows_of_keys)
            weights = [] if fetched.tower is None else [fetched.tower]
            with tf.GradientTape() as tape:
                tape.watch([*fetched.rows, *weights])
                logits = self.model.logits_from_rows(
                    batch, fetched.distinct, fetched.rows, True, params=fetched.tower
                )
                loss = tf.reduce_sum(
                    tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits)
                ) / tf.maximum(tf.cast(tf.size(labels), tf.float32), 1.0)
            grads = tape.gradient(
                loss,
                [*fetched.rows, *weights, *dense_vars],
                unconnected_gradients=tf.UnconnectedGradients.ZERO,
            )
            n = len(fetched.rows)
            if tower_item is not None:
                pending = Pending(
                    fetched, grads[:n], self._table_update(t), grads[n], _update_of(tower_item, t)
                )
            else:
                pending = Pending(fetched, grads[:n], self._table_update(t))
                ctx.merge_call(self._apply_dense, args=(grads[n:], t))
            bad = batch.get(BAD_KEY, tf.constant(0, tf.int64))
            out.append((loss, histogram(tf.sigmoid(logits), labels), bad))
        if pending is not None:
            fused.apply(pending)
        return out

    def _table_update(self, t: tf.Tensor) -> Any:
        """The update of shard ``shard`` of table ``table`` at step ``t`` (on its ps)."""

        def update(table: int, shard: int, grad: tf.IndexedSlices) -> Any:
            return _update_of(self.table_items[table][shard], t)(grad)

        return update

    def _apply_dense(self, strategy: tf.distribute.Strategy, grads: list[Any], t: Any) -> None:
        for item, grad in zip(self.dense_items, grads, strict=True):
            strategy.extended.update(
                item.var,
                apply_update(item, grad, t, deduplicate=False),
                args=(grad, *item.slots),
                group=True,
            )

    def _all_reduce(self, ctx: Any, grads: list[Any]) -> list[Any]:
        """Mean of the gradients over the replicas (MultiWorkerMirrored).

        Dense gradients are all-reduced in one batch. A sparse gradient has a different
        number of rows on each replica, and collectives need equal shapes: it is padded to
        its static bound (every id of the batch distinct) with index -1, all-gathered, and
        the padding dropped; repeated rows are summed by the update (``dedup``).
        """
        out = list(grads)
        dense = [i for i, g in enumerate(grads) if not isinstance(g, tf.IndexedSlices)]
        reduced = ctx.all_reduce(tf.distribute.ReduceOp.MEAN, [grads[i] for i in dense])
        for i, g in zip(dense, reduced, strict=True):
            out[i] = g
        scale = 1.0 / ctx.num_replicas_in_sync
        for i, g in enumerate(grads):
            if isinstance(g, tf.IndexedSlices):
                out[i] = self._gather_sparse(ctx, g, self._row_bound[i], scale)
        return out

    @staticmethod
    def _gather_sparse(ctx: Any, g: tf.IndexedSlices, bound: int, scale: float) -> Any:
        pad = bound - tf.shape(g.indices)[0]
        # float32 on the wire: a float16 table's gradient rows keep their bits until the
        # update sums them in float32 (and collectives have no bfloat16 kernels).
        values = tf.pad(tf.cast(g.values, tf.float32), [[0, pad], [0, 0]])
        indices = tf.pad(tf.cast(g.indices, tf.int64), [[0, pad]], constant_values=-1)
        values = tf.ensure_shape(values, [bound, g.values.shape[1]])
        indices = tf.ensure_shape(indices, [bound])
        values = ctx.all_gather(values, axis=0)
        indices = ctx.all_gather(indices, axis=0)
        keep = indices >= 0
        return tf.IndexedSlices(
            tf.boolean_mask(values, keep) * tf.cast(scale, values.dtype),
            tf.boolean_mask(indices, keep),
            g.dense_shape,
        )

    def _apply(self, strategy: tf.distribute.Strategy, grads: list[Any], t: Any) -> None:
        for item, grad in zip(self.items, grads, strict=True):
            strategy.extended.update(
                item.var,
                apply_update(item, grad, t, deduplicate=self.sync_replicas),
                args=(grad, *item.slots),
                group=True,
            )

    # --- a chunk of steps, in cross-replica context ---------------------------------

    def _steps(self, iterator: Any, ts: list[tf.Tensor]) -> list[tuple[Any, Any, Any]]:
        """Steps ``ts`` in order: (loss, histogram, bad records) of each."""
        if self.fused is None:
            return [self._step(iterator, t) for t in ts]
        if self.maintain_in_step and self.model.dynamic:
            # Admission and eviction between every two steps (one process, in tests): no
            # step's gradient may wait for the next step's message past them.
            out = []
            for t in ts:
                out += self._fused_block(self.fused, iterator, [t])
                self.model.maintain(tf.cast(t, tf.int64), self.dynamic_slots)
            return out
        return self._fused_block(self.fused, iterator, ts)

    def _fused_block(
        self, fused: FusedTables, iterator: Any, ts: list[tf.Tensor]
    ) -> list[tuple[Any, Any, Any]]:
        """A block's steps in one replica call, so that a step's gradient rows can travel
        with the next step's ids; the batches taken in the same order."""
        batches = [next(iterator) for _ in ts]
        local = self.strategy.experimental_local_results
        results = self.strategy.run(lambda b, t: self._fused_steps(fused, b, t), args=(batches, ts))
        return [tuple(local(x)[0] for x in step) for step in results]  # type: ignore[misc]

    def _step(self, iterator: Any, t: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        local = self.strategy.experimental_local_results
        loss, h, bad, seen = self.strategy.run(self._replica_step, args=(next(iterator), t))
        for name, keys in seen.items():
            # Every replica's keys (MultiWorkerMirrored), the same on every worker.
            unique, _, occurrences = tf.unique_with_counts(local(keys)[0])
            self.model.dynamic[name].observe(unique, occurrences, tf.cast(t, tf.int64))
        if self.maintain_in_step:
            # Dynamic tables' admission and eviction, between this step and the next.
            self.model.maintain(tf.cast(t, tf.int64), self.dynamic_slots)
        return local(loss)[0], local(h)[0], local(bad)[0]

    @tf.function
    def train_chunk(
        self, iterator: Any, steps: tf.Tensor
    ) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        """``steps`` (an int64 tensor: no retracing for a short last chunk) training steps;
        the mean loss, the prediction histogram and the bad records the input skipped."""
        return self._chunk(iterator, steps)

    @tf.function
    def train_chunk_packed(self, iterator: Any, steps: tf.Tensor) -> tf.Tensor:
        """``train_chunk``'s three results and the chunk's seconds on the device that ran
        it, in one float64 vector (``unpack_chunk`` reads it).

        For ClusterCoordinator, which copies each value a closure returns to the chief with
        its own round trip while the worker waits for its next closure: one value, not
        three, makes that one round trip a closure (``benchmarks/RESULTS.md``,
        trainer_throughput.py). float64 holds the counts exactly (a chunk's examples).
        The seconds size the next chunks (``etj_trainer.task.chunk_size``): timed here, on
        the worker, they are the steps' own, not the chief's queue."""
        began = tf.timestamp()
        with tf.control_dependencies([began]):  # the steps start after it
            steps = tf.identity(steps)
        loss, hist, skipped = self._chunk(iterator, steps)
        with tf.control_dependencies([loss, hist, skipped]):  # and end before this
            seconds = tf.timestamp() - began
        return tf.concat(
            [
                tf.cast(tf.reshape(loss, [1]), tf.float64),
                tf.cast(tf.reshape(skipped, [1]), tf.float64),
                tf.reshape(seconds, [1]),
                tf.cast(tf.reshape(hist, [-1]), tf.float64),
            ],
            axis=0,
        )

    def train_batches(self, batches: tf.data.Dataset) -> tf.Tensor:
        """One step on each batch of ``batches`` (a finite dataset: one followed file), the
        step counter and the position's records advanced at every step; the results packed
        for the loop (``etj_trainer.task.step.unpack_file``): mean loss, bad records,
        seconds, steps, histogram. Traced inside the caller's ``tf.function``.

        Counted as they run, not at the end as ``_chunk`` counts: a followed file is run
        once or rolled back (``etj_trainer.task.follow``), and the records a restored
        checkpoint holds must be the ones its tables learned from."""
        assert self.position is not None
        began = tf.timestamp()
        loss_sum = tf.constant(0.0)
        hist = tf.zeros([2, BINS])
        skipped = tf.constant(0, tf.int64)
        steps = tf.constant(0, tf.int64)
        # An iterator, not the dataset: autograph runs a loop over a dataset as its reduce
        # function, where the ps's variables cannot be updated.
        for batch in iter(batches):
            t = tf.cast(self.step.assign_add(1), tf.float32)
            for loss, h, bad in self._steps(iter([batch]), [t]):
                loss_sum += loss
                hist += h
                skipped += bad
            taken = tf.cast(tf.shape(batch[LABEL_KEY])[0], tf.int64)
            self.position.records.assign_add(taken)
            steps += 1
        with tf.control_dependencies([loss_sum, hist, skipped, steps]):
            seconds = tf.timestamp() - began
        return tf.concat(
            [
                tf.reshape(
                    tf.cast(loss_sum / tf.maximum(tf.cast(steps, tf.float32), 1.0), tf.float64), [1]
                ),
                tf.cast(tf.reshape(skipped, [1]), tf.float64),
                tf.reshape(seconds, [1]),
                tf.cast(tf.reshape(steps, [1]), tf.float64),
                tf.cast(tf.reshape(hist, [-1]), tf.float64),
            ],
            axis=0,
        )

    def _chunk(self, iterator: Any, steps: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        """The body of ``train_chunk`` (traced by it and by ``train_chunk_packed``).

        Steps run in blocks (``block_steps``: ``UNROLL``, at most ``stepsPerExecution``;
        ``LONG_UNROLL`` for long chunks of a long job) written out in the graph: each loop
        iteration costs control messages to every device the loop touches (the ps under
        ParameterServerStrategy),
        and under ParameterServer a block's first step sends its ids alone and its last
        step its gradient alone, so fewer iterations are measurably faster (10 instead of
        1: ~10-15 %; 25 instead of 10: 5-10 %; ``benchmarks/RESULTS.md``).
        """
        loss_sum = tf.constant(0.0)
        hist = tf.zeros([2, BINS])
        skipped = tf.constant(0, tf.int64)
        start = self.step.read_value()
        # Every copy of the step is traced and compiled (minutes for a wide model on a busy
        # machine): never more copies than a chunk can run (stepsPerExecution).
        unroll = block_steps(self.config)
        blocks = steps // unroll
        for b in tf.range(blocks):
            ts = [tf.cast(start + b * unroll + j + 1, tf.float32) for j in range(unroll)]
            for loss, h, bad in self._steps(iterator, ts):
                loss_sum += loss
                hist += h
                skipped += bad
        # The rest of a chunk that is no whole number of blocks (none when blocks are 1 step).
        if unroll > 1:
            for r in tf.range(steps - blocks * unroll):
                t = tf.cast(start + blocks * unroll + r + 1, tf.float32)
                for loss, h, bad in self._steps(iterator, [t]):
                    loss_sum += loss
                    hist += h
                    skipped += bad
        # Counted at the end: a chunk cut short by a lost worker is re-run whole elsewhere
        # and counted once.
        self.step.assign_add(steps)
        return loss_sum / tf.cast(steps, tf.float32), hist, skipped


def _update_of(item: Slotted, t: tf.Tensor) -> Any:
    """The update of ``item``'s variable with a gradient at step ``t`` (call it in the
    variable's device scope: on its ps under ParameterServer)."""
    return lambda grad: apply_update(item, grad, t, deduplicate=False)(item.var, grad, *item.slots)


def checkpoint_keys(root: tf.train.Checkpoint, variables: list[Any]) -> dict[str, list[Any]]:
    """Each variable's key in checkpoints of ``root`` (without ``/.ATTRIBUTES/...``): its
    first path from the root, found the way the checkpoint writer finds it. TensorFlow has
    no public call for this; a custom tower's variables sit at paths its author chose."""
    from tensorflow.python.checkpoint import graph_view, util

    view = graph_view.ObjectGraphView(root)
    names = util.objects_ids_and_slot_variables_and_paths(view, skip_slot_variables=True)[4]
    return {names[v]: [v] for v in variables}


def _group_slots(optimizer: str, parts: list[Slotted]) -> dict[str, Any]:
    grouped: dict[str, Any] = {}
    for n, name in enumerate(SLOTS[optimizer]):
        components = [p.slots[n] for p in parts]
        if len(components) == 1:
            grouped[name] = components[0]
        else:
            grouped[name] = tf.__internal__.distribute.ShardedVariable(components, name=name)
    return grouped


def _disk_slots(optimizer: str, table: DiskTableShards) -> dict[str, Any]:
    """A disk table's slot (none for SGD) under the name a table in RAM saves it by."""
    view = table.slot_view()
    return {SLOTS[optimizer][0]: view} if view is not None else {}


def variable_sum(var: Any) -> tf.Tensor:
    """The float64 sum of a variable, computed on the variable's own device: an eager op
    given no device runs on the default one, which would copy a ps's shard to the chief.
    A disk table's part sums itself piece by piece there."""
    if isinstance(var, DiskPart):
        return var.sum()
    with tf.device(var.device):
        return tf.reduce_sum(tf.cast(var, tf.float64))
