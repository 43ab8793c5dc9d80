"""etj_trainer.models.base: a tower's inputs, its pieces in one flat variable, and the MLP
math every architecture shares. In-process, eager."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from etj.api.architectures import linear_table_name
from etj_trainer.models.base import (
    FlatTower,
    Piece,
    TowerInputs,
    apply_mlp,
    concat_inputs,
    dense_layers,
    first_order,
    glorot,
)

INPUTS = TowerInputs(names=("user", "item"), dims=(4, 2), dense=3, linear=True)


def test_the_inputs_width_and_first_order_names():
    assert INPUTS.width == 4 + 2 + 3
    assert INPUTS.linear_names() == [linear_table_name("user"), linear_table_name("item")]
    assert TowerInputs(names=("u",), dims=(8,), dense=0).linear_names() == []


def test_glorot_is_bounded_and_the_same_for_the_same_seed(tf: Any):
    a = glorot((30, 10), (1, 2)).numpy()
    limit = (6.0 / 40) ** 0.5
    assert np.abs(a).max() <= limit and np.abs(a).max() > 0.8 * limit
    np.testing.assert_array_equal(a, glorot((30, 10), (1, 2)).numpy())
    assert not np.array_equal(a, glorot((30, 10), (1, 3)).numpy())


def test_an_mlps_pieces_are_its_layers_kernels_and_biases(tf: Any):
    pieces, out = dense_layers("mlp", 9, [5, 2], seed=7, first=10)
    assert out == 2
    assert [(p.name, p.shape) for p in pieces] == [
        ("mlp/0/kernel", (9, 5)),
        ("mlp/0/bias", (5,)),
        ("mlp/1/kernel", (5, 2)),
        ("mlp/1/bias", (2,)),
    ]
    np.testing.assert_array_equal(pieces[0].initial.numpy(), glorot((9, 5), (7, 10)).numpy())
    np.testing.assert_array_equal(pieces[2].initial.numpy(), glorot((5, 2), (7, 11)).numpy())


def test_the_mlp_is_relu_between_layers_and_after_the_last_if_asked(tf: Any):
    w = {
        "m/0/kernel": tf.constant([[1.0, -1.0]]),
        "m/0/bias": tf.constant([0.0, 0.0]),
        "m/1/kernel": tf.constant([[1.0], [1.0]]),
        "m/1/bias": tf.constant([-5.0]),
    }
    x = tf.constant([[2.0]])
    assert apply_mlp(w, "m", 2, x, relu_last=False).numpy().tolist() == [[-3.0]]
    assert apply_mlp(w, "m", 2, x, relu_last=True).numpy().tolist() == [[0.0]]
    assert apply_mlp(w, "m", 1, x, relu_last=False).numpy().tolist() == [[2.0, -2.0]]


def test_inputs_are_concatenated_in_order_then_dense_and_first_order_summed(tf: Any):
    emb = {
        "item": tf.fill([2, 2], 2.0),
        "user": tf.fill([2, 4], 1.0),
        linear_table_name("user"): tf.constant([[1.0], [2.0]]),
        linear_table_name("item"): tf.constant([[10.0], [20.0]]),
    }
    x = concat_inputs(INPUTS, emb, tf.fill([2, 3], 3.0)).numpy()
    assert x.tolist()[0] == [1.0] * 4 + [2.0] * 2 + [3.0] * 3
    assert first_order(INPUTS, emb).numpy().tolist() == [11.0, 22.0]
    with pytest.raises(AssertionError, match="dense features"):
        concat_inputs(INPUTS, emb, None)


def test_a_flat_towers_weights_are_slices_of_its_one_variable(tf: Any):
    pieces = [Piece("a", tf.reshape(tf.range(6.0), [2, 3])), Piece("b", tf.constant([7.0, 8.0]))]
    tower = FlatTower("t", INPUTS, pieces)
    assert tower.params.shape == (8,) and tower.params.name.endswith("tower:0")
    w = tower.weights()
    np.testing.assert_array_equal(w["a"].numpy(), [[0, 1, 2], [3, 4, 5]])
    np.testing.assert_array_equal(w["b"].numpy(), [7, 8])
    other = tower.weights(tf.range(8.0) * 10)  # another read of the same layout
    np.testing.assert_array_equal(other["b"].numpy(), [60, 70])
    with pytest.raises(NotImplementedError):
        tower({}, None)
