"""models/dynamic: a dynamic table's invariants, single process. Admission at exactly
admitAfter occurrences, eviction of rows unseen for evictAfterSteps with their optimizer
slots reset, used and free rows disjoint, no two admitted ids on one row, capacity never
exceeded, and all of it across a checkpoint save and restore. Random streams of ids
(hypothesis) are checked against a plain-Python model of the same rules."""

from __future__ import annotations

import collections

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from etj.api.spec import EmbeddingTable
from etj_trainer.data.keys import keys_of
from etj_trainer.models.dynamic import FREE, DynamicTable, SlotReset
from etj_trainer.task.optim import SLOTS, create_slots, slot_initial

PROPERTY = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def table(
    capacity: int = 8,
    admit_after: int = 1,
    evict_after: int | None = None,
    fallback: int = 1,
    dim: int = 2,
) -> DynamicTable:
    dynamic = {"capacity": capacity, "admitAfter": admit_after}
    if evict_after is not None:
        dynamic["evictAfterSteps"] = evict_after
    spec = EmbeddingTable.model_validate(
        {"name": "t", "vocabularySize": fallback, "dimension": dim, "dynamic": dynamic}
    )
    return DynamicTable(spec, seed=(1, 2))


def feed(t: DynamicTable, ids: list[int], step: int) -> None:
    """One training step's observation of ``ids`` (repeats counted)."""
    keys, _, counts = tf.unique_with_counts(tf.constant(ids, tf.int64))
    t.observe(keys, counts, tf.constant(step, tf.int64))


def admitted(t: DynamicTable) -> dict[int, int]:
    keys, slots = t.index.export()
    return dict(zip(keys.numpy().tolist(), slots.numpy().tolist(), strict=True))


# Streams: steps of small batches of ids from a small key space (so ids repeat, go stale
# and come back).
ids = st.integers(0, 20)
batches = st.lists(st.lists(ids, max_size=6), min_size=1, max_size=12)


def test_string_keys_are_fingerprint64_as_a_fixed_table_hashes_them_in_63_bits():
    values = tf.constant(["a", "user_123", "zz"])
    full = tf.bitcast(tf.fingerprint(values), tf.int64).numpy().view(np.uint64)
    bucket = tf.strings.to_hash_bucket_fast(values, 1_000_003).numpy().astype(np.uint64)
    assert np.array_equal(full % np.uint64(1_000_003), bucket)
    keys = keys_of(values).numpy()
    assert np.all(keys >= 0)
    assert np.array_equal(keys.view(np.uint64), full & np.uint64((1 << 63) - 1))
    assert keys_of(tf.constant(["", "a"])).numpy()[0] == -1
    assert keys_of(tf.constant([7, -3])).numpy().tolist() == [7, -3]


def test_a_missing_key_reads_row_0_and_is_never_counted_or_admitted():
    t = table(capacity=4, fallback=3)
    feed(t, [-1, -1, 5], step=0)
    t.maintain(0)
    assert set(admitted(t)) == {5}
    assert int(t.candidate_count.size()) == 0
    assert t.rows(tf.constant([-1, 5], tf.int64)).numpy().tolist() == [0, 3 + admitted(t)[5]]


def test_maintenance_inside_a_tf_function_runs_only_on_due_steps():
    t = table(capacity=4)
    t_every = t.maintain_every_steps
    step_fn = tf.function(lambda s: t.maintain_if_due(s))
    feed(t, [1, 2], step=1)
    assert int(step_fn(tf.constant(t_every - 1, tf.int64))) == 0
    assert admitted(t) == {}
    assert int(step_fn(tf.constant(t_every, tf.int64))) == 2
    assert set(admitted(t)) == {1, 2}


