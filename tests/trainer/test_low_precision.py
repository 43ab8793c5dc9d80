"""Low-precision tables: float32 optimizer state, float32 update math, stochastic rounding
to the storage dtype; and row-wise Adagrad.

In-process checks of ``etj_trainer.task.optim`` and ``etj_trainer.task.rounding``.
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
