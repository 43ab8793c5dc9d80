"""``dcnV2``: DCN-V2 (Wang et al. 2021). ``x0`` is the embeddings and dense features side
by side; each cross layer computes ``x_{l+1} = x0 * (W_l x_l + b_l) + x_l``, with ``W_l``
full (``width x width``) or low rank (``U_l V_l^T``, ``lowRank`` columns each).

``stacked``: the MLP (``hiddenUnits``, may be empty) on the last cross layer's output,
then a linear logit. ``parallel``: the cross layers and the MLP both on ``x0``, their
outputs concatenated into the linear logit.
"""

from __future__ import annotations

import tensorflow as tf

from etj.api.architectures import CrossStructure, DcnV2Spec, settings_of
from etj.api.spec import ModelSpec
from etj_trainer.models.base import (
    FlatTower,
    Piece,
    TowerInputs,
    apply_mlp,
    concat_inputs,
    dense_layers,
    glorot,
)

SEED_BASE = 40_000


def cross_layer(
    x0: tf.Tensor,
    x: tf.Tensor,
    bias: tf.Tensor,
    kernel: tf.Tensor | None = None,
    u: tf.Tensor | None = None,
    v: tf.Tensor | None = None,
) -> tf.Tensor:
    """``x0 * (W x + b) + x`` on row vectors (``x @ W`` with ``W`` stored transposed,
    or ``(x @ V) @ U^T`` in low rank)."""
    projected = (
        tf.matmul(x, kernel)
        if kernel is not None
        else tf.matmul(tf.matmul(x, v), u, transpose_b=True)
    )
    return x0 * (projected + bias) + x


class DcnV2Tower(FlatTower):
    def __init__(self, spec: ModelSpec, inputs: TowerInputs, seed: int):
        self.settings = settings_of(spec, DcnV2Spec)
        width, rank = inputs.width, self.settings.low_rank
        pieces = []
        for i in range(self.settings.cross_layers):
            s = SEED_BASE + 100 * i
            if rank is None:
                pieces.append(Piece(f"cross/{i}/kernel", glorot((width, width), (seed, s))))
            else:
                pieces.append(Piece(f"cross/{i}/u", glorot((width, rank), (seed, s))))
                pieces.append(Piece(f"cross/{i}/v", glorot((width, rank), (seed, s + 1))))
            pieces.append(Piece(f"cross/{i}/bias", tf.zeros([width])))
        self.layers = len(spec.hidden_units)
        deep, out = dense_layers("deep", width, list(spec.hidden_units), seed, SEED_BASE + 50_000)
        pieces += deep
        parallel = self.settings.structure == CrossStructure.PARALLEL
        # Parallel: the logit reads the cross output (width) and the MLP's beside it.
        final = width + out if parallel else out
        pieces.append(Piece("logit/kernel", glorot((final, 1), (seed, SEED_BASE + 90_000))))
        pieces.append(Piece("logit/bias", tf.zeros([1])))
        super().__init__("dcn_v2", inputs, pieces)

    def cross(self, w: dict[str, tf.Tensor], x0: tf.Tensor) -> tf.Tensor:
        x = x0
        for i in range(self.settings.cross_layers):
            if self.settings.low_rank is None:
                x = cross_layer(x0, x, w[f"cross/{i}/bias"], kernel=w[f"cross/{i}/kernel"])
            else:
                x = cross_layer(
                    x0, x, w[f"cross/{i}/bias"], u=w[f"cross/{i}/u"], v=w[f"cross/{i}/v"]
                )
        return x

    def forward(
        self,
        w: dict[str, tf.Tensor],
        embeddings: dict[str, tf.Tensor],
        dense: tf.Tensor | None,
        training: bool,
    ) -> tf.Tensor:
        x0 = concat_inputs(self.inputs, embeddings, dense)
        crossed = self.cross(w, x0)
        if self.settings.structure == CrossStructure.PARALLEL:
            h = tf.concat([crossed, apply_mlp(w, "deep", self.layers, x0, relu_last=True)], axis=1)
        else:
            h = apply_mlp(w, "deep", self.layers, crossed, relu_last=True)
        return tf.squeeze(tf.matmul(h, w["logit/kernel"]) + w["logit/bias"], axis=1)