@given(stream=batches, admit_after=st.integers(1, 4))
@PROPERTY
def test_an_id_is_admitted_at_the_first_pass_after_admit_after_occurrences(stream, admit_after):
    t = table(capacity=64, admit_after=admit_after)
    total: collections.Counter[int] = collections.Counter()
    for step, batch in enumerate(stream):
        before = set(admitted(t))
        feed(t, batch, step)
        total.update(batch)
        t.maintain(step)
        now = set(admitted(t))
        # Never admitted earlier than admitAfter occurrences, never left waiting past it
        # (capacity is ample here), and once in, not dropped (no eviction configured).
        assert now == {k for k, n in total.items() if n >= admit_after}
        assert before <= now


@given(
    stream=batches,
    capacity=st.integers(1, 6),
    admit_after=st.integers(1, 3),
    evict_after=st.none() | st.integers(1, 4),
    fallback=st.integers(1, 5),
)
@PROPERTY
def test_invariants_hold_after_every_pass(stream, capacity, admit_after, evict_after, fallback):
    """Two admitted ids never share a row, used and free rows never overlap and cover the
    pool, capacity is never exceeded, the index agrees with the row state."""
    t = table(capacity, admit_after, evict_after, fallback)
    for step, batch in enumerate(stream):
        feed(t, batch, step)
        result = t.maintain(step)
        assert t.invariant_violations() == []
        assert int(result["used"]) == len(admitted(t)) <= capacity
        # Candidates are pruned to the capacity.
        assert int(t.candidate_count.size()) <= capacity
        # Rows: an admitted key reads its own pool row, no two the same; others the fallback.
        keys = sorted(set(batch))
        if keys:
            rows = t.rows(tf.constant(keys, tf.int64)).numpy().tolist()
            own = [r for k, r in zip(keys, rows, strict=True) if k in admitted(t)]
            assert len(set(own)) == len(own)
            assert all(fallback <= r < fallback + capacity for r in own)
            assert all(
                r < fallback for k, r in zip(keys, rows, strict=True) if k not in admitted(t)
            )


def test_eviction_frees_rows_unseen_for_evict_after_steps_and_resets_their_slots():
    t = table(capacity=4, evict_after=3, dim=2)
    accumulator = tf.Variable(tf.fill(t.pool.shape, 0.1))
    momentum = tf.Variable(tf.zeros(t.pool.shape))
    slots = [SlotReset(accumulator, 0.1), SlotReset(momentum, 0.0)]
    feed(t, [10, 11, 12], step=0)
    t.maintain(0, slots)
    rows = {k: t.fallback_rows + s for k, s in admitted(t).items()}
    assert set(rows) == {10, 11, 12}
    initial = {k: t.pool[r].numpy().copy() for k, r in rows.items()}
    # Training moved every row and slot away from its initial value.
    for var, value in ((t.pool, 9.0), (accumulator, 5.0), (momentum, 3.0)):
        var.scatter_update(
            tf.IndexedSlices(tf.fill([3, 2], value), tf.constant(list(rows.values())))
        )
    feed(t, [11], step=2)  # 11 seen at 2: stale only from step 5
    result = t.maintain(3, slots)  # 10 and 12 last seen at 0: 3 steps unseen
    assert int(result["evicted"]) == 2
    assert set(admitted(t)) == {11}
    for k in (10, 12):
        r = rows[k]
        assert t.last_seen[r - t.fallback_rows].numpy() == FREE
        assert np.all(accumulator[r].numpy() == np.float32(0.1))
        assert np.all(momentum[r].numpy() == 0.0)
        # A fresh initial vector, not the trained one (nor the first initial one).
        fresh = t.pool[r].numpy()
        assert np.all(np.abs(fresh) <= 0.05) and not np.allclose(fresh, initial[k])
    r = rows[11]
    assert np.all(t.pool[r].numpy() == 9.0) and np.all(accumulator[r].numpy() == 5.0)
    assert int(t.maintain(4, slots)["evicted"]) == 0
    assert int(t.maintain(5, slots)["evicted"]) == 1
    assert admitted(t) == {} and int(t.evicted.numpy()) == 3


