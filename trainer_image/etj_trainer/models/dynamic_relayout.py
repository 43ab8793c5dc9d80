"""Restore a dynamic table saved with another shard layout (another ps count or shard plan).

A checkpoint holds, per saved shard of a dynamic table, its index (key -> slot), row state,
candidates and counters; the pool and its optimizer slots restore by table row like any
table's (``task.restore.restore_components``), so afterwards every admitted key's vector
and optimizer state are at the table row it was saved at. Under another layout keys route to
other shards (``key mod shards``) and shards cover other rows, so the saved shards cannot be
read into the new ones as they are. Instead:

1. ``read_saved`` reads every saved shard's state from the checkpoint;
2. ``plan_relayout`` (pure numpy) gives each admitted key to the shard its key routes to,
   keeping its row when that shard covers it, else the shard's lowest free row; a shard
   offered more keys than it has rows keeps the most recently seen (ties: the lower key)
   and the rest are evicted (counted as evictions: they read their fallback row until they
   are admitted again); candidates go to their shard with their counts; the counters keep
   the table's totals (each shard's admitted - evicted = its rows used, as saved shards have);
3. ``apply_relayout`` moves the rows (pool and every optimizer slot, every source read
   before any destination is written), resets the rows left free to initial values (as an
   eviction does: a row is admitted without a reset) and fills each shard's index, row state,
   candidates and counters.

``restore_dynamic`` restores every dynamic table of a model so: one saved in the same
layout is read as it is, one saved in another laid out anew. The trainer calls it after
restoring the pools and slots by row; so does the evaluator, whose unsharded copy of the
model has one shard per table, whatever the ps count the checkpoint was written with. This
module neither reads the pool's saved values nor decides when to restore.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import tensorflow as tf

from etj_trainer.models.dynamic import FREE, SlotReset
from etj_trainer.models.dynamic_shards import ShardedDynamicTable, components

log = logging.getLogger(__name__)

_VALUE = ".ATTRIBUTES/VARIABLE_VALUE"


@dataclass
class ShardState:
    """One shard's index, row state, candidates and counters (slots are the shard's own)."""

    keys: np.ndarray
    slots: np.ndarray
    last_seen: np.ndarray
    candidate_keys: np.ndarray
    candidate_counts: np.ndarray
    candidate_seen: np.ndarray
    admitted: int
    evicted: int
    fallback_lookups: int

    @property
    def capacity(self) -> int:
        return len(self.last_seen)


@dataclass
class Relayout:
    """The new shards' states and the row moves and resets that go with them (table rows)."""

    shards: list[ShardState]
    moves: np.ndarray  # [n, 2]: (saved row, new row)
    resets: np.ndarray
    dropped: int


def saved_capacities(reader: Any, prefix: str) -> list[int]:
    """The slot count of each saved shard of the dynamic table at ``prefix``
    (``model/dynamic/<name>``); empty when the checkpoint has none."""
    shapes = reader.get_variable_to_shape_map()
    out = []
    while f"{prefix}/shards/{len(out)}/last_seen/{_VALUE}" in shapes:
        out.append(int(shapes[f"{prefix}/shards/{len(out)}/last_seen/{_VALUE}"][0]))
    return out


def read_saved(reader: Any, prefix: str) -> list[ShardState]:
    """Every saved shard's state of the dynamic table at ``prefix``."""
    out = []
    for i in range(len(saved_capacities(reader, prefix))):
        base = f"{prefix}/shards/{i}"

        def get(name: str, base: str = base) -> np.ndarray:
            return np.asarray(reader.get_tensor(f"{base}/{name}")).astype(np.int64)

        def table(name: str) -> tuple[np.ndarray, np.ndarray]:
            keys = get(f"{name}/.ATTRIBUTES/table-keys").reshape(-1)
            return keys, get(f"{name}/.ATTRIBUTES/table-values").reshape(-1)

        keys, slots = table("index")
        candidate_keys, counts = table("candidate_count")
        seen_keys, seen = table("candidate_seen")
        # The two candidate tables hold the same keys (an invariant), maybe in other orders.
        seen_of = dict(zip(seen_keys.tolist(), seen.tolist(), strict=True))
        out.append(
            ShardState(
                keys=keys,
                slots=slots,
                last_seen=get(f"last_seen/{_VALUE}"),
                candidate_keys=candidate_keys,
                candidate_counts=counts,
                candidate_seen=np.array(
                    [seen_of.get(k, FREE) for k in candidate_keys.tolist()], np.int64
                ),
                admitted=int(get(f"admitted/{_VALUE}")),
                evicted=int(get(f"evicted/{_VALUE}")),
                fallback_lookups=int(get(f"fallback_lookups/{_VALUE}")),
            )
        )
    return out


