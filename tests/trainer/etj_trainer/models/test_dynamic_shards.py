"""models/dynamic_shards: a dynamic table over a sharded pool, in one process (the fast
sibling of test_dynamic_ps.py). Keys go to shard ``key mod shards`` and only that shard
counts, admits or holds them; every shard keeps a single table's invariants over its own
rows, with the pool's fallback rows on the first shard; a freed row's optimizer slot is
reset in its own component; reads go through the sharded variable as a fixed table's do;
a save and restore goes on identically."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from etj.api.spec import EmbeddingTable
from etj_trainer.models.dynamic import FREE, SlotReset
from etj_trainer.models.dynamic_shards import ShardedDynamicTable

PROPERTY = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
DIM = 2


def spec(capacity: int, fallback: int, evict_after: int | None = None) -> EmbeddingTable:
    dynamic: dict = {"capacity": capacity, "admitAfter": 1}
    if evict_after is not None:
        dynamic["evictAfterSteps"] = evict_after
    return EmbeddingTable.model_validate(
        {"name": "t", "vocabularySize": fallback, "dimension": DIM, "dynamic": dynamic}
    )


def sharded(rows: list[int], initial: float = 0.0) -> tf.__internal__.distribute.ShardedVariable:
    return tf.__internal__.distribute.ShardedVariable(
        [tf.Variable(tf.fill([n, DIM], initial), name=f"part_{i}") for i, n in enumerate(rows)]
    )


def feed(t: ShardedDynamicTable, ids: list[int], step: int) -> None:
    keys, _, counts = tf.unique_with_counts(tf.constant(ids, tf.int64))
    t.observe(keys, counts, tf.constant(step, tf.int64))


def held(t: ShardedDynamicTable) -> list[set[int]]:
    return [set(s.index.export()[0].numpy().tolist()) for s in t.shards]


def test_shards_cover_the_pool_rows_after_the_fallback_rows():
    # 3 fallback + 9 pool rows in parts of 2, 5, 5: the first part is all fallback.
    t = ShardedDynamicTable(spec(9, 3), sharded([2, 5, 5]))
    assert [s.capacity for s in t.shards] == [4, 5]
    assert [(s.first_row, s.pool_row) for s in t.shards] == [(3, 1), (7, 0)]
    assert t._component_of == (1, 2)
    with pytest.raises(ValueError, match="has 12 rows, not 13"):
        ShardedDynamicTable(spec(10, 3), sharded([2, 5, 5]))


@given(
    stream=st.lists(st.lists(st.integers(-1, 40), max_size=8), min_size=1, max_size=10),
    parts=st.lists(st.integers(1, 6), min_size=2, max_size=4),
    evict_after=st.none() | st.integers(1, 3),
)
@PROPERTY
def test_keys_route_by_key_and_every_shard_keeps_the_invariants(stream, parts, evict_after):
    capacity = sum(parts) - 1
    pool = sharded(parts)
    t = ShardedDynamicTable(spec(capacity, 1, evict_after), pool)
    n = len(t.shards)
    for step, batch in enumerate(stream):
        feed(t, batch, step)
        result = t.maintain(step)
        assert t.invariant_violations() == []
        owned = held(t)
        assert int(result["used"]) == sum(map(len, owned)) <= capacity
        for i, keys in enumerate(owned):
            assert all(k % n == i for k in keys)
        keys = sorted(set(batch))
        if keys:
            rows = t.rows(tf.constant(keys, tf.int64)).numpy().tolist()
            admitted = set().union(*owned)
            own = [r for k, r in zip(keys, rows, strict=True) if k in admitted]
            assert len(set(own)) == len(own) and all(1 <= r <= capacity for r in own)
            for k, r in zip(keys, rows, strict=True):
                if k in admitted:
                    shard = t.shards[k % n]
                    assert shard.first_row <= r < shard.first_row + shard.capacity
                else:
                    assert r == 0  # one fallback row (missing values' too)
    stats = t.stats()
    assert stats["rowsUsed"] == int(t.used_slots()) and stats["capacity"] == capacity


def test_eviction_resets_the_slot_of_the_freed_row_in_its_own_component():
    pool = sharded([3, 3], initial=7.0)
    t = ShardedDynamicTable(spec(5, 1, evict_after=2), pool)
    slot = sharded([3, 3], initial=5.0)
    slots = [[SlotReset(v, 0.1)] for v in slot.variables]
    feed(t, [2, 3], step=0)  # 2 -> shard 0 (rows 1-2), 3 -> shard 1 (rows 3-5)
    t.maintain(0, slots)
    rows = dict(zip([2, 3], t.rows(tf.constant([2, 3], tf.int64)).numpy().tolist(), strict=True))
    assert rows[2] in (1, 2) and rows[3] in (3, 4, 5)
    feed(t, [3], step=1)
    assert int(t.maintain(2, slots)["evicted"]) == 1  # 2 unseen for 2 steps; 3 seen at 1
    full_slot = tf.concat([v for v in slot.variables], 0).numpy()
    full_pool = tf.concat([v for v in pool.variables], 0).numpy()
    assert np.all(full_slot[rows[2]] == np.float32(0.1))
    assert np.all(np.abs(full_pool[rows[2]]) <= 0.05)  # a fresh initial vector
    assert np.all(full_slot[rows[3]] == 5.0) and np.all(full_pool[rows[3]] == 7.0)
    assert t.shards[0].last_seen.numpy()[rows[2] - t.shards[0].first_row] == FREE


def test_lookup_reads_the_sharded_pool_and_its_gradient_is_the_rows_read():
    pool = sharded([4, 4])
    t = ShardedDynamicTable(spec(6, 2), pool)
    feed(t, [10, 11], step=0)
    t.maintain(0)
    ids = tf.constant([[10, 11], [12, 10]], tf.int64)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(t.lookup(pool, ids))
    grads = tape.gradient(loss, pool.variables)
    touched = set()
    for c, g in enumerate(grads):
        if g is not None:
            touched |= {4 * c + int(i) for i in tf.convert_to_tensor(g.indices).numpy()}
    expected = set(t.rows(tf.constant([10, 11, 12], tf.int64)).numpy().tolist())
    assert touched == expected and 1 in expected  # 12 reads its fallback row (1)


def test_a_save_and_restore_of_every_shard_goes_on_identically(tmp_path):
    stream = [[1, 2, 3, 4], [5, 6, 1], [7, 8, 9, 2], [10, 1, 11]]
    a_pool = sharded([3, 4])
    a = ShardedDynamicTable(spec(6, 1, evict_after=2), a_pool)
    for step, batch in enumerate(stream[:2]):
        feed(a, batch, step)
        a.maintain(step)
    path = tf.train.Checkpoint(table=a, pool=a_pool).write(str(tmp_path / "ckpt"))
    b_pool = sharded([3, 4])
    b = ShardedDynamicTable(spec(6, 1, evict_after=2), b_pool)
    tf.train.Checkpoint(table=b, pool=b_pool).read(path).assert_consumed()
    assert held(a) == held(b) and b.invariant_violations() == []
    for step, batch in enumerate(stream[2:], start=2):
        for t in (a, b):
            feed(t, batch, step)
            t.maintain(step)
        assert held(a) == held(b)
        assert b.stats() == a.stats()
