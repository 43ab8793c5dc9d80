"""``dlrm``: DLRM (Naumov et al. 2019). A bottom MLP (``dlrm.bottomUnits``, then a layer
of the embedding dimension, ReLU throughout) turns the dense features into one more
vector; the dot products of every pair of distinct vectors (bottom output and embeddings,
no self-pairs) and the bottom output go into the top MLP (``hiddenUnits``, then the logit).
"""

from __future__ import annotations

import tensorflow as tf

from etj.api.architectures import Architecture, DlrmSpec, settings_of
from etj.api.spec import ModelSpec
from etj_trainer.models.base import FlatTower, TowerInputs, apply_mlp, dense_layers

SEED_BASE = 50_000


def dot_interaction(vectors: tf.Tensor) -> tf.Tensor:
    """``<v_i, v_j>`` for every pair ``i > j`` (row-major lower triangle), ``vectors``
    being ``[batch, n, dim]``: ``[batch, n (n - 1) / 2]``."""
    n = int(vectors.shape[1])
    gram = tf.matmul(vectors, vectors, transpose_b=True)
    rows, cols = zip(*[(i, j) for i in range(n) for j in range(i)], strict=True)
    index = tf.constant([i * n + j for i, j in zip(rows, cols, strict=True)])
    return tf.gather(tf.reshape(gram, [-1, n * n]), index, axis=1)


class DlrmTower(FlatTower):
    def __init__(self, spec: ModelSpec, inputs: TowerInputs, seed: int):
        settings = settings_of(spec, DlrmSpec)
        dim = inputs.dims[0]
        pieces = []
        self.bottom = 0
        if inputs.dense:
            bottom = [*settings.bottom_units, dim]
            pieces, _ = dense_layers("bottom", inputs.dense, bottom, seed, SEED_BASE)
            self.bottom = len(bottom)
        n = len(inputs.names) + (1 if inputs.dense else 0)
        width = n * (n - 1) // 2 + (dim if inputs.dense else 0)
        top = [*spec.hidden_units, 1]
        more, _ = dense_layers("top", width, top, seed, SEED_BASE + 1_000)
        self.top = len(top)
        super().__init__(Architecture.DLRM, inputs, pieces + more)

    def forward(
        self,
        w: dict[str, tf.Tensor],
        embeddings: dict[str, tf.Tensor],
        dense: tf.Tensor | None,
        training: bool,
    ) -> tf.Tensor:
        vectors = [embeddings[n] for n in self.inputs.names]
        features = []
        if self.bottom:
            assert dense is not None
            bottom = apply_mlp(w, "bottom", self.bottom, dense, relu_last=True)
            vectors.insert(0, bottom)
            features.append(bottom)
        features.append(dot_interaction(tf.stack(vectors, axis=1)))
        x = tf.concat(features, axis=1)
        return tf.squeeze(apply_mlp(w, "top", self.top, x, relu_last=False), axis=1)