def plan_relayout(
    saved: Sequence[ShardState], fallback_rows: int, capacities: Sequence[int]
) -> Relayout:
    """The new shards (``capacities``, in row order after the ``fallback_rows``) from the
    ``saved`` ones (see the module docstring). Pure."""
    n = len(capacities)
    firsts = fallback_rows + np.concatenate([[0], np.cumsum(capacities)[:-1]]).astype(np.int64)
    saved_firsts = fallback_rows + np.concatenate(
        [[0], np.cumsum([s.capacity for s in saved])[:-1]]
    ).astype(np.int64)
    keys = np.concatenate([s.keys for s in saved] + [np.zeros(0, np.int64)])
    rows = np.concatenate(
        [f + s.slots for f, s in zip(saved_firsts, saved, strict=True)] + [np.zeros(0, np.int64)]
    )
    seen = np.concatenate([s.last_seen[s.slots] for s in saved] + [np.zeros(0, np.int64)])
    candidate_keys = np.concatenate([s.candidate_keys for s in saved] + [np.zeros(0, np.int64)])
    candidate_counts = np.concatenate([s.candidate_counts for s in saved] + [np.zeros(0, np.int64)])
    candidate_seen = np.concatenate([s.candidate_seen for s in saved] + [np.zeros(0, np.int64)])
    shards: list[ShardState] = []
    moves: list[np.ndarray] = [np.zeros((0, 2), np.int64)]
    kept_rows: list[int] = []
    dropped = 0
    for j, (first, capacity) in enumerate(zip(firsts, capacities, strict=True)):
        mine = np.nonzero(keys % n == j)[0]
        # The most recently seen first, ties by key: the ones kept when they do not fit.
        mine = mine[np.lexsort((keys[mine], -seen[mine]))]
        dropped += max(len(mine) - capacity, 0)
        mine = mine[:capacity]
        stays = (rows[mine] >= first) & (rows[mine] < first + capacity)
        slots = np.full(len(mine), -1, np.int64)
        slots[stays] = rows[mine][stays] - first
        free = np.setdiff1d(np.arange(capacity, dtype=np.int64), slots[stays])
        slots[~stays] = free[: int((~stays).sum())]
        moves.append(np.stack([rows[mine][~stays], first + slots[~stays]], axis=1))
        kept_rows += (first + slots).tolist()
        last_seen = np.full(capacity, FREE, np.int64)
        last_seen[slots] = seen[mine]
        ours = candidate_keys % n == j
        shards.append(
            ShardState(
                keys=keys[mine],
                slots=slots,
                last_seen=last_seen,
                candidate_keys=candidate_keys[ours],
                candidate_counts=candidate_counts[ours],
                candidate_seen=candidate_seen[ours],
                admitted=len(mine),
                evicted=0,
                fallback_lookups=0,
            )
        )
    # The table's totals, with the keys dropped here counted as evicted, on the first shard.
    evicted = sum(s.evicted for s in saved) + dropped
    shards[0].admitted += evicted
    shards[0].evicted = evicted
    shards[0].fallback_lookups = sum(s.fallback_lookups for s in saved)
    resets = np.setdiff1d(rows, np.array(kept_rows, np.int64))
    return Relayout(shards, np.concatenate(moves).astype(np.int64), resets, dropped)