# Every slot kind an eviction resets: (optimizer, table dtype). Row-wise Adagrad's slot is
# one value per row; a low-precision table's slots are float32.
SLOT_KINDS = [
    ("adagrad", tf.float32),
    ("adam", tf.float32),
    ("ftrl", tf.float32),
    ("rowwiseAdagrad", tf.float32),
    ("adagrad", tf.bfloat16),
    ("rowwiseAdagrad", tf.float16),
]


@pytest.mark.parametrize(
    ("optimizer", "dtype"), SLOT_KINDS, ids=[f"{o}-{d.name}" for o, d in SLOT_KINDS]
)
def test_eviction_resets_every_slot_kind_of_a_freed_row(optimizer, dtype):
    """The optimizer's own slots (``optim.create_slots``), whatever their shape or dtype:
    a freed row's slots go back to their initial values, a kept row's stay as trained."""
    spec = EmbeddingTable.model_validate(
        {
            "name": "t",
            "vocabularySize": 1,
            "dimension": 3,
            "dynamic": {"capacity": 4, "admitAfter": 1, "evictAfterSteps": 2},
        }
    )
    t = DynamicTable(spec, seed=(1, 2), dtype=dtype)
    variables = create_slots(tf.distribute.get_strategy(), t.pool, optimizer)
    names = SLOTS[optimizer]
    slots = [
        SlotReset(v, slot_initial(optimizer, n)) for n, v in zip(names, variables, strict=True)
    ]
    feed(t, [10, 11], step=0)
    t.maintain(0, slots)
    rows = {k: t.fallback_rows + s for k, s in admitted(t).items()}
    for v in variables:
        assert v.dtype == tf.float32
        v.assign(tf.fill(v.shape, 7.0))  # trained away from every initial value
    feed(t, [11], step=1)
    assert int(t.maintain(2, slots)["evicted"]) == 1  # 10 unseen for 2 steps
    for name, v in zip(names, variables, strict=True):
        assert np.all(v[rows[10]].numpy() == np.float32(slot_initial(optimizer, name))), name
        assert np.all(v[rows[11]].numpy() == 7.0), name
        assert np.all(v[0].numpy() == 7.0), name  # the fallback row is not the pool's


def test_a_full_pool_admits_the_most_frequent_ready_ids_and_the_rest_wait():
    t = table(capacity=2, admit_after=2)
    feed(t, [1, 1, 1, 2, 2, 3, 3, 3, 3, 4], step=0)
    assert int(t.maintain(0)["admitted"]) == 2
    assert set(admitted(t)) == {3, 1}
    # 2 (ready) and 4 (not yet) wait as candidates and read the fallback.
    waiting = set(t.candidate_count.export()[0].numpy().tolist())
    assert waiting == {2, 4}
    assert t.rows(tf.constant([2, 4], tf.int64)).numpy().tolist() == [0, 0]


@given(order=st.permutations(list(range(12))), capacity=st.integers(1, 5))
@PROPERTY
def test_ties_go_by_key_whatever_order_the_ids_came_in(order, capacity):
    """The same counts admit the same ids into the same rows and prune the same
    candidates, whatever the order of insertion (a restore inserts in another order)."""
    reference = table(capacity=capacity, admit_after=2)
    shuffled = table(capacity=capacity, admit_after=2)
    ids = [k for k in range(12) for _ in range(2)]
    for k in range(12):
        feed(reference, [k, k], step=0)
    for k in order:
        feed(shuffled, [k, k], step=0)
    reference.maintain(0)
    shuffled.maintain(0)
    assert admitted(shuffled) == admitted(reference)
    assert set(admitted(reference)) == set(range(capacity))  # every count 2: lowest keys
    for t in (reference, shuffled):
        feed(t, ids, step=1)
        t.maintain(1)
    keys = [set(t.candidate_count.export()[0].numpy().tolist()) for t in (reference, shuffled)]
    assert keys[0] == keys[1] and len(keys[0]) <= capacity


