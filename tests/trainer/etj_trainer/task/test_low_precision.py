"""Low-precision tables: float32 optimizer state, float32 update math, stochastic rounding
to the storage dtype; and row-wise Adagrad.

In-process checks of ``etj_trainer.task.optim`` (the rounding alone: test_rounding.py, the
row math alone: test_rowupdate.py).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest


@pytest.fixture(scope="module")
def tf() -> Any:
    import tensorflow

    return tensorflow


def _train_one_row(tf: Any, dtype: Any, optimizer: str, lr: float, steps: int, init: float):
    """A ``[4, 64]`` table of ``dtype`` filled with ``init``; ``steps`` updates of row 0 with
    gradient 1. The table and slots after them, as float32 arrays."""
    from etj_trainer.task.optim import Slotted, apply_update, create_slots

    strategy = tf.distribute.get_strategy()
    var = tf.Variable(tf.fill([4, 64], tf.constant(init, dtype)))
    item = Slotted(var, optimizer, lr, create_slots(strategy, var, optimizer))
    grad = tf.IndexedSlices(tf.ones([1, 64]), tf.constant([0], tf.int64), tf.constant([4, 64]))

    @tf.function
    def step(t: Any) -> None:
        apply_update(item, grad, t, deduplicate=False)(var, grad, *item.slots)

    for t in range(1, steps + 1):
        step(tf.constant(float(t)))
    return (
        var.numpy().astype(np.float32),
        [s.numpy().astype(np.float32) for s in item.slots],
    )


def test_a_bfloat16_tables_adagrad_accumulator_keeps_counting(tf: Any) -> None:
    """300 gradients of 1: the accumulator is 0.1 + 300. In bfloat16 (8 significant bits)
    it stopped at 256, where adding 1 rounds back to 256: the table's learning rate stopped
    decaying."""
    _, slots = _train_one_row(tf, tf.bfloat16, "adagrad", 0.01, 300, 1.0)
    np.testing.assert_allclose(slots[0][0], 300.1, rtol=1e-6)
    # Rows without gradients keep the initial accumulator.
    np.testing.assert_allclose(slots[0][1:], 0.1, rtol=1e-6)


def test_a_bfloat16_table_keeps_learning_where_rounding_to_nearest_stalled(tf: Any) -> None:
    """Adagrad steps of 0.01 / sqrt(0.1 + t) on weights starting at 1.0: from t = 27 a step
    is under half a bfloat16 ulp below 1.0 (2^-9), so rounding to nearest dropped every one
    and the row stopped at 0.890625 where float32 training reaches 0.616. Rounded
    stochastically, the row follows float32 training."""
    steps, lr = 400, 0.01
    want = 1.0 - sum(lr / (np.sqrt(0.1 + t) + 1e-7) for t in range(1, steps + 1))
    var, _ = _train_one_row(tf, tf.bfloat16, "adagrad", lr, steps, 1.0)
    # Each column is one stochastic path (a random walk of 400 roundings, standard
    # deviation under 2^-9 x sqrt(400) = 0.039); their mean is float32 training's value.
    assert abs(var[0].mean() - want) < 0.015, (var[0].mean(), want)
    assert var[0].std() < 0.06, var[0]
    assert var[0].max() < 0.8, "every column moved past where rounding to nearest stopped"
    np.testing.assert_array_equal(var[1:], 1.0)


# --- float32 slots and row-wise Adagrad -----------------------------------------------------


def test_slots_are_float32_and_rowwise_has_one_per_row(tf: Any) -> None:
    from etj_trainer.task.optim import create_slots

    strategy = tf.distribute.get_strategy()
    var = tf.Variable(tf.zeros([10, 4], tf.bfloat16))
    for optimizer, shapes in [
        ("adagrad", [[10, 4]]),
        ("rowwiseAdagrad", [[10]]),
        ("ftrl", [[10, 4], [10, 4]]),
        ("adam", [[10, 4], [10, 4]]),
        ("sgd", []),
    ]:
        slots = create_slots(strategy, var, optimizer)
        assert [s.shape.as_list() for s in slots] == shapes, optimizer
        assert all(s.dtype == tf.float32 for s in slots), optimizer
    (accumulator,) = create_slots(strategy, var, "rowwiseAdagrad")
    np.testing.assert_array_equal(accumulator.numpy(), np.float32(0.1))
    assert accumulator.name.endswith("row_accumulator:0")


def _rowwise_reference(w, acc, batches, lr):
    """Row-wise Adagrad in numpy (float64): per row, accumulator += mean(g^2) over the
    dimension; row -= lr g / (sqrt(accumulator) + 1e-7). Repeated ids sum first."""
    w, acc = w.astype(np.float64).copy(), acc.astype(np.float64).copy()
    for ids, g in batches:
        summed: dict[int, np.ndarray] = {}
        for i, row in zip(ids, g, strict=True):
            summed[int(i)] = summed.get(int(i), 0) + row
        for i, row in summed.items():
            acc[i] += np.mean(row**2)
            w[i] -= lr * row / (np.sqrt(acc[i]) + 1e-7)
    return w, acc


def _batches(rows: int, dim: int, steps: int):
    rng = np.random.default_rng(5)
    return [
        (rng.integers(0, rows, 12), rng.normal(0, 1, (12, dim)).astype(np.float32))
        for _ in range(steps)
    ]


def _apply(tf: Any, item: Any, batches: list, rows: int, dim: int, dedup: bool = False) -> None:
    from etj_trainer.task.optim import apply_update

    for t, (ids, g) in enumerate(batches, start=1):
        grad = tf.IndexedSlices(
            tf.constant(g), tf.constant(ids, tf.int64), tf.constant([rows, dim])
        )
        apply_update(item, grad, tf.constant(float(t)), deduplicate=dedup)(
            item.var, grad, *item.slots
        )


def test_rowwise_adagrad_matches_a_numpy_reference(tf: Any) -> None:
    from etj_trainer.task.optim import Slotted, create_slots

    rows, dim, lr = 40, 6, 0.3
    init = np.random.default_rng(2).uniform(-0.5, 0.5, (rows, dim)).astype(np.float32)
    var = tf.Variable(init)
    item = Slotted(
        var, "rowwiseAdagrad", lr, create_slots(tf.distribute.get_strategy(), var, "rowwiseAdagrad")
    )
    batches = _batches(rows, dim, 6)
    # Ids repeat within a batch.
    assert any(len(set(ids)) < len(ids) for ids, _ in batches)
    _apply(tf, item, batches, rows, dim)
    want_w, want_acc = _rowwise_reference(init, np.full(rows, 0.1), batches, lr)
    np.testing.assert_allclose(var.numpy(), want_w, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(item.slots[0].numpy(), want_acc, rtol=1e-5)
    touched = sorted({int(i) for ids, _ in batches for i in ids})
    assert len(touched) < rows and (want_acc[touched] > 0.1).all()


def test_rowwise_adagrad_on_a_bfloat16_table_follows_the_reference(tf: Any) -> None:
    """The same with bfloat16 storage: the float32 accumulator only sees gradients, so it is
    the reference's; the rows take unbiased roundings of their float32 steps, so they stay
    within a few bfloat16 ulps of the reference's path."""
    from etj_trainer.task.optim import Slotted, create_slots

    rows, dim, lr = 20, 6, 0.3
    init = np.random.default_rng(2).uniform(-0.5, 0.5, (rows, dim)).astype(np.float32)
    var = tf.Variable(tf.cast(init, tf.bfloat16))
    start = var.numpy().astype(np.float32)
    item = Slotted(
        var, "rowwiseAdagrad", lr, create_slots(tf.distribute.get_strategy(), var, "rowwiseAdagrad")
    )
    batches = _batches(rows, dim, 6)
    _apply(tf, item, batches, rows, dim)
    want_w, want_acc = _rowwise_reference(start, np.full(rows, 0.1), batches, lr)
    # The accumulator only sees gradients: exact.
    np.testing.assert_allclose(item.slots[0].numpy(), want_acc, rtol=1e-5)
    np.testing.assert_allclose(var.numpy().astype(np.float32), want_w, atol=6 * 2.0**-9)


