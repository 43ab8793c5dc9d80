"""etj_trainer.task.rowupdate: each optimizer's float32 row math against a numpy reference,
and a low-precision table's rows rounded by their global row. In-process.

(That the float32 math is the fused kernels' is checked in test_low_precision.py.)"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from etj.api.spec import Optimizer

ROWS, DIM, LR = 8, 4, 0.1
IDS = np.array([1, 4, 6])


def _setup(
    tf: Any, optimizer: Optimizer, dtype: Any = None
) -> tuple[Any, list[Any], Any, np.ndarray]:
    from etj_trainer.task.optim import create_slots

    rng = np.random.default_rng(11)
    init = rng.uniform(-0.5, 0.5, (ROWS, DIM)).astype(np.float32)
    var = tf.Variable(tf.cast(init, dtype or tf.float32))
    slots = create_slots(tf.distribute.get_strategy(), var, optimizer.value)
    g = rng.normal(0, 1, (len(IDS), DIM)).astype(np.float32)
    grad = tf.IndexedSlices(tf.constant(g), tf.constant(IDS, tf.int64))
    return var, slots, grad, g


def _reference(optimizer: Optimizer, w: np.ndarray, slots: list[np.ndarray], g: np.ndarray, t: int):
    """One step of ``optimizer`` on rows ``w`` (float64), as TensorFlow's kernels define it."""
    eps = 1e-7
    if optimizer == Optimizer.SGD:
        return w - LR * g, []
    if optimizer == Optimizer.ADAGRAD:
        acc = slots[0] + g * g
        return w - LR * g / (np.sqrt(acc) + eps), [acc]
    if optimizer == Optimizer.ROWWISE_ADAGRAD:
        acc = slots[0] + np.mean(g * g, axis=1)
        return w - LR * g / (np.sqrt(acc)[:, None] + eps), [acc]
    if optimizer == Optimizer.ADAM:
        m = 0.9 * slots[0] + 0.1 * g
        v = 0.999 * slots[1] + 0.001 * g * g
        lr_t = LR * np.sqrt(1 - 0.999**t) / (1 - 0.9**t)
        return w - lr_t * m / (np.sqrt(v) + eps), [m, v]
    assert optimizer == Optimizer.FTRL
    acc, linear = slots
    new_acc = acc + g * g
    linear = linear + g - (np.sqrt(new_acc) - np.sqrt(acc)) / LR * w
    return -linear / (np.sqrt(new_acc) / LR), [new_acc, linear]


@pytest.mark.parametrize("optimizer", list(Optimizer))
def test_each_optimizer_updates_the_rows_it_is_given_and_no_other(
    tf: Any, optimizer: Optimizer
) -> None:
    from etj_trainer.task.rowupdate import update_rows

    var, slots, grad, g = _setup(tf, optimizer)
    w0, s0 = var.numpy().astype(np.float64), [s.numpy().astype(np.float64) for s in slots]
    t = 3
    update_rows(optimizer.value, var, slots, grad, LR, tf.constant(float(t)))
    want_w, want_s = _reference(optimizer, w0[IDS], [s[IDS] for s in s0], g.astype(np.float64), t)
    np.testing.assert_allclose(var.numpy()[IDS], want_w, rtol=1e-5, atol=1e-6)
    for got, want in zip(slots, want_s, strict=True):
        np.testing.assert_allclose(got.numpy()[IDS], want, rtol=1e-5, atol=1e-6)
    others = np.setdiff1d(np.arange(ROWS), IDS)
    np.testing.assert_array_equal(var.numpy()[others], w0[others])
    for got, before in zip(slots, s0, strict=True):
        np.testing.assert_array_equal(got.numpy()[others], before[others])


def test_a_low_precision_table_rounds_by_global_row_as_a_shard_would(tf: Any) -> None:
    """Rows 4..7 of a table updated as a shard of their own (``row_offset`` 4) take the same
    roundings as in the whole table: the draws follow the global row."""
    from etj_trainer.task.optim import create_slots
    from etj_trainer.task.rowupdate import update_rows

    whole, whole_slots, _, g = _setup(tf, Optimizer.ADAGRAD, tf.bfloat16)
    shard = tf.Variable(whole.numpy()[4:])
    shard_slots = create_slots(tf.distribute.get_strategy(), shard, Optimizer.ADAGRAD.value)
    ids = np.array([4, 6])
    rows = g[[1, 2]]
    t = tf.constant(5.0)
    update_rows(
        Optimizer.ADAGRAD.value,
        whole,
        whole_slots,
        tf.IndexedSlices(tf.constant(rows), tf.constant(ids, tf.int64)),
        LR,
        t,
        key=9,
    )
    update_rows(
        Optimizer.ADAGRAD.value,
        shard,
        shard_slots,
        tf.IndexedSlices(tf.constant(rows), tf.constant(ids - 4, tf.int64)),
        LR,
        t,
        key=9,
        row_offset=4,
    )
    assert whole.dtype == tf.bfloat16
    np.testing.assert_array_equal(
        whole.numpy()[4:].astype(np.float32), shard.numpy().astype(np.float32)
    )
    np.testing.assert_array_equal(whole_slots[0].numpy()[4:], shard_slots[0].numpy())
