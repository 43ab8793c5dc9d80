"""A dynamic table over the pool's shards: one index and row state per shard, keys routed by key.

The pool is the table variable the model creates (``vocabularySize + capacity`` rows, the
fallback rows first). Under ParameterServerStrategy it is a ``ShardedVariable`` placed as the
planner says; every shard holding pool rows gets its own ``DynamicTable``
(``etj_trainer.models.dynamic``) over those rows, created on that shard's ps: its index,
row state, candidates and counters live next to its rows and its optimizer slots. A key
belongs to shard ``key mod (shards with pool rows)``: only that shard ever counts, admits or
holds it, so two shards never give one key two rows, and each shard keeps the invariants of
a single table over its own slots (rows used per shard <= that shard's capacity; the
table's capacity is their sum). Single-process and MultiWorkerMirrored tables are one shard.

Reads (``rows``) and counting (``observe``) split the batch's unique keys by shard, each
part going to its shard's device, and stitch the answers back; the rows they give are the
table's, looked up in the sharded variable as a fixed table's are (its gradient is the
same ``IndexedSlices``; under ParameterServer they travel packed with the other tables'
rows, ``models.fused``). ``maintain`` runs every shard's pass on that shard's device; it is
the one writer, called between steps (under ParameterServer by the coordinator, when no
step is in flight: ``TrainingState.maintain_between_steps``).

This module routes and aggregates; it does not decide when maintenance runs, own the
optimizer or read data.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from etj.api.spec import EmbeddingTable
from etj_trainer.data.keys import keys_of
from etj_trainer.models.dynamic import DynamicTable, SlotReset, with_fallback


def components(pool: Any) -> list[Any]:
    """The variables of a (maybe sharded) table, in row order."""
    return list(getattr(pool, "variables", [pool]))


class ShardedDynamicTable(tf.Module):
    """A dynamic table whose pool may be sharded (see the module docstring)."""

    def __init__(
        self,
        spec: EmbeddingTable,
        pool: Any,
        seed: tuple[int, int] = (0, 0),
        dtype: tf.DType = tf.float32,
        init_scale: float = 0.05,
    ):
        if spec.dynamic is None:
            raise ValueError(f"table {spec.name!r} has no dynamic settings")
        super().__init__(name=f"dynamic_{spec.name}")
        self.fallback_rows = spec.vocabulary_size
        self.capacity = spec.dynamic.capacity
        self.dimension = spec.dimension
        self.maintain_every_steps = spec.dynamic.maintain_every_steps
        shards: list[DynamicTable] = []
        # The pool component (and so the optimizer slot component) of each shard.
        component_of: list[int] = []
        offset = 0
        for c, var in enumerate(components(pool)):
            rows = int(var.shape[0])
            start = max(offset, self.fallback_rows)
            if offset + rows > start:
                shards.append(
                    DynamicTable(
                        spec,
                        seed,
                        dtype,
                        init_scale,
                        var,
                        capacity=offset + rows - start,
                        first_row=start,
                        pool_row=start - offset,
                        shard=len(shards),
                    )
                )
                component_of.append(c)
            offset += rows
        if offset != self.fallback_rows + self.capacity:
            raise ValueError(
                f"pool of {spec.name!r} has {offset} rows, not {self.fallback_rows + self.capacity}"
            )
        self.shards = shards
        self._component_of = tuple(component_of)

    # ---- routing ------------------------------------------------------------------------

    def shard_of(self, keys: tf.Tensor) -> tf.Tensor:
        """The shard of each key (a missing, negative key: shard 0, which never holds it)."""
        n = len(self.shards)
        return tf.cast(tf.where(keys < 0, tf.zeros_like(keys), tf.math.floormod(keys, n)), tf.int32)

    def _split(self, keys: tf.Tensor) -> tuple[list[tf.Tensor], list[tf.Tensor]]:
        which = self.shard_of(keys)
        n = len(self.shards)
        return (
            tf.dynamic_partition(keys, which, n),
            tf.dynamic_partition(tf.range(tf.size(keys)), which, n),
        )

    def fallback_row(self, keys: tf.Tensor) -> tf.Tensor:
        return self.shards[0].fallback_row(keys)

    def rows(self, keys: tf.Tensor) -> tf.Tensor:
        """The table's rows of unique ``keys`` (int64 vector): an admitted key's own row, else
        its fallback row, row 0 for a missing key. Reads only, on each shard's device."""
        keys = tf.reshape(tf.cast(keys, tf.int64), [-1])
        if len(self.shards) == 1:
            own = self.shards[0].own_rows(keys)
        else:
            parts, where = self._split(keys)
            found = []
            for shard, part in zip(self.shards, parts, strict=True):
                with tf.device(shard.device):
                    found.append(shard.own_rows(part))
            own = tf.dynamic_stitch(where, found)
        return with_fallback(own, keys, self.fallback_rows)

    def observe(self, keys: tf.Tensor, occurrences: tf.Tensor, step: tf.Tensor) -> tf.Operation:
        """Count unique ``keys`` occurring ``occurrences`` times at ``step``, each in its
        shard (see ``DynamicTable.observe``)."""
        keys = tf.reshape(tf.cast(keys, tf.int64), [-1])
        occurrences = tf.reshape(tf.cast(occurrences, tf.int64), [-1])
        if len(self.shards) == 1:
            return self.shards[0].observe(keys, occurrences, step)
        which = self.shard_of(keys)
        n = len(self.shards)
        parts = tf.dynamic_partition(keys, which, n)
        counts = tf.dynamic_partition(occurrences, which, n)
        ops = []
        for shard, part, count in zip(self.shards, parts, counts, strict=True):
            with tf.device(shard.device):
                ops.append(shard.observe(part, count, step))
        return tf.group(*ops)

    def lookup(self, pool: Any, ids: tf.Tensor, step: tf.Tensor | None = None) -> tf.Tensor:
        """Vectors of ``ids`` (any shape, raw keys or strings) from ``pool`` (the table);
        with ``step`` (training) the occurrences are observed first."""
        keys = keys_of(ids)
        unique, position, occurrences = tf.unique_with_counts(tf.reshape(keys, [-1]))
        deps = [] if step is None else [self.observe(unique, occurrences, step)]
        with tf.control_dependencies(deps):
            vectors = tf.nn.embedding_lookup(pool, self.rows(unique))
        out = tf.gather(vectors, position)
        return tf.reshape(out, tf.concat([tf.shape(ids), [self.dimension]], 0))

    # ---- the one writer, between steps ----------------------------------------------------

    def _shard_slots(
        self, slots: Sequence[Sequence[SlotReset]] | Sequence[SlotReset]
    ) -> list[Sequence[SlotReset]]:
        """Each shard's optimizer slots, from the slots of every pool component."""
        per_component = list(slots)
        if not per_component or isinstance(per_component[0], SlotReset):
            # One component (an unsharded table): its slots as a flat list.
            per_component = [per_component]
        return [per_component[c] if c < len(per_component) else () for c in self._component_of]

    def maintain(self, step: Any, slots: Any = ()) -> dict[str, tf.Tensor]:
        """Every shard's pass at ``step`` (evict, admit, prune), each on its device;
        ``slots``: per pool component, its optimizer slots (``SlotReset``). Returns the
        table's evicted, admitted and used rows."""
        step = tf.convert_to_tensor(step, tf.int64)
        out = []
        for shard, shard_slots in zip(self.shards, self._shard_slots(slots), strict=True):
            with tf.device(shard.device):
                out.append(shard.maintain(step, shard_slots))
        return {k: tf.add_n([o[k] for o in out]) for k in ("evicted", "admitted", "used")}

    def maintain_if_due(self, step: Any, slots: Any = ()) -> tf.Tensor:
        """``maintain`` when ``step`` is a multiple of ``maintainEverySteps`` (inside a
        ``tf.function`` too); the rows in use after."""
        step = tf.cast(step, tf.int64)
        return tf.cond(
            tf.equal(step % self.maintain_every_steps, 0),
            lambda: self.maintain(step, slots)["used"],
            self.used_slots,
        )

    # ---- state ------------------------------------------------------------------------

    def used_slots(self) -> tf.Tensor:
        return tf.add_n([s.used_slots() for s in self.shards])

    def counters(self) -> tf.Tensor:
        """``[shards, 3]`` int64: each shard's admitted, evicted and fallback lookups."""
        return tf.stack(
            [
                tf.stack(
                    [
                        s.admitted.read_value(),
                        s.evicted.read_value(),
                        s.fallback_lookups.read_value(),
                    ]
                )
                for s in self.shards
            ]
        )

    def stats(self, counters: np.ndarray | None = None) -> dict[str, int]:
        """Rows used and the pool's capacity, ids admitted and evicted, fallback lookups:
        the table's totals, from ``counters()`` (read now when not given). Scalar reads
        only (rows used = admitted - evicted), cheap enough for every progress report while
        steps run."""
        if counters is None:
            counters = self.counters().numpy()
        admitted, evicted, fallback = (int(x) for x in np.asarray(counters).sum(axis=0))
        return {
            "rowsUsed": admitted - evicted,
            "capacity": self.capacity,
            "admitted": admitted,
            "evicted": evicted,
            "fallbackLookups": fallback,
        }

    def admitted_rows(self) -> tuple[np.ndarray, np.ndarray]:
        """Every admitted key and its table row, by key ascending (int64 arrays): the index
        as serving reads it. Between steps (the one writer not running)."""
        keys, rows = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)]
        for shard in self.shards:
            k, slot = (t.numpy().reshape(-1).astype(np.int64) for t in shard.index.export())
            keys.append(k)
            rows.append(shard.first_row + slot)
        key, row = np.concatenate(keys), np.concatenate(rows)
        order = np.argsort(key, kind="stable")
        return key[order], row[order]

    def invariant_violations(self) -> list[str]:
        """Each shard's invariants (``DynamicTable.invariant_violations``), and that every
        key a shard holds or counts is routed to it."""
        problems = []
        n = len(self.shards)
        for i, shard in enumerate(self.shards):
            problems += [f"shard {i}: {p}" for p in shard.invariant_violations()]
            for table in (shard.index, shard.candidate_count):
                keys = table.export()[0].numpy()
                if len(keys) and not (keys % n == i).all():
                    problems.append(f"shard {i} holds a key of another shard")
        return problems