def _locate(parts: Sequence[Any], rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The component of each table row and its row there."""
    ends = np.cumsum([int(p.shape[0]) for p in parts])
    which = np.searchsorted(ends, rows, side="right")
    return which, rows - (ends - np.array([int(p.shape[0]) for p in parts]))[which]


def _read_rows(parts: Sequence[Any], rows: np.ndarray) -> tf.Tensor:
    which, local = _locate(parts, rows)
    positions, values = [], []
    for c, part in enumerate(parts):
        sel = np.nonzero(which == c)[0]
        if len(sel):
            with tf.device(part.device):
                values.append(tf.gather(part, local[sel]))
            positions.append(sel)
    return tf.dynamic_stitch(positions, values)


def write_rows(parts: Sequence[Any], rows: np.ndarray, values: tf.Tensor) -> None:
    """Write ``values`` into table rows ``rows`` of the table whose components are
    ``parts``, each row on the device of its component."""
    which, local = _locate(parts, rows)
    for c, part in enumerate(parts):
        sel = np.nonzero(which == c)[0]
        if len(sel):
            with tf.device(part.device):
                part.scatter_update(tf.IndexedSlices(tf.gather(values, sel), local[sel]))


def apply_relayout(
    table: ShardedDynamicTable,
    pool: Any,
    slots: Sequence[Sequence[SlotReset]],
    relayout: Relayout,
    step: int,
) -> None:
    """Carry ``relayout`` out on ``table`` (its pool ``pool``, restored by table row, and
    ``slots``: per pool component, its optimizer slots)."""
    parts = components(pool)
    kinds = (
        [[s.variable for s in per_part] for per_part in zip(*slots, strict=True)] if slots else []
    )
    initials = [per_part.initial for per_part in slots[0]] if slots else []
    if len(relayout.moves):
        src, dst = relayout.moves[:, 0], relayout.moves[:, 1]
        # Every source read before any destination is written: a row may be both.
        read = [(p, _read_rows(p, src)) for p in [parts, *kinds]]
        for p, values in read:
            write_rows(p, dst, values)
    if len(relayout.resets):
        rows = relayout.resets
        first = table.shards[0]
        fresh = first._initial_rows(
            tf.constant(rows, tf.int64), tf.constant(step, tf.int64), parts[0].dtype
        )
        write_rows(parts, rows, fresh)
        for p, initial in zip(kinds, initials, strict=True):
            value = tf.fill(
                [len(rows), *p[0].shape[1:].as_list()], tf.constant(initial, p[0].dtype)
            )
            write_rows(p, rows, value)
    for shard, state in zip(table.shards, relayout.shards, strict=True):
        if shard.capacity != state.capacity:
            raise ValueError(f"shard of {shard.capacity} rows given {state.capacity}")
        with tf.device(shard.device):
            for t in (shard.index, shard.candidate_count, shard.candidate_seen):
                t.remove(t.export()[0])
            shard.index.insert(state.keys, state.slots)
            row_key = np.zeros(state.capacity, np.int64)
            row_key[state.slots] = state.keys
            shard.row_key.assign(row_key)
            shard.last_seen.assign(state.last_seen)
            shard.candidate_count.insert(state.candidate_keys, state.candidate_counts)
            shard.candidate_seen.insert(state.candidate_keys, state.candidate_seen)
            shard.admitted.assign(state.admitted)
            shard.evicted.assign(state.evicted)
            shard.fallback_lookups.assign(state.fallback_lookups)


def restore_dynamic(
    tables: dict[str, ShardedDynamicTable],
    pools: dict[str, Any],
    slots: dict[str, Sequence[Sequence[SlotReset]]],
    path: str,
    step: int,
) -> None:
    """Restore each dynamic table's index, row state and candidates from ``path`` (its pool
    ``pools[name]`` and optimizer slots ``slots[name]``, per pool component, already
    restored by table row; no slots for a model that has none, as the evaluator's); refused
    if the checkpoint has none. A table saved in other shards (another ps count or shard
    plan) is laid out anew (``plan_relayout``), the rows it moves read at ``step``."""
    if not tables:
        return
    reader = tf.train.load_checkpoint(path)
    as_saved, other = {}, {}
    for name, table in tables.items():
        saved = saved_capacities(reader, f"model/dynamic/{name}")
        if not saved or saved == [s.capacity for s in table.shards]:
            as_saved[name] = table
        else:
            other[name] = (table, saved)
    if as_saved:
        stand_in = tf.Module()
        stand_in.dynamic = as_saved
        status = tf.train.Checkpoint(model=stand_in).read(path)
        status.expect_partial().assert_existing_objects_matched()
    for name, (table, saved) in other.items():
        relayout = plan_relayout(
            read_saved(reader, f"model/dynamic/{name}"),
            table.fallback_rows,
            [s.capacity for s in table.shards],
        )
        apply_relayout(table, pools[name], slots.get(name, []), relayout, step)
        log.info(
            "dynamic table %s saved in %d shards, restored into %d: %d rows moved, "
            "%d ids evicted (their shard had no row left)",
            name,
            len(saved),
            len(table.shards),
            len(relayout.moves),
            relayout.dropped,
        )
