"""models/dynamic_relayout: a dynamic table saved in one shard layout restored into another
(another ps count or shard plan), in one process (the fast sibling of
test_restore.py::test_a_dynamic_table_restores_into_more_ps). Every admitted id that fits
its new shard keeps its vector, optimizer slots and last-seen step; each shard keeps the
invariants with its keys routed to it; rows left free hold initial values; the counters keep
the table's totals (ids that do not fit are counted evicted); candidates keep their counts;
and training goes on."""

from __future__ import annotations

import collections

import numpy as np
import tensorflow as tf
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from etj.api.spec import EmbeddingTable
from etj_trainer.models.dynamic import SlotReset
from etj_trainer.models.dynamic_relayout import (
    apply_relayout,
    plan_relayout,
    read_saved,
    saved_capacities,
)
from etj_trainer.models.dynamic_shards import ShardedDynamicTable

PROPERTY = settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
DIM = 2
FALLBACK = 2
PREFIX = "model/dynamic/t"
# An Adagrad-like slot ([rows, dim]) and a row-wise one ([rows]), with their initial values.
SLOT_INITIAL = (0.1, 0.1)


def spec(capacity: int) -> EmbeddingTable:
    return EmbeddingTable.model_validate(
        {
            "name": "t",
            "vocabularySize": FALLBACK,
            "dimension": DIM,
            "dynamic": {"capacity": capacity, "admitAfter": 1, "evictAfterSteps": 3},
        }
    )


def split(values: np.ndarray, parts: list[int]) -> tf.__internal__.distribute.ShardedVariable:
    """A sharded variable of ``values`` cut into ``parts`` rows (a restore by table row)."""
    ends = np.cumsum(parts)[:-1]
    pieces = np.split(values, ends)
    return tf.__internal__.distribute.ShardedVariable(
        [tf.Variable(p, name=f"part_{i}") for i, p in enumerate(pieces)]
    )


def whole(var) -> np.ndarray:
    return tf.concat(list(var.variables), 0).numpy()


def set_rows(var, values: dict[int, float]) -> None:
    """Write each table row's value into a sharded variable."""
    full = whole(var)
    for row, value in values.items():
        full[row] = value
    ends = np.cumsum([int(v.shape[0]) for v in var.variables])[:-1]
    for v, piece in zip(var.variables, np.split(full, ends), strict=True):
        v.assign(piece)


def build(parts: list[int], pool: np.ndarray, slots: list[np.ndarray]):
    pool_var = split(pool, parts)
    slot_vars = [split(s, parts) for s in slots]
    table = ShardedDynamicTable(spec(sum(parts) - FALLBACK), pool_var, seed=(1, 2))
    resets = [
        [SlotReset(v, init) for v, init in zip(per, SLOT_INITIAL, strict=True)]
        for per in zip(*(s.variables for s in slot_vars), strict=True)
    ]
    return table, pool_var, slot_vars, resets


def feed(t: ShardedDynamicTable, ids: list[int], step: int) -> None:
    keys, _, counts = tf.unique_with_counts(tf.constant(ids, tf.int64))
    t.observe(keys, counts, tf.constant(step, tf.int64))


def admitted(t: ShardedDynamicTable) -> dict[int, int]:
    """Each admitted key's table row."""
    out = {}
    for s in t.shards:
        keys, slots = (x.numpy().tolist() for x in s.index.export())
        out.update({k: s.first_row + v for k, v in zip(keys, slots, strict=True)})
    return out


def last_seen(t: ShardedDynamicTable) -> dict[int, int]:
    out = {}
    for s in t.shards:
        seen = s.last_seen.numpy()
        out.update({int(s.row_key[i]): int(seen[i]) for i in np.nonzero(seen != -1)[0]})
    return out


def candidates(t: ShardedDynamicTable) -> dict[int, int]:
    out: dict[int, int] = {}
    for s in t.shards:
        keys, counts = (x.numpy().tolist() for x in s.candidate_count.export())
        out.update(zip(keys, counts, strict=True))
    return out


def layouts() -> st.SearchStrategy:
    """Two cuts of the same rows (fallback rows first, 2-5 parts each)."""

    def cut(total: int) -> st.SearchStrategy:
        return st.lists(st.integers(1, total - 1), min_size=1, max_size=4, unique=True).map(
            lambda c: np.diff([0, *sorted(c), total]).tolist()
        )

    return st.integers(FALLBACK + 4, 16).flatmap(lambda total: st.tuples(cut(total), cut(total)))


