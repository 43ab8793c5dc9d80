"""etj_trainer.task.rounding: stochastic rounding to a low-precision dtype, and its draws
(a function of key, step, global row and column alone). In-process, no TensorFlow server."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest


@pytest.mark.parametrize("dtype_name", ["bfloat16", "float16"])
def test_stochastic_rounding_is_unbiased_and_picks_a_neighbour(tf: Any, dtype_name: str) -> None:
    """Each of 4096 roundings of a value is one of its two neighbours in the storage dtype,
    and their mean is the value (to a few standard errors of a two-point draw)."""
    from etj_trainer.task.rounding import draws, stochastic_round

    dtype = getattr(tf, dtype_name)
    rng = np.random.default_rng(3)
    values = np.concatenate(
        [
            rng.uniform(-1, 1, 40),
            rng.uniform(-1e-3, 1e-3, 20),
            rng.uniform(100, 300, 20),
            [0.0, 1.0, -2.5, 1.0 + 2.0**-10],
        ]
    ).astype(np.float32)
    n = 4096
    u = draws(7, tf.constant(5, tf.int64), tf.range(n, dtype=tf.int64), len(values))
    x = tf.broadcast_to(tf.constant(values), [n, len(values)])
    rounded = stochastic_round(x, dtype, u)
    assert rounded.dtype == dtype
    r = tf.cast(rounded, tf.float64).numpy()
    lo = np.min(r, axis=0)
    hi = np.max(r, axis=0)
    nearest = tf.cast(tf.cast(values, dtype), tf.float64).numpy()
    # Two neighbours at most, around the value; exact values never move.
    assert (lo <= values).all() and (values <= hi).all()
    assert all(len(np.unique(r[:, j])) <= 2 for j in range(len(values)))
    exact = nearest == values
    assert (r[:, exact] == values[exact]).all()
    assert (hi - lo <= np.maximum(np.abs(values), 1e-30) * 2.0**-6).all()
    spread = (hi - lo) / 2
    np.testing.assert_array_less(np.abs(r.mean(axis=0) - values), 5 * spread / np.sqrt(n) + 1e-12)


def test_rounding_saturates_and_keeps_nan_and_inf(tf: Any) -> None:
    from etj_trainer.task.rounding import stochastic_round

    x = tf.constant([[70000.0, -70000.0, np.inf, np.nan, 65504.0]])
    got = stochastic_round(x, tf.float16, tf.fill([1, 5], 0.999)).numpy().astype(np.float32)
    assert got[0, :3].tolist() == [65504.0, -65504.0, np.inf]
    assert np.isnan(got[0, 3]) and got[0, 4] == 65504.0


def test_draws_are_deterministic_by_key_step_and_global_row(tf: Any) -> None:
    from etj_trainer.task.rounding import draws

    rows = tf.constant([9, 2, 2**40 + 3], tf.int64)
    step = tf.constant(11, tf.int64)
    a = draws(1, step, rows, 8).numpy()
    np.testing.assert_array_equal(a, draws(1, step, rows, 8).numpy())
    # A row's draws do not depend on the other rows of the batch or their order.
    np.testing.assert_array_equal(a[::-1], draws(1, step, tf.reverse(rows, [0]), 8).numpy())
    np.testing.assert_array_equal(a[1:2], draws(1, step, rows[1:2], 8).numpy())
    # Another step, key or row: other draws.
    assert (a != draws(1, step + 1, rows, 8).numpy()).mean() > 0.99
    assert (a != draws(2, step, rows, 8).numpy()).mean() > 0.99
    assert (a[2] != draws(1, step, tf.constant([3], tf.int64), 8).numpy()[0]).all()


def test_draws_are_uniform(tf: Any) -> None:
    from etj_trainer.task.rounding import draws

    u = draws(0, tf.constant(1, tf.int64), tf.range(2000, dtype=tf.int64), 50).numpy()
    assert u.min() >= 0.0 and u.max() < 1.0
    assert abs(u.mean() - 0.5) < 0.005
    assert abs(u.var() - 1 / 12) < 0.002
    counts = np.histogram(u, bins=20, range=(0, 1))[0]
    expected = u.size / 20
    # Chi-square with 19 degrees of freedom: 43.8 is its 0.999 quantile.
    assert ((counts - expected) ** 2 / expected).sum() < 43.8
    # Neighbouring rows and columns are not correlated.
    assert abs(np.corrcoef(u[:-1].ravel(), u[1:].ravel())[0, 1]) < 0.02
    assert abs(np.corrcoef(u[:, :-1].ravel(), u[:, 1:].ravel())[0, 1]) < 0.02


def test_a_variables_key_is_stable_and_its_own():
    from etj_trainer.task.rounding import key_of

    assert key_of("model/tables/0", 7) == key_of("model/tables/0", 7)
    assert key_of("model/tables/0", 7) != key_of("model/tables/1", 7)
    assert key_of("model/tables/0", 7) != key_of("model/tables/0", 8)
    assert 0 <= key_of("x", 0) < 2**32
