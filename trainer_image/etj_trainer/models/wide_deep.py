"""``wideDeep``: Wide & Deep (Cheng et al. 2016). The logit is the deep MLP's
(``hiddenUnits``, as ``dnn``) plus a linear model: the first-order weight of every id (the
``<table>__linear`` tables, pooled by the table's combiner) and a weight per dense feature.

The first-order tables are created and looked up by the model like every table; this
tower only adds them up. The dense weights start at zero.
"""

from __future__ import annotations

import tensorflow as tf

from etj.api.spec import ModelSpec
from etj_trainer.models.base import (
    FlatTower,
    Piece,
    TowerInputs,
    apply_mlp,
    concat_inputs,
    dense_layers,
    first_order,
)

SEED_BASE = 20_000


class WideDeepTower(FlatTower):
    def __init__(self, spec: ModelSpec, inputs: TowerInputs, seed: int):
        units = [*spec.hidden_units, 1]
        pieces, _ = dense_layers("deep", inputs.width, units, seed, SEED_BASE)
        if inputs.dense:
            pieces.append(Piece("wide/dense", tf.zeros([inputs.dense])))
        self.layers = len(units)
        super().__init__("wide_deep", inputs, pieces)

    def forward(
        self,
        w: dict[str, tf.Tensor],
        embeddings: dict[str, tf.Tensor],
        dense: tf.Tensor | None,
        training: bool,
    ) -> tf.Tensor:
        x = concat_inputs(self.inputs, embeddings, dense)
        deep = tf.squeeze(apply_mlp(w, "deep", self.layers, x, relu_last=False), axis=1)
        wide = first_order(self.inputs, embeddings)
        if self.inputs.dense:
            assert dense is not None
            wide += tf.linalg.matvec(dense, w["wide/dense"])
        return deep + wide
