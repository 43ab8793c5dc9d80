"""``deepFM``: DeepFM (Guo et al. 2017). The logit is the deep MLP's (``hiddenUnits`` on
the embeddings and dense features) plus a factorization machine over the embedding
inputs: the first-order weights of their ids (the ``<table>__linear`` tables) and the
sum of the pairwise dot products of their vectors, computed in ``O(fields x dim)`` as
``0.5 * sum_k((sum_i v_ik)^2 - sum_i v_ik^2)``. The embeddings are shared by both parts.
"""

from __future__ import annotations

import tensorflow as tf

from etj.api.spec import ModelSpec
from etj_trainer.models.base import (
    FlatTower,
    TowerInputs,
    apply_mlp,
    concat_inputs,
    dense_layers,
    first_order,
)

SEED_BASE = 30_000


def fm_second_order(vectors: tf.Tensor) -> tf.Tensor:
    """Sum over pairs ``i < j`` of ``<v_i, v_j>``; ``vectors`` is ``[batch, fields, dim]``."""
    total = tf.reduce_sum(vectors, axis=1)
    return 0.5 * tf.reduce_sum(tf.square(total) - tf.reduce_sum(tf.square(vectors), axis=1), axis=1)


class DeepFmTower(FlatTower):
    def __init__(self, spec: ModelSpec, inputs: TowerInputs, seed: int):
        units = [*spec.hidden_units, 1]
        pieces, _ = dense_layers("deep", inputs.width, units, seed, SEED_BASE)
        self.layers = len(units)
        super().__init__("deep_fm", inputs, pieces)

    def forward(
        self,
        w: dict[str, tf.Tensor],
        embeddings: dict[str, tf.Tensor],
        dense: tf.Tensor | None,
        training: bool,
    ) -> tf.Tensor:
        x = concat_inputs(self.inputs, embeddings, dense)
        deep = tf.squeeze(apply_mlp(w, "deep", self.layers, x, relu_last=False), axis=1)
        vectors = tf.stack([embeddings[n] for n in self.inputs.names], axis=1)
        return deep + first_order(self.inputs, embeddings) + fm_second_order(vectors)