@pytest.mark.parametrize("optimizer", ["sgd", "adagrad", "ftrl"])
def test_float32_row_math_is_the_fused_kernels(tf: Any, optimizer: str) -> None:
    """The float32 math a low-precision table is updated with (``rowupdate``) is the fused
    kernel's a float32 table uses: same rows, same slots, to float32 rounding."""
    from etj_trainer.task.optim import Slotted, create_slots, dedup
    from etj_trainer.task.rowupdate import update_rows

    rows, dim = 20, 6
    init = np.random.default_rng(4).uniform(-0.5, 0.5, (rows, dim)).astype(np.float32)
    strategy = tf.distribute.get_strategy()
    fused_var, row_var = tf.Variable(init), tf.Variable(init)
    fused = Slotted(fused_var, optimizer, 0.2, create_slots(strategy, fused_var, optimizer))
    row_slots = create_slots(strategy, row_var, optimizer)
    batches = _batches(rows, dim, 5)
    _apply(tf, fused, batches, rows, dim, dedup=True)
    for t, (ids, g) in enumerate(batches, start=1):
        grad = dedup(tf.IndexedSlices(tf.constant(g), tf.constant(ids, tf.int64)))
        update_rows(optimizer, row_var, row_slots, grad, 0.2, tf.constant(float(t)))
    np.testing.assert_allclose(row_var.numpy(), fused_var.numpy(), rtol=1e-5, atol=1e-6)
    for a, b in zip(row_slots, fused.slots, strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)
    assert np.abs(fused_var.numpy() - init).max() > 0.05


