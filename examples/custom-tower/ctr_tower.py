"""A custom tower for etj (spec.model.custom): a gated MLP over the embeddings and the
dense features, written with tf_keras.

etj imports this module, calls ``build_tower(parameters)`` once inside the strategy scope
and then calls the tower as ``tower(embeddings, dense, training)``:

- ``embeddings``: dict, each embedding input's name -> pooled ``[batch, dimension]`` float32
- ``dense``: ``[batch, n]`` float32, or ``None`` when the job has no dense features
- ``training``: Python bool
- returns the logits, shape ``[batch]``

etj owns the embedding tables, the optimizers, checkpoints (this tower's variables
included), progress and the export; the tower only computes logits.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf
import tf_keras as keras


class GatedTower(keras.Model):
    """MLP whose last hidden layer is scaled by a learned sigmoid gate of the input."""

    def __init__(self, units: list[int], seed: int) -> None:
        super().__init__(name="gated_tower")
        init = keras.initializers.GlorotUniform
        self.hidden = [
            keras.layers.Dense(n, activation="relu", kernel_initializer=init(seed + i))
            for i, n in enumerate(units)
        ]
        self.gate = keras.layers.Dense(
            units[-1], activation="sigmoid", kernel_initializer=init(seed + 100)
        )
        self.logit = keras.layers.Dense(1, kernel_initializer=init(seed + 200))

    def call(
        self, embeddings: dict[str, tf.Tensor], dense: tf.Tensor | None, training: bool = False
    ) -> tf.Tensor:
        # Inputs in a fixed order (by name), then the dense features.
        parts = [embeddings[name] for name in sorted(embeddings)]
        if dense is not None:
            parts.append(dense)
        x = tf.concat(parts, axis=1)
        h = x
        for layer in self.hidden:
            h = layer(h)
        h = h * self.gate(x)
        return tf.squeeze(self.logit(h), axis=1)  # [batch, 1] -> [batch]


def build_tower(parameters: dict[str, Any]) -> GatedTower:
    """The factory etj calls with spec.model.custom.parameters."""
    return GatedTower(
        units=list(parameters.get("units", [64, 32])), seed=int(parameters.get("seed", 1))
    )
