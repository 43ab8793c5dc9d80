"""``dnn``: the embeddings and dense features concatenated into an MLP (``hiddenUnits``).

Its weights and their initial values are exactly those of etj's original model (layer
``i``'s kernel seeded ``(seed, 10000 + i)``), so jobs and checkpoints from before the
architecture zoo are unchanged.
"""

from __future__ import annotations

import tensorflow as tf

from etj.api.architectures import Architecture
from etj.api.spec import ModelSpec
from etj_trainer.models.base import FlatTower, TowerInputs, apply_mlp, concat_inputs, dense_layers

SEED_BASE = 10_000


class DnnTower(FlatTower):
    def __init__(self, spec: ModelSpec, inputs: TowerInputs, seed: int):
        units = [*spec.hidden_units, 1]
        pieces, _ = dense_layers("mlp", inputs.width, units, seed, SEED_BASE)
        self.layers = len(units)
        super().__init__(Architecture.DNN, inputs, pieces)

    def forward(
        self,
        w: dict[str, tf.Tensor],
        embeddings: dict[str, tf.Tensor],
        dense: tf.Tensor | None,
        training: bool,
    ) -> tf.Tensor:
        x = concat_inputs(self.inputs, embeddings, dense)
        return tf.squeeze(apply_mlp(w, "mlp", self.layers, x, relu_last=False), axis=1)