# --- checkpoints ----------------------------------------------------------------------------


def _low_precision_spec(optimizer: str = "adagrad", dtype: str = "bfloat16", **kw: Any) -> Any:
    from zoo import zoo_spec

    tables = [
        {"name": "user_id", "vocabularySize": 3000, "dimension": 8, "dtype": dtype},
        {"name": "item_id", "vocabularySize": 1500, "dimension": 8, "idsPerExample": 3},
        {"name": "country", "vocabularySize": 40, "dimension": 8, "dtype": "float16"},
    ]
    return zoo_spec({"embeddings": tables}, training={"optimizer": optimizer}, **kw)


@pytest.mark.parametrize("optimizer", ["adagrad", "rowwiseAdagrad"])
def test_a_checkpoint_saves_and_restores_the_float32_slots(
    tf: Any, tmp_path: Any, optimizer: str
) -> None:
    from harness import trainer_config
    from zoo import checkpoint_restores_every_variable

    spec = _low_precision_spec(optimizer)
    checkpoint_restores_every_variable(spec, tmp_path)
    # (zoo's check wrote it there.)
    reader = tf.train.load_checkpoint(str(tmp_path / "ckpt"))
    dtypes, shapes = reader.get_variable_to_dtype_map(), reader.get_variable_to_shape_map()
    for i, table in enumerate(trainer_config(spec).model.tables):
        assert dtypes[f"model/tables/{i}/.ATTRIBUTES/VARIABLE_VALUE"].name == table.dtype
        saved = [k for k in dtypes if k.startswith(f"slots/tables/{table.name}/")]
        assert saved and all(dtypes[k] == tf.float32 for k in saved), (table.name, saved)
        if optimizer == "rowwiseAdagrad":
            assert [shapes[k] for k in saved] == [[table.vocabulary_size]]


