"""A warm start's tower of other inputs (models.tower_remap): pieces of the same shape
copied whole, the input layer's rows copied input by input, the new input's rows and
changed pieces left at their initial values. In-process, numpy."""

from __future__ import annotations

import numpy as np

from etj_trainer.models.base import TowerInputs
from etj_trainer.models.tower_remap import remap


def _flat(pieces: dict[str, np.ndarray]) -> np.ndarray:
    return np.concatenate([p.reshape(-1) for p in pieces.values()])


def _shapes(pieces: dict[str, np.ndarray]) -> list[tuple[str, tuple[int, ...]]]:
    return [(n, tuple(p.shape)) for n, p in pieces.items()]


def test_an_added_input_keeps_the_other_inputs_rows_and_every_equal_piece():
    rng = np.random.default_rng(0)
    old_in = TowerInputs(names=("user", "item"), dims=(2, 3), dense=1)
    new_in = TowerInputs(names=("user", "ad", "item"), dims=(2, 4, 3), dense=1)
    old = {
        "mlp/0/kernel": rng.normal(size=(6, 5)),
        "mlp/0/bias": rng.normal(size=(5,)),
        "mlp/1/kernel": rng.normal(size=(5, 1)),
        "cross/0": rng.normal(size=(6, 6)),
    }
    new = {
        "mlp/0/kernel": np.full((10, 5), 7.0),
        "mlp/0/bias": np.zeros(5),
        "mlp/1/kernel": np.zeros((5, 1)),
        "cross/0": np.full((10, 10), 3.0),
        "extra": np.ones(2),
    }
    out = remap(_flat(old), _shapes(old), old_in, _flat(new), _shapes(new), new_in)
    assert out.copied == ["mlp/0/bias", "mlp/1/kernel"]
    assert out.by_input == ["mlp/0/kernel (rows of user, item, dense)"]
    assert out.fresh == ["cross/0", "extra"]
    kernel = out.values[:50].reshape(10, 5)
    np.testing.assert_array_equal(kernel[0:2], old["mlp/0/kernel"][0:2])  # user
    np.testing.assert_array_equal(kernel[2:6], 7.0)  # ad: new, its initial rows
    np.testing.assert_array_equal(kernel[6:9], old["mlp/0/kernel"][2:5])  # item
    np.testing.assert_array_equal(kernel[9:10], old["mlp/0/kernel"][5:6])  # dense
    np.testing.assert_array_equal(out.values[50:55], old["mlp/0/bias"])
    np.testing.assert_array_equal(out.values[60:160], 3.0)
    np.testing.assert_array_equal(out.values[160:], 1.0)


def test_an_input_of_another_width_is_not_copied():
    old_in = TowerInputs(names=("user",), dims=(2,), dense=0)
    new_in = TowerInputs(names=("user",), dims=(4,), dense=0)
    old = {"mlp/0/kernel": np.ones((2, 3))}
    new = {"mlp/0/kernel": np.zeros((4, 3))}
    out = remap(_flat(old), _shapes(old), old_in, _flat(new), _shapes(new), new_in)
    assert out.by_input == ["mlp/0/kernel (rows of no input)"]
    np.testing.assert_array_equal(out.values, 0.0)
