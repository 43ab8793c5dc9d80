"""The standard CTR towers, one module per architecture (``spec.model.architecture``), and
a job's own (``spec.model.custom``, ``models.custom``).

``build_tower`` picks the architecture's tower, ``build_model_tower`` the job's tower
(its own if it has one, else the architecture's); every tower is a ``tf.Module`` called as
``tower(embeddings, dense, training) -> logits [batch]`` (see ``models.base``). Towers own
only their dense weights: the tables, lookups and pooling belong to ``etj_trainer.models.ctr``.
"""

from __future__ import annotations

from typing import Any

from etj.api.architectures import FIRST_ORDER, Architecture
from etj.api.spec import ModelSpec
from etj_trainer.models.base import FlatTower, TowerInputs
from etj_trainer.models.custom import ModelError, build_custom_tower, local_copy
from etj_trainer.models.dcn_v2 import DcnV2Tower
from etj_trainer.models.deep_fm import DeepFmTower
from etj_trainer.models.dlrm import DlrmTower
from etj_trainer.models.dnn import DnnTower
from etj_trainer.models.wide_deep import WideDeepTower

TOWERS: dict[Architecture, type[FlatTower]] = {
    Architecture.DNN: DnnTower,
    Architecture.WIDE_DEEP: WideDeepTower,
    Architecture.DEEP_FM: DeepFmTower,
    Architecture.DCN_V2: DcnV2Tower,
    Architecture.DLRM: DlrmTower,
}


def has_first_order(spec: ModelSpec) -> bool:
    """Whether the architecture looks up a first-order table beside every embedding."""
    return spec.architecture in FIRST_ORDER


def build_tower(spec: ModelSpec, inputs: TowerInputs, seed: int) -> FlatTower:
    """The tower of ``spec.architecture`` (its variable created here: call it after the
    tables, under the strategy's scope)."""
    return TOWERS[Architecture(spec.architecture)](spec, inputs, seed)  # type: ignore[call-arg]


def build_model_tower(spec: ModelSpec, inputs: TowerInputs, seed: int) -> Any:
    """The job's tower: its own (``model.custom``: imported, built and checked, else a
    ``ModelError``) or the architecture's. Call it after the tables, in the strategy scope."""
    if spec.custom is not None:
        return build_custom_tower(spec.custom, inputs)
    return build_tower(spec, inputs, seed)


def local_tower(spec: ModelSpec, inputs: TowerInputs, seed: int, trained: Any) -> Any:
    """A fresh tower of the job's kind outside any strategy, holding ``trained``'s values
    (the export's copy)."""
    if spec.custom is not None:
        return local_copy(spec.custom, inputs, trained)
    tower = build_tower(spec, inputs, seed)
    tower.params.assign(trained.params.read_value())
    return tower


__all__ = [
    "TOWERS",
    "FlatTower",
    "ModelError",
    "TowerInputs",
    "build_model_tower",
    "build_tower",
    "has_first_order",
    "local_tower",
]
