"""The sparse optimizers: updates touch only the batch's rows; repeated rows sum."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest


@pytest.mark.parametrize("optimizer", ["sgd", "adagrad", "ftrl", "adam"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_sparse_updates_touch_only_batch_rows(tf: Any, optimizer: str, dtype: str) -> None:
    from etj_trainer.task.optim import Slotted, apply_update, create_slots

    strategy = tf.distribute.get_strategy()
    tdtype = {"float32": tf.float32, "bfloat16": tf.bfloat16}[dtype]
    init = np.random.default_rng(1).uniform(-1, 1, (10, 4)).astype(np.float32)
    var = tf.Variable(tf.cast(init, tdtype))
    item = Slotted(var, optimizer, 0.1, create_slots(strategy, var, optimizer))
    before = [s.numpy().astype(np.float32) for s in item.slots]
    rows = np.array([1, 4, 7])
    grad_values = np.full((3, 4), 0.5, np.float32)
    grad = tf.IndexedSlices(
        tf.constant(grad_values), tf.constant(rows, tf.int64), tf.constant([10, 4])
    )
    apply_update(item, grad, tf.constant(1.0), deduplicate=False)(var, grad, *item.slots)
    after = var.numpy().astype(np.float32)
    untouched = np.setdiff1d(np.arange(10), rows)
    np.testing.assert_allclose(
        after[untouched], tf.cast(tf.cast(init, tdtype), tf.float32).numpy()[untouched]
    )
    for slot, old in zip(item.slots, before, strict=True):
        np.testing.assert_array_equal(slot.numpy().astype(np.float32)[untouched], old[untouched])
    base = tf.cast(tf.cast(init, tdtype), tf.float32).numpy()
    if optimizer == "ftrl":
        # FTRL-proximal recomputes a touched row from its accumulators.
        assert (after[rows] != base[rows]).all()
    else:
        # The others move the touched rows against the (positive) gradient.
        assert (after[rows] < base[rows]).all()
    if optimizer == "adam" and dtype == "float32":
        # Lazy Adam, first step: m = 0.1 g, v = 0.001 g^2, bias-corrected step = lr * sign(g).
        np.testing.assert_allclose(after[rows], init[rows] - 0.1, atol=1e-4)
    if optimizer == "adagrad" and dtype == "float32":
        expected = init[rows] - 0.1 * 0.5 / (np.sqrt(0.1 + 0.25) + 1e-7)
        np.testing.assert_allclose(after[rows], expected, rtol=1e-5)


def test_dedup_sums_repeated_rows(tf: Any) -> None:
    from etj_trainer.task.optim import dedup

    g = dedup(
        tf.IndexedSlices(tf.constant([[1.0], [2.0], [4.0]]), tf.constant([3, 5, 3], tf.int64))
    )
    got = dict(zip(g.indices.numpy().tolist(), g.values.numpy()[:, 0].tolist(), strict=True))
    assert got == {3: 5.0, 5: 2.0}