@given(
    layout=layouts(),
    stream=st.lists(st.lists(st.integers(0, 30), max_size=8), min_size=1, max_size=8),
)
@PROPERTY
def test_a_table_saved_in_one_layout_restores_into_another(tmp_path_factory, layout, stream):
    parts_a, parts_b = layout
    rows = sum(parts_a)
    rng = np.random.default_rng(0)
    pool = rng.uniform(-0.05, 0.05, (rows, DIM)).astype(np.float32)
    slots = [np.full((rows, DIM), 0.1, np.float32), np.full((rows,), 0.1, np.float32)]
    a, pool_a, slots_a, resets_a = build(parts_a, pool, slots)
    for step, batch in enumerate(stream):
        feed(a, batch, step)
        a.maintain(step, resets_a)
        # Training moves the admitted rows and their slots (by key: recognisable after).
        for var, shift in ((pool_a, 0.5), *((v, 0.25) for v in slots_a)):
            set_rows(var, {r: k + shift for k, r in admitted(a).items()})
    root = tf.Module()
    root.dynamic = {"t": a}
    path = tf.train.Checkpoint(model=root).write(str(tmp_path_factory.mktemp("ckpt") / "c"))
    reader = tf.train.load_checkpoint(path)
    assert saved_capacities(reader, PREFIX) == [s.capacity for s in a.shards]

    # The pool and slots restored by table row into the new layout, then the relayout.
    b, pool_b, slots_b, resets_b = build(parts_b, whole(pool_a), [whole(s) for s in slots_a])
    step = len(stream)
    relayout = plan_relayout(read_saved(reader, PREFIX), FALLBACK, [s.capacity for s in b.shards])
    apply_relayout(b, pool_b, resets_b, relayout, step)

    assert b.invariant_violations() == []
    before, after = admitted(a), admitted(b)
    n = len(b.shards)
    offered = collections.Counter(k % n for k in before)
    assert relayout.dropped == sum(max(c - b.shards[j].capacity, 0) for j, c in offered.items())
    assert set(after) <= set(before) and len(after) == len(before) - relayout.dropped
    seen_a, seen_b = last_seen(a), last_seen(b)
    for k, row in after.items():
        assert seen_b[k] == seen_a[k]
        assert np.array_equal(whole(pool_b)[row], whole(pool_a)[before[k]])
        for sa, sb in zip(slots_a, slots_b, strict=True):
            assert np.array_equal(whole(sb)[row], whole(sa)[before[k]])
    # A dropped id was no more recently seen than any kept id of its shard.
    for k in set(before) - set(after):
        kept = [x for x in after if x % n == k % n]
        assert all((seen_a[x], -x) > (seen_a[k], -k) for x in kept)
    # Free rows hold initial values: the pool's within the init range, the slots' as new.
    used = set(after.values())
    free = [r for r in range(FALLBACK, rows) if r not in used]
    assert np.all(np.abs(whole(pool_b)[free]) <= 0.05)
    for s in slots_b:
        assert np.all(whole(s)[free] == np.float32(0.1))
    assert candidates(b) == candidates(a)
    sa, sb = a.stats(), b.stats()
    assert sb["admitted"] == sa["admitted"] and sb["fallbackLookups"] == sa["fallbackLookups"]
    assert sb["evicted"] == sa["evicted"] + relayout.dropped
    assert sb["rowsUsed"] == len(after) and sb["capacity"] == sa["capacity"]
    # Training goes on with the invariants.
    for extra, batch in enumerate([[1, 2, 3, 40, 41], [5, 40, 42, 43]], start=step):
        feed(b, batch, extra)
        b.maintain(extra, resets_b)
        assert b.invariant_violations() == []


def test_ids_that_do_not_fit_their_new_shard_are_the_least_recently_seen(tmp_path):
    # Saved in one shard of 4 rows; restored into two shards of 2 rows: keys 0, 2, 4, 6
    # all route to the first one, which keeps the two seen last.
    parts_a, parts_b = [FALLBACK + 4], [FALLBACK + 2, 2]
    rows = FALLBACK + 4
    pool = np.zeros((rows, DIM), np.float32)
    slots = [np.full((rows, DIM), 0.1, np.float32), np.full((rows,), 0.1, np.float32)]
    a, _, _, resets_a = build(parts_a, pool, slots)
    for step, keys in enumerate([[0, 4], [2, 6], [6]]):
        feed(a, keys, step)
        a.maintain(step, resets_a)
    root = tf.Module()
    root.dynamic = {"t": a}
    reader = tf.train.load_checkpoint(tf.train.Checkpoint(model=root).write(str(tmp_path / "c")))
    b, pool_b, _, resets_b = build(parts_b, pool, slots)
    relayout = plan_relayout(read_saved(reader, PREFIX), FALLBACK, [2, 2])
    apply_relayout(b, pool_b, resets_b, relayout, 3)
    assert relayout.dropped == 2
    assert set(admitted(b)) == {2, 6}  # 6 seen at 2, 2 at 1; 0 and 4 at 0
    assert b.stats() == {
        "rowsUsed": 2,
        "capacity": 4,
        "admitted": 4,
        "evicted": 2,
        "fallbackLookups": 4,
    }
    assert b.invariant_violations() == []
