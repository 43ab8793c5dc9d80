"""The disk table's ops against a NumPy reference and against TensorFlow's own kernels:
random lookups and updates with repeated ids through a cache far smaller than the table
(evictions every step), export and import in pieces, a save as checkpoint slices, and
the errors of bad input."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

tf = pytest.importorskip("tensorflow")

from etj_trainer.kernels.disk_table import OPTIMIZERS, DiskTable, slot_width  # noqa: E402

from .reference import EPS, SLOT_INIT, Reference  # noqa: E402


def _table(tmp_path: Path, rows: int, dim: int, optimizer: str, cache_rows: int) -> DiskTable:
    return DiskTable(
        str(tmp_path / f"t{np.random.randint(1 << 30)}.rows"),
        rows=rows,
        dim=dim,
        optimizer=optimizer,
        cache_rows=cache_rows,
        slot_init=SLOT_INIT,
    )


def _export_all(table: DiskTable, piece: int) -> tuple[np.ndarray, np.ndarray]:
    parts = list(table.pieces(piece))
    return (
        np.concatenate([w.numpy() for _, w, _ in parts]),
        np.concatenate([s.numpy() for _, _, s in parts]),
    )


@pytest.mark.parametrize("optimizer", OPTIMIZERS)
def test_random_updates_through_a_small_cache_equal_the_reference(
    kernels: Path, tmp_path: Path, optimizer: str
):
    rows, dim = 300, 5
    rng = np.random.default_rng(7)
    table = _table(tmp_path, rows, dim, optimizer, cache_rows=6)
    ref = Reference(rows, dim, optimizer)
    start = rng.normal(size=(rows, dim)).astype(np.float32)
    table.import_rows(0, start, ref.s)
    ref.w[:] = start
    for step in range(40):
        # Zipf-like ids with repeats within a batch, so some rows are hot and most miss.
        ids = np.minimum(rng.zipf(1.3, size=24) - 1, rows - 1).astype(np.int64)
        np.testing.assert_array_equal(table.lookup(ids).numpy(), ref.w[ids], f"step {step}")
        grads = rng.normal(size=(24, dim)).astype(np.float32)
        table.apply(ids, grads, 0.05)
        ref.apply(ids, grads, 0.05)
    weights, slots = _export_all(table, piece=7)
    np.testing.assert_array_equal(weights, ref.w)
    np.testing.assert_array_equal(slots, ref.s)
    stats = table.stats()
    assert stats["evictions"] > 0 and stats["disk_writes"] > rows, stats
    assert stats["hits"] > 0 and stats["cached"] == 6, stats
    assert stats["hits"] + stats["misses"] == 40 * 24 * 2, stats
    # The lookups' own counts: every looked-up row, and of them the misses (a part of all).
    assert stats["lookups"] == 40 * 24, stats
    assert 0 < stats["lookup_misses"] <= stats["misses"], stats
    table.close()


def test_adagrad_is_tensorflows_fused_kernel_bitwise(kernels: Path, tmp_path: Path):
    rows, dim = 50, 8
    rng = np.random.default_rng(3)
    start = rng.normal(size=(rows, dim)).astype(np.float32)
    var = tf.Variable(start)
    accum = tf.Variable(np.full((rows, dim), SLOT_INIT, np.float32))
    table = _table(tmp_path, rows, dim, "adagrad", cache_rows=3)
    table.import_rows(0, start, accum.numpy())
    for _ in range(20):
        ids = rng.integers(0, rows, size=16).astype(np.int64)
        grads = rng.normal(size=(16, dim)).astype(np.float32)
        tf.raw_ops.ResourceSparseApplyAdagradV2(
            var=var.handle,
            accum=accum.handle,
            lr=tf.constant(0.1),
            epsilon=tf.constant(float(EPS)),
            grad=grads,
            indices=ids,
        )
        table.apply(ids, grads, 0.1)
    weights, slots = _export_all(table, piece=50)
    np.testing.assert_array_equal(weights, var.numpy())
    np.testing.assert_array_equal(slots, accum.numpy())


def test_sgd_is_a_scatter_sub_bitwise(kernels: Path, tmp_path: Path):
    rows, dim = 40, 4
    rng = np.random.default_rng(5)
    var = tf.Variable(np.zeros((rows, dim), np.float32))
    table = _table(tmp_path, rows, dim, "sgd", cache_rows=2)
    for _ in range(10):
        ids = rng.integers(0, rows, size=12).astype(np.int64)
        grads = rng.normal(size=(12, dim)).astype(np.float32)
        # optim._sparse_sgd's update, repeated ids summed first (optim.dedup).
        unique, position = tf.unique(ids)
        summed = tf.math.unsorted_segment_sum(grads, position, tf.shape(unique)[0])
        var.scatter_sub(tf.IndexedSlices(summed * 0.3, unique))
        table.apply(ids, grads, 0.3, deduplicate=True)
    np.testing.assert_array_equal(table.export(0, rows)[0].numpy(), var.numpy())


def test_rowwise_adagrad_is_rowupdates_math(kernels: Path, tmp_path: Path):
    from etj_trainer.task.rowupdate import update_rows

    rows, dim = 30, 16
    rng = np.random.default_rng(11)
    var = tf.Variable(np.zeros((rows, dim), np.float32))
    accum = tf.Variable(np.full((rows,), SLOT_INIT, np.float32))
    table = _table(tmp_path, rows, dim, "rowwise_adagrad", cache_rows=4)
    for _ in range(10):
        ids = rng.integers(0, rows, size=10).astype(np.int64)
        grads = rng.normal(size=(10, dim)).astype(np.float32)
        unique, position = tf.unique(ids)
        summed = tf.math.unsorted_segment_sum(grads, position, tf.shape(unique)[0])
        update_rows("rowwiseAdagrad", var, [accum], tf.IndexedSlices(summed, unique), 0.1, 1)
        table.apply(ids, grads, 0.1, deduplicate=True)
    weights, slots = table.export(0, rows)
    # TensorFlow's reduce_mean sums a row's squares in another order: float reassociation.
    np.testing.assert_allclose(weights.numpy(), var.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(slots.numpy()[:, 0], accum.numpy(), rtol=1e-5)


def test_export_import_round_trip_into_another_cache(kernels: Path, tmp_path: Path):
    rows, dim = 101, 3
    rng = np.random.default_rng(1)
    a = _table(tmp_path, rows, dim, "adagrad", cache_rows=10)
    weights = rng.normal(size=(rows, dim)).astype(np.float32)
    slots = rng.random(size=(rows, dim)).astype(np.float32)
    for first in range(0, rows, 17):
        a.import_rows(first, weights[first : first + 17], slots[first : first + 17])
    a.apply(np.arange(0, rows, 3), rng.normal(size=(34, dim)).astype(np.float32), 0.2)
    cached = a.stats()["cached"]
    b = _table(tmp_path, rows, dim, "adagrad", cache_rows=1)
    for first, w, s in a.pieces(13):
        b.import_rows(first, w, s)
    # The export read the dirty cached rows and neither filled nor reordered the cache.
    assert a.stats()["cached"] == cached
    for x, y in zip(_export_all(a, 101), _export_all(b, 9), strict=True):
        np.testing.assert_array_equal(x, y)
    np.testing.assert_array_equal(_export_all(a, 101)[0][1], weights[1])
    assert not np.array_equal(_export_all(a, 101)[0][0], weights[0])


@pytest.mark.parametrize("optimizer", ["adagrad", "rowwise_adagrad"])
def test_save_writes_the_shard_as_slices_of_the_whole_tensor(
    kernels: Path, tmp_path: Path, optimizer: str
):
    rows, dim = 23, 3
    rng = np.random.default_rng(2)
    table = _table(tmp_path, rows, dim, optimizer, cache_rows=4)
    table.apply(np.arange(rows), rng.normal(size=(rows, dim)).astype(np.float32), 0.3)
    weights, slots = _export_all(table, rows)
    # The shard is rows [10, 33) of a 40-row tensor; pieces of 5 rows (the last of 3).
    table.save(str(tmp_path / "w"), "w", [40, dim], 10, slot=False, piece_rows=5)
    flat = optimizer == "rowwise_adagrad"
    table.save(str(tmp_path / "s"), "s", [40] if flat else [40, dim], 10, slot=True, piece_rows=5)
    for name, want, width in (("w", weights, dim), ("s", slots, slots.shape[1])):
        full = [40] if name == "s" and flat else [40, width]
        rest = "" if len(full) == 1 else ":-"
        spec = f"{' '.join(map(str, full))} 10,{rows}{rest}"
        got = tf.raw_ops.RestoreV2(
            prefix=str(tmp_path / name),
            tensor_names=[name],
            shape_and_slices=[spec],
            dtypes=[tf.float32],
        )[0]
        np.testing.assert_array_equal(got.numpy().reshape(want.shape), want)
        assert tf.train.load_checkpoint(str(tmp_path / name)).get_variable_to_shape_map() == {
            name: full
        }


def test_save_refuses_a_shard_that_does_not_fit_and_a_slot_sgd_has_not(
    kernels: Path, tmp_path: Path
):
    table = _table(tmp_path, 10, 2, "sgd", cache_rows=2)
    with pytest.raises(tf.errors.InvalidArgumentError, match="no slot rows"):
        table.save(str(tmp_path / "a"), "a", [10, 2], 0, slot=True, piece_rows=4)
    with pytest.raises(tf.errors.InvalidArgumentError, match="do not fit"):
        table.save(str(tmp_path / "b"), "b", [15, 2], 6, slot=False, piece_rows=4)
    with pytest.raises(tf.errors.InvalidArgumentError, match="do not fit"):
        table.save(str(tmp_path / "c"), "c", [10, 3], 0, slot=False, piece_rows=4)


def test_an_unwritten_row_reads_as_zeros_and_its_slots_start_value(kernels: Path, tmp_path: Path):
    table = _table(tmp_path, 1000, 4, "rowwise_adagrad", cache_rows=8)
    weights, slots = table.export(990, 10)
    np.testing.assert_array_equal(weights.numpy(), np.zeros((10, 4), np.float32))
    np.testing.assert_array_equal(slots.numpy(), np.full((10, 1), SLOT_INIT, np.float32))
    assert table.stats()["disk_reads"] == 0


def test_the_file_is_sparse_and_goes_with_the_table(kernels: Path, tmp_path: Path):
    path = tmp_path / "shard.rows"
    table = DiskTable(str(path), rows=1 << 20, dim=16, optimizer="adagrad", cache_rows=4)
    assert path.stat().st_size == (1 << 20) * 32 * 4
    assert path.stat().st_blocks * 512 < 1 << 20
    table.close()
    assert not path.exists()


def test_directory_env_puts_the_file_where_the_creating_process_says(
    kernels: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    here = tmp_path / "ps-volume"
    here.mkdir()
    named = "/var/lib/etj/disk-tables/t-0.rows"
    monkeypatch.setenv("ETJ_TEST_DISK_DIR", str(here))
    table = DiskTable(
        named, rows=8, dim=2, optimizer="sgd", cache_rows=2, directory_env="ETJ_TEST_DISK_DIR"
    )
    assert (here / "t-0.rows").exists()
    table.close()
    # Unset: the path as given.
    monkeypatch.delenv("ETJ_TEST_DISK_DIR")
    plain = tmp_path / "plain.rows"
    table = DiskTable(
        str(plain), rows=8, dim=2, optimizer="sgd", cache_rows=2, directory_env="ETJ_TEST_DISK_DIR"
    )
    assert plain.exists()
    table.close()


def test_bad_input_is_an_error_and_changes_nothing(kernels: Path, tmp_path: Path):
    table = _table(tmp_path, 10, 2, "adagrad", cache_rows=2)
    table.apply([1], np.ones((1, 2), np.float32), 0.1)
    before = _export_all(table, 10)
    with pytest.raises(tf.errors.InvalidArgumentError, match="id 10 out of range"):
        table.apply([0, 10], np.ones((2, 2), np.float32), 0.1)
    with pytest.raises(tf.errors.InvalidArgumentError, match="id -1 out of range"):
        table.lookup([-1])
    with pytest.raises(tf.errors.InvalidArgumentError, match="grads must be"):
        table.apply([0], np.ones((1, 3), np.float32), 0.1)
    with pytest.raises(tf.errors.InvalidArgumentError, match="not within"):
        table.export(5, 6)
    with pytest.raises(tf.errors.InvalidArgumentError, match="not within"):
        table.import_rows(9, np.ones((2, 2), np.float32), np.ones((2, 2), np.float32))
    for x, y in zip(before, _export_all(table, 10), strict=True):
        np.testing.assert_array_equal(x, y)


def test_an_uncreatable_file_is_an_error(kernels: Path, tmp_path: Path):
    with pytest.raises(tf.errors.InternalError, match="cannot create"):
        DiskTable(
            str(tmp_path / "no" / "such" / "dir"), rows=4, dim=2, optimizer="sgd", cache_rows=1
        )


def test_an_unknown_optimizer_is_refused():
    with pytest.raises(ValueError, match="sgd, adagrad, rowwise_adagrad"):
        slot_width("adam", 4)


def test_ops_run_inside_a_tf_function(kernels: Path, tmp_path: Path):
    table = _table(tmp_path, 20, 2, "sgd", cache_rows=2)

    @tf.function
    def step(ids: tf.Tensor) -> tf.Tensor:
        rows = table.lookup(ids)
        with tf.control_dependencies([table.apply(ids, tf.ones_like(rows), 1.0)]):
            return table.lookup(ids)

    np.testing.assert_array_equal(step(tf.constant([3, 4])).numpy(), -np.ones((2, 2)))
    np.testing.assert_array_equal(step(tf.constant([3, 5])).numpy(), [[-2, -2], [-1, -1]])


# One step of a random sequence: (kind, ids, seed for its values).
_STEP = st.tuples(
    st.sampled_from(["lookup", "apply", "import", "export"]),
    st.lists(st.integers(0, 39), min_size=1, max_size=12),
    st.integers(0, 2**31 - 1),
)


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    optimizer=st.sampled_from(OPTIMIZERS),
    cache_rows=st.integers(1, 8),
    steps=st.lists(_STEP, min_size=1, max_size=25),
)
def test_property_any_sequence_of_ops_follows_the_reference(
    kernels: Path, tmp_path: Path, optimizer: str, cache_rows: int, steps: list
):
    rows, dim = 40, 3
    table = _table(tmp_path, rows, dim, optimizer, cache_rows)
    ref = Reference(rows, dim, optimizer)
    for kind, ids, seed in steps:
        rng = np.random.default_rng(seed)
        idx = np.array(ids, np.int64)
        if kind == "lookup":
            np.testing.assert_array_equal(table.lookup(idx).numpy(), ref.w[idx])
        elif kind == "apply":
            grads = rng.normal(size=(len(ids), dim)).astype(np.float32)
            table.apply(idx, grads, 0.1)
            ref.apply(idx, grads, 0.1)
        elif kind == "import":
            first, count = min(ids), len(ids)
            count = min(count, rows - first)
            w = rng.normal(size=(count, dim)).astype(np.float32)
            s = rng.random(size=(count, ref.s.shape[1])).astype(np.float32)
            table.import_rows(first, w, s)
            ref.w[first : first + count], ref.s[first : first + count] = w, s
        else:
            first = min(ids)
            count = rows - first
            w, s = table.export(first, count)
            np.testing.assert_array_equal(w.numpy(), ref.w[first:])
            np.testing.assert_array_equal(s.numpy(), ref.s[first:])
        assert table.stats()["cached"] <= cache_rows
    weights, slots = _export_all(table, 11)
    np.testing.assert_array_equal(weights, ref.w)
    np.testing.assert_array_equal(slots, ref.s)
    table.close()
