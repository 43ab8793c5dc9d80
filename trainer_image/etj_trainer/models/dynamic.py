"""A dynamic (collisionless) embedding table on stock TensorFlow: ids earn rows of a pool.

Keys are raw ids (``etj_trainer.data.keys.keys_of``: a string through Fingerprint64, the
hash fixed tables use, kept to 63 bits; an integer as it is). A negative key is a missing value (an empty string, a
multi-valued feature's padding): it reads row 0 and is never counted or admitted. The table
is one variable of ``vocabularySize + capacity`` rows:

- rows ``[0, vocabularySize)`` are the **fallback**, hashed as a fixed table hashes (row 0
  for missing values, the rest ``1 + key mod (vocabularySize - 1)``): every id without a
  row of its own reads it. A trained fallback, not a zero row: an id below ``admitAfter`` is
  rare but not unknown, and the fallback learns what such ids share; ``vocabularySize: 1``
  makes it one shared row, more rows give the long tail a collided but closer vector;
- rows ``vocabularySize + s`` for pool slot ``s < capacity``: one admitted id each. The
  **index**, a ``tf.lookup.experimental.MutableHashTable`` key -> slot, is created on the
  pool's device. Not ``DenseHashTable``: it reserves two key values (empty, deleted) that a
  raw 64-bit key may take, and its bucket array never shrinks after erase.

Per slot: ``row_key`` (its id) and ``last_seen`` (the last step it was looked up; ``FREE``
for a free slot, so the free-slot list is ``where(last_seen == FREE)`` and can never
disagree with the used ones). Per id not yet admitted (a **candidate**): its occurrences and
last step seen, in two more hash tables.

Two kinds of access:

- ``rows`` (every step, any number of readers): index lookups only, never a change;
- ``observe`` (every step, training): the batch's unique keys with their occurrences; marks
  admitted slots seen (``scatter_max``, order-free) and counts candidates;
- ``maintain`` (every ``maintainEverySteps`` steps, **one writer**, between steps): evicts
  slots unseen for ``evictAfterSteps`` (index entry erased, row and optimizer slots reset to
  their initial values before any reuse), admits candidates seen ``admitAfter`` times into
  free slots (most frequent first), and prunes candidates to at most ``capacity`` (those
  unseen for ``evictAfterSteps`` first, then the least recently seen). Only it changes the
  index, so no two writers race on "miss -> allocate -> insert".

Everything lives in ``tf.Module`` attributes, so ``tf.train.Checkpoint`` saves the pool,
the index, the row state, the candidates and the counters together; saved between steps
they are consistent (``invariant_violations`` checks them, e.g. after a restore).

A table whose pool is sharded (ParameterServer) has one such table per pool shard, over that
shard's rows (``first_row``: the table's row of its slot 0, ``pool_row``: the shard
variable's), with its keys routed to it: ``etj_trainer.models.dynamic_shards``.

This module holds one table's (or shard's) state and its admission/eviction; it does not
route keys to shards, own the optimizer (``maintain`` is handed the slots to reset) or read
data.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import tensorflow as tf

from etj.api.spec import EmbeddingTable
from etj_trainer.data.keys import keys_of

# last_seen of a free slot.
FREE = -1
# The index's answer for a key without a slot.
NO_SLOT = -1


# Row of missing values (negative keys), as in a fixed table.
MISSING_ROW = 0


def hashed_fallback_row(keys: Any, fallback_rows: int) -> Any:
    """The fallback row of each non-negative key: 0 with one fallback row, else a hashed
    one of rows ``1..fallback_rows-1`` (row 0 stays the missing values')."""
    if fallback_rows == 1:
        return tf.zeros_like(keys)
    return 1 + tf.math.floormod(keys, fallback_rows - 1)


def with_fallback(own: Any, keys: Any, fallback_rows: int) -> Any:
    """Each key's row: its own (``own`` >= 0, admitted), else row 0 for a missing
    (negative) key, else its hashed fallback row. Training and serving read rows so."""
    other = tf.where(
        keys < 0, tf.constant(MISSING_ROW, tf.int64), hashed_fallback_row(keys, fallback_rows)
    )
    return tf.where(own >= 0, own, other)


def _flat(keys: tf.Tensor, values: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """An export's keys and scalar values as vectors (a traced export has no static shape)."""
    return tf.reshape(keys, [-1]), tf.reshape(values, [-1])


def _ranked(keys: tf.Tensor, score: tf.Tensor) -> tf.Tensor:
    """Positions of unique ``keys`` by ``score``, highest first, ties by key ascending.

    A hash table exports in an order of its own (a restored table inserts in another), so
    the order must come from the data alone: the same state then admits and prunes the
    same ids in every process and after every restore.
    """
    by_key = tf.argsort(keys, stable=True)
    by_score = tf.argsort(tf.gather(score, by_key), direction="DESCENDING", stable=True)
    return tf.gather(by_key, by_score)


@dataclass(frozen=True)
class SlotReset:
    """An optimizer slot of the table and its initial value: one row per pool row, each
    shaped as the pool's (``[rows, dim]``) or one value (row-wise Adagrad's ``[rows]``)."""

    variable: Any
    initial: float


class _Ref:
    """Holds a value where a ``tf.Module`` attribute would make it a checkpoint dependency."""

    def __init__(self, value: Any):
        self.value = value


class DynamicTable(tf.Module):
    """One dynamic table: pool, index, row state and admission candidates (see the module
    docstring)."""

    def __init__(
        self,
        spec: EmbeddingTable,
        seed: tuple[int, int] = (0, 0),
        dtype: tf.DType = tf.float32,
        init_scale: float = 0.05,
        pool: Any = None,
        *,
        capacity: int | None = None,
        first_row: int | None = None,
        pool_row: int | None = None,
        shard: int | None = None,
    ):
        """``pool``: the table variable (``vocabularySize + capacity`` rows), or, for one
        shard of a sharded table (``etj_trainer.models.dynamic_shards``), that shard's pool
        component, whose slot 0 is its row ``pool_row`` and the table's row ``first_row``,
        with ``capacity`` slots."""
        if spec.dynamic is None:
            raise ValueError(f"table {spec.name!r} has no dynamic settings")
        suffix = "" if shard is None else f"_{shard}"
        super().__init__(name=f"dynamic_{spec.name}{suffix}")
        d = spec.dynamic
        self.fallback_rows = spec.vocabulary_size
        self.capacity = d.capacity if capacity is None else capacity
        self.dimension = spec.dimension
        self.admit_after = d.admit_after
        self.evict_after_steps = d.evict_after_steps
        self.maintain_every_steps = d.maintain_every_steps
        # The table's row of slot 0, and the pool variable's.
        self.first_row = self.fallback_rows if first_row is None else first_row
        self.pool_row = self.first_row if pool_row is None else pool_row
        self._seed = seed
        self._init_scale = init_scale
        if pool is None:
            rows = self.fallback_rows + self.capacity
            # A pool of its own (a table on its own, as the unit tests build): saved with it.
            self.own_pool = pool = tf.Variable(
                self._initial_rows(tf.range(rows, dtype=tf.int64), tf.constant(0, tf.int64), dtype),
                name=f"embedding/{spec.name}",
            )
        if int(pool.shape[0]) < self.pool_row + self.capacity or pool.shape[1] != self.dimension:
            raise ValueError(
                f"pool of {spec.name!r} is {pool.shape}, not {self.pool_row + self.capacity} "
                f"rows of {spec.dimension}"
            )
        # Not an attribute the checkpoint follows: the model saves the pool as its table
        # (a shard of a sharded table would otherwise be saved a second time, whole).
        self._pool = _Ref(pool)
        # The index and the row state live where the pool does: a lookup never crosses the
        # network between them. Variables ignore a user's device scope under
        # ParameterServerStrategy (round-robin placement wins) but follow
        # ``colocate_vars_with``, which also keeps them out of the round-robin count the
        # planner's placement of the tables relies on; hash tables follow ``tf.device``.
        extended = tf.distribute.get_strategy().extended
        with extended.colocate_vars_with(pool), tf.device(pool.device):
            self.index = tf.lookup.experimental.MutableHashTable(
                tf.int64, tf.int64, NO_SLOT, name=f"{spec.name}{suffix}_index"
            )
            self.row_key = tf.Variable(
                tf.zeros([self.capacity], tf.int64), trainable=False, name=f"{spec.name}_row_key"
            )
            self.last_seen = tf.Variable(
                tf.fill([self.capacity], tf.constant(FREE, tf.int64)),
                trainable=False,
                name=f"{spec.name}_last_seen",
            )
            self.candidate_count = tf.lookup.experimental.MutableHashTable(
                tf.int64, tf.int64, 0, name=f"{spec.name}{suffix}_candidate_count"
            )
            self.candidate_seen = tf.lookup.experimental.MutableHashTable(
                tf.int64, tf.int64, FREE, name=f"{spec.name}{suffix}_candidate_seen"
            )
            # Counters for metrics and status: admitted and evicted ids, fallback reads.
            self.admitted = tf.Variable(tf.constant(0, tf.int64), trainable=False, name="admitted")
            self.evicted = tf.Variable(tf.constant(0, tf.int64), trainable=False, name="evicted")
            self.fallback_lookups = tf.Variable(
                tf.constant(0, tf.int64), trainable=False, name="fallback_lookups"
            )

    @property
    def pool(self) -> Any:
        """The pool variable (or this shard's component of it)."""
        return self._pool.value

    @property
    def device(self) -> str:
        return str(self.pool.device)

    # ---- every step ------------------------------------------------------------------

    def fallback_row(self, keys: tf.Tensor) -> tf.Tensor:
        """The fallback row of each key (``hashed_fallback_row``)."""
        return hashed_fallback_row(keys, self.fallback_rows)

    def _slots_of(self, keys: tf.Tensor) -> tf.Tensor:
        """The index's slot of each key (``NO_SLOT`` for none), shaped as ``keys`` (a traced
        lookup has no static shape)."""
        return tf.reshape(self.index.lookup(keys), tf.shape(keys))

    def rows(self, keys: tf.Tensor) -> tf.Tensor:
        """Pool rows of ``keys`` (int64; deduplicate them first: the index's lookup is a
        serial loop under its lock): the key's own row if admitted, else its fallback row,
        row 0 for a missing (negative) key. Reads only."""
        return with_fallback(self.own_rows(keys), keys, self.fallback_rows)

    def own_rows(self, keys: tf.Tensor) -> tf.Tensor:
        """The table's row of each admitted key, ``NO_SLOT`` for any other. Reads only."""
        slots = self._slots_of(keys)
        return tf.where(slots >= 0, self.first_row + slots, tf.constant(NO_SLOT, tf.int64))

    def observe(self, keys: tf.Tensor, occurrences: tf.Tensor, step: tf.Tensor) -> tf.Operation:
        """Record that unique ``keys`` occurred ``occurrences`` times at ``step``: admitted
        slots are marked seen, candidates counted. (Two concurrent observers may lose a
        candidate's increment, which only delays its admission; ``last_seen`` takes the
        maximum, in any order.)"""
        present = keys >= 0
        keys = tf.boolean_mask(keys, present)
        return self._observe(
            keys, tf.boolean_mask(occurrences, present), step, self._slots_of(keys)
        )

    def observe_rows(self, keys: tf.Tensor, occurrences: tf.Tensor, step: tf.Tensor) -> tf.Tensor:
        """``observe`` then ``own_rows`` of unique ``keys``, from one lookup of the index
        (only ``maintain`` changes it, never between the two)."""
        slots = self._slots_of(keys)
        present = keys >= 0
        self._observe(
            tf.boolean_mask(keys, present),
            tf.boolean_mask(occurrences, present),
            step,
            tf.boolean_mask(slots, present),
        )
        return tf.where(slots >= 0, self.first_row + slots, tf.constant(NO_SLOT, tf.int64))

    def _observe(
        self, keys: tf.Tensor, occurrences: tf.Tensor, step: tf.Tensor, slots: tf.Tensor
    ) -> tf.Operation:
        """``observe`` of present ``keys`` whose index slots are ``slots``."""
        step = tf.cast(step, tf.int64)
        occurrences = tf.cast(occurrences, tf.int64)
        admitted = slots >= 0
        seen_slots = tf.boolean_mask(slots, admitted)
        mark = self.last_seen.scatter_max(
            tf.IndexedSlices(tf.fill(tf.shape(seen_slots), step), seen_slots)
        )
        waiting = tf.logical_not(admitted)
        new_keys = tf.boolean_mask(keys, waiting)
        counts = self.candidate_count.lookup(new_keys) + tf.boolean_mask(occurrences, waiting)
        return tf.group(
            mark,
            self.candidate_count.insert(new_keys, counts),
            self.candidate_seen.insert(new_keys, tf.fill(tf.shape(new_keys), step)),
            self.fallback_lookups.assign_add(tf.reduce_sum(tf.boolean_mask(occurrences, waiting))),
        )

    def lookup(self, ids: tf.Tensor, step: tf.Tensor | None = None) -> tf.Tensor:
        """Vectors of ``ids`` (any shape, raw keys or strings), deduplicated before the
        index; with ``step`` (training) the occurrences are observed first."""
        keys = keys_of(ids)
        unique, position, occurrences = tf.unique_with_counts(tf.reshape(keys, [-1]))
        deps = [] if step is None else [self.observe(unique, occurrences, step)]
        with tf.control_dependencies(deps):
            vectors = tf.gather(self.pool, self.rows(unique))
        out = tf.gather(vectors, position)
        return tf.reshape(out, tf.concat([tf.shape(ids), [self.dimension]], 0))

    # ---- the one writer, between steps -------------------------------------------------

    def maintain(self, step: Any, slots: Sequence[SlotReset] = ()) -> dict[str, tf.Tensor]:
        """Evict, admit and prune (in that order) at ``step``; returns how many were
        evicted and admitted and the slots in use after."""
        step = tf.convert_to_tensor(step, tf.int64)
        evicted = self._evict(step, slots)
        admitted = self._admit(step)
        self._prune(step)
        return {"evicted": evicted, "admitted": admitted, "used": self.used_slots()}

    def maintain_if_due(self, step: Any, slots: Sequence[SlotReset] = ()) -> tf.Tensor:
        """``maintain`` when ``step`` is a multiple of ``maintainEverySteps`` (inside a
        ``tf.function`` too); the rows in use after."""
        step = tf.cast(step, tf.int64)

        def run() -> tf.Tensor:
            return self.maintain(step, slots)["used"]

        return tf.cond(tf.equal(step % self.maintain_every_steps, 0), run, self.used_slots)

    def used_slots(self) -> tf.Tensor:
        return tf.reduce_sum(tf.cast(self.last_seen.read_value() != FREE, tf.int64))

    def free_slots(self) -> tf.Tensor:
        """The free-slot list, ascending."""
        return tf.reshape(tf.where(self.last_seen.read_value() == FREE), [-1])

    def _initial_rows(self, rows: tf.Tensor, step: tf.Tensor, dtype: tf.DType) -> tf.Tensor:
        """Initial values for pool rows ``rows``, uniform as a fixed table's: seeded by the
        step they are (re)initialised at (rows reset together draw one stream), so a reused
        row starts from a fresh vector, the same on every run."""
        n = tf.shape(rows)[0]
        seed = tf.stack([tf.constant(self._seed[0], tf.int64), self._seed[1] * 1_000_003 + step])
        value = tf.random.stateless_uniform(
            [n, self.dimension], seed=seed, minval=-self._init_scale, maxval=self._init_scale
        )
        return tf.cast(value, dtype)

    def _evict(self, step: tf.Tensor, slots: Sequence[SlotReset]) -> tf.Tensor:
        if self.evict_after_steps is None:
            return tf.constant(0, tf.int64)
        seen = self.last_seen.read_value()
        stale = tf.logical_and(seen != FREE, step - seen >= self.evict_after_steps)
        gone = tf.reshape(tf.where(stale), [-1])
        # Seeded by the table's rows, written to the pool variable's.
        rows = self.pool_row + gone
        fresh = tf.IndexedSlices(
            self._initial_rows(self.first_row + gone, step, self.pool.dtype), rows
        )
        ops = [
            self.index.remove(tf.gather(self.row_key, gone)),
            self.pool.scatter_update(fresh),
            self.row_key.scatter_update(tf.IndexedSlices(tf.zeros_like(gone), gone)),
            self.last_seen.scatter_update(
                tf.IndexedSlices(tf.fill(tf.shape(gone), tf.constant(FREE, tf.int64)), gone)
            ),
        ]
        for s in slots:
            # A slot's rows are shaped as its own (row-wise Adagrad's: one value per row).
            shape = [tf.size(rows), *s.variable.shape[1:].as_list()]
            value = tf.fill(shape, tf.constant(s.initial, s.variable.dtype))
            ops.append(s.variable.scatter_update(tf.IndexedSlices(value, rows)))
        n = tf.size(gone, out_type=tf.int64)
        with tf.control_dependencies(ops):
            self.evicted.assign_add(n)
            return tf.identity(n)

    def _admit(self, step: tf.Tensor) -> tf.Tensor:
        keys, counts = _flat(*self.candidate_count.export())
        ready = counts >= self.admit_after
        keys, counts = tf.boolean_mask(keys, ready), tf.boolean_mask(counts, ready)
        free = self.free_slots()
        n = tf.minimum(tf.size(keys), tf.size(free))
        # Most frequent first, when there are more ready ids than free slots.
        order = _ranked(keys, counts)[:n]
        keys, slots = tf.gather(keys, order), free[:n]
        ops = [
            self.index.insert(keys, slots),
            self.row_key.scatter_update(tf.IndexedSlices(keys, slots)),
            self.last_seen.scatter_update(tf.IndexedSlices(tf.fill([n], step), slots)),
            self.candidate_count.remove(keys),
            self.candidate_seen.remove(keys),
        ]
        with tf.control_dependencies(ops):
            self.admitted.assign_add(tf.cast(n, tf.int64))
            return tf.cast(n, tf.int64)

    def _prune(self, step: tf.Tensor) -> None:
        keys, seen = _flat(*self.candidate_seen.export())
        if self.evict_after_steps is not None:
            stale = step - seen >= self.evict_after_steps
            self._drop(tf.boolean_mask(keys, stale))
            keep = tf.logical_not(stale)
            keys, seen = tf.boolean_mask(keys, keep), tf.boolean_mask(seen, keep)
        # Over capacity, the least recently seen go.
        extra = tf.maximum(tf.size(keys) - self.capacity, 0)
        self._drop(tf.gather(keys, _ranked(keys, -seen)[:extra]))

    def _drop(self, keys: tf.Tensor) -> None:
        self.candidate_count.remove(keys)
        self.candidate_seen.remove(keys)

    # ---- checks ----------------------------------------------------------------------

    def invariant_violations(self) -> list[str]:
        """What is inconsistent between the index and the row state (empty when all hold):
        every index entry names a used slot holding that key, no two keys share a slot,
        every used slot is in the index, no candidate is admitted, capacity holds."""
        problems = []
        keys, slots = (t.numpy() for t in self.index.export())
        row_key = self.row_key.numpy()
        used = set(int(s) for s in (self.last_seen.numpy() != FREE).nonzero()[0])
        free = set(int(s) for s in self.free_slots().numpy())
        if len(keys) > self.capacity:
            problems.append(f"{len(keys)} keys admitted, over the capacity {self.capacity}")
        if len(set(slots.tolist())) != len(slots):
            problems.append("two admitted keys share a slot")
        if used & free:
            problems.append(f"slots both used and free: {sorted(used & free)[:5]}")
        if used | free != set(range(self.capacity)):
            problems.append("some slot is neither used nor free")
        if set(slots.tolist()) != used:
            problems.append("the index's slots are not the used slots")
        for k, s in zip(keys.tolist(), slots.tolist(), strict=True):
            if not 0 <= s < self.capacity or row_key[s] != k:
                problems.append(f"key {k} -> slot {s} whose row_key is not {k}")
                break
        candidates = set(self.candidate_count.export()[0].numpy().tolist())
        if candidates & set(keys.tolist()):
            problems.append("an admitted key is still a candidate")
        if candidates != set(self.candidate_seen.export()[0].numpy().tolist()):
            problems.append("candidate counts and last-seen steps hold different keys")
        return problems