def test_lookup_deduplicates_counts_repeats_and_trains_the_rows_it_reads():
    t = table(capacity=4, admit_after=2, fallback=3)
    ids = tf.constant([[5, 5], [6, 7]], tf.int64)
    with tf.GradientTape() as tape:
        vectors = t.lookup(ids, step=tf.constant(0, tf.int64))
        loss = tf.reduce_sum(vectors)
    assert vectors.shape == (2, 2, 2)
    grad = tape.gradient(loss, t.pool)
    # Not admitted yet: every id reads a fallback row (row 0 is the missing values').
    assert set(tf.convert_to_tensor(grad.indices).numpy().tolist()) <= {1, 2}
    t.maintain(0)
    assert set(admitted(t)) == {5}  # 5 occurred twice in the batch
    assert int(t.fallback_lookups.numpy()) == 4


@given(
    stream=batches,
    capacity=st.integers(1, 6),
    admit_after=st.integers(1, 3),
    evict_after=st.none() | st.integers(1, 4),
    split=st.integers(0, 12),
)
@PROPERTY
def test_a_save_and_restore_keeps_every_invariant_and_goes_on_identically(
    tmp_path_factory, stream, capacity, admit_after, evict_after, split
):
    """A table restored from a checkpoint taken between steps equals the one saved (pool,
    slots, index, row state, candidates, counters) and, fed the rest of the stream, goes
    on exactly as the original does."""
    path = str(tmp_path_factory.mktemp("ckpt") / "ckpt")
    split = min(split, len(stream))
    a = table(capacity, admit_after, evict_after)
    a_slot = tf.Variable(tf.fill(a.pool.shape, 0.1))
    for step, batch in enumerate(stream[:split]):
        feed(a, batch, step)
        a.maintain(step, [SlotReset(a_slot, 0.1)])
        a_slot.assign_add(tf.ones_like(a_slot))
    saved = tf.train.Checkpoint(table=a, slot=a_slot).write(path)
    b = table(capacity, admit_after, evict_after)
    b_slot = tf.Variable(tf.zeros(b.pool.shape))
    tf.train.Checkpoint(table=b, slot=b_slot).read(saved).assert_consumed()
    assert b.invariant_violations() == []
    for x, y in ((a, b),):
        assert admitted(x) == admitted(y)
        assert np.array_equal(x.pool.numpy(), y.pool.numpy())
        assert np.array_equal(x.row_key.numpy(), y.row_key.numpy())
        assert np.array_equal(x.last_seen.numpy(), y.last_seen.numpy())
        for name in ("candidate_count", "candidate_seen"):
            ka, va = (v.numpy().tolist() for v in getattr(x, name).export())
            kb, vb = (v.numpy().tolist() for v in getattr(y, name).export())
            assert dict(zip(ka, va, strict=True)) == dict(zip(kb, vb, strict=True))
        for counter in ("admitted", "evicted", "fallback_lookups"):
            assert int(getattr(x, counter).numpy()) == int(getattr(y, counter).numpy())
    assert np.array_equal(a_slot.numpy(), b_slot.numpy())
    for step, batch in enumerate(stream[split:], start=split):
        for t, s in ((a, a_slot), (b, b_slot)):
            feed(t, batch, step)
            t.maintain(step, [SlotReset(s, 0.1)])
        assert admitted(a) == admitted(b)
        assert np.array_equal(a.last_seen.numpy(), b.last_seen.numpy())
        assert b.invariant_violations() == []


def test_a_table_without_dynamic_settings_is_refused():
    spec = EmbeddingTable.model_validate({"name": "t", "vocabularySize": 4, "dimension": 2})
    with pytest.raises(ValueError, match="no dynamic settings"):
        DynamicTable(spec)