def test_a_checkpoint_with_bfloat16_slots_restores_into_float32_ones(
    tf: Any, tmp_path: Any
) -> None:
    """Before float32 state, a bfloat16 table's slots were saved in bfloat16: such a
    checkpoint restores, each slot read in its saved dtype and cast."""
    from harness import trainer_config
    from same_math_chief import batches

    from etj_trainer.task.checkpoint import restore_in_pieces
    from etj_trainer.task.state import SlotStore, TrainingState

    config = trainer_config(_low_precision_spec())
    state = TrainingState(config, tf.distribute.get_strategy())
    data = batches(config)
    state.train_chunk(iter(tf.data.Dataset.from_tensor_slices(data)), tf.constant(3, tf.int64))
    # The old layout: every table's slots in the table's dtype.
    old = SlotStore()
    old.dense = state.slots.dense
    for spec, (name, slots) in zip(config.model.tables, state.slots.tables.items(), strict=True):
        dtype = getattr(tf, spec.dtype)
        old.tables[name] = {k: tf.Variable(tf.cast(v, dtype)) for k, v in slots.items()}
    path = tf.train.Checkpoint(model=state.model, slots=old, step=state.step).write(
        str(tmp_path / "old")
    )
    assert (
        tf.train.load_checkpoint(path).get_variable_to_dtype_map()[
            "slots/tables/user_id/accumulator/.ATTRIBUTES/VARIABLE_VALUE"
        ]
        == tf.bfloat16
    )
    fresh = TrainingState(config, tf.distribute.get_strategy())
    restore_in_pieces(fresh, path)
    for name, slots in state.slots.tables.items():
        for k, v in slots.items():
            got = fresh.slots.tables[name][k]
            assert got.dtype == tf.float32
            want = tf.cast(tf.cast(v, old.tables[name][k].dtype), tf.float32).numpy()
            np.testing.assert_array_equal(got.numpy(), want, err_msg=f"{name}/{k}")
    np.testing.assert_array_equal(
        fresh.model.tables[0].numpy().astype(np.float32),
        state.model.tables[0].numpy().astype(np.float32),
    )


# --- the same math under every strategy -----------------------------------------------------

# One ulp of a float16 table's values (all under 0.25 here): both runs draw the same
# roundings, but a value that float32 rounding of the half-batch gradients moved across its
# draw rounds the other way (seen: 7.6e-6, under MultiWorkerMirrored). Under
# ParameterServer the gradients are the same and no allowance is needed: a shard drawing by
# its own rows instead of the table's would show.
FLOAT16_ULP = 2.0**-12


@pytest.mark.slow
@pytest.mark.parametrize(
    "optimizer",
    [
        # make test-all; CI has row-wise Adagrad (bfloat16 and float16 tables over 2 ps)
        pytest.param("adagrad", marks=pytest.mark.extended),
        "rowwiseAdagrad",
    ],
)
def test_same_math_alone_and_under_parameter_server(tmp_path: Any, optimizer: str) -> None:
    """bfloat16 and float16 tables sharded over 2 ps end where one process ends: the
    roundings draw by global row, not by shard."""
    from zoo import same_math

    report = same_math(_low_precision_spec(optimizer), tmp_path)
    assert report["shards"]["model/tables/0"] > 1


@pytest.mark.slow
@pytest.mark.extended  # make test-all; CI has the rounding's unit checks and the ParameterServer variant
def test_same_math_alone_and_under_multi_worker_mirrored(tmp_path: Any) -> None:
    """Every replica rounds its copy alike: both workers end where one process ends (float16:
    MultiWorkerMirrored refuses bfloat16 tables, see the planner)."""
    from zoo import same_math_mirrored

    spec = _low_precision_spec("rowwiseAdagrad", dtype="float16")
    tables = spec.model.tables
    assert {t.dtype for t in tables} == {"float16", "float32"}
    allowance = {
        f"model/tables/{i}": FLOAT16_ULP for i, t in enumerate(tables) if t.dtype == "float16"
    }
    same_math_mirrored(spec, tmp_path, allowance)
