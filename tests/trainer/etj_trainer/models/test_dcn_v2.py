"""dcnV2: cross layers (full and low rank, stacked and parallel) against direct numpy, and
the same math alone and under ParameterServer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from zoo import (
    etj_run_trains,
    export_serves_what_the_model_predicts,
    same_math,
    same_math_mirrored,
    zoo_spec,
)


def _relu(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, 0)


def _reference(w: dict[str, np.ndarray], x0: np.ndarray, settings: dict[str, Any]) -> np.ndarray:
    """DCN-V2 written out: x_{l+1} = x0 * (W_l x_l + b_l) + x_l, W_l = U_l V_l^T in low rank."""
    x = x0
    for i in range(settings["crossLayers"]):
        if settings.get("lowRank"):
            matrix = w[f"cross/{i}/u"] @ w[f"cross/{i}/v"].T  # W as a column-vector map
            x = x0 * (x @ matrix.T + w[f"cross/{i}/bias"]) + x
        else:
            x = x0 * (x @ w[f"cross/{i}/kernel"] + w[f"cross/{i}/bias"]) + x
    deep = x0 if settings["structure"] == "parallel" else x
    for i in range(2):
        deep = _relu(deep @ w[f"deep/{i}/kernel"] + w[f"deep/{i}/bias"])
    h = np.concatenate([x, deep], axis=1) if settings["structure"] == "parallel" else deep
    return (h @ w["logit/kernel"] + w["logit/bias"])[:, 0]


@pytest.mark.parametrize(
    "settings",
    [
        {"crossLayers": 3, "structure": "stacked"},
        {"crossLayers": 2, "structure": "parallel"},
        {"crossLayers": 2, "structure": "stacked", "lowRank": 3},
        {"crossLayers": 1, "structure": "parallel", "lowRank": 2},
    ],
    ids=lambda s: "-".join(str(v) for v in s.values()),
)
def test_tower_matches_the_cross_network_written_out(settings: dict[str, Any]) -> None:
    import tensorflow as tf

    from etj_trainer.models.base import TowerInputs
    from etj_trainer.models.dcn_v2 import DcnV2Tower

    spec = zoo_spec({"architecture": "dcnV2", "dcnV2": settings}).model
    tower = DcnV2Tower(spec, TowerInputs(("a", "b"), (3, 2), 2), seed=4)
    rng = np.random.default_rng(4)
    emb = {"a": rng.normal(size=(5, 3)), "b": rng.normal(size=(5, 2))}
    dense = rng.normal(size=(5, 2))
    # Random biases too: zero-initialised ones would hide a wrong bias term.
    w = {k: v.numpy() for k, v in tower.weights().items()}
    w = {k: v + rng.normal(size=v.shape) * 0.1 if "bias" in k else v for k, v in w.items()}
    flat = np.concatenate([w[name].reshape(-1) for name, _ in tower.shapes])
    t = {k: tf.constant(v, tf.float32) for k, v in emb.items()}
    got = tower.forward(
        tower.weights(tf.constant(flat, tf.float32)), t, tf.constant(dense, tf.float32), False
    )
    x0 = np.concatenate([emb["a"], emb["b"], dense], axis=1)
    np.testing.assert_allclose(got.numpy(), _reference(w, x0, settings), rtol=1e-4, atol=1e-5)


def test_low_rank_has_fewer_weights() -> None:
    from etj_trainer.models.base import TowerInputs
    from etj_trainer.models.dcn_v2 import DcnV2Tower

    inputs = TowerInputs(("a",), (32,), 0)
    full = DcnV2Tower(zoo_spec({"architecture": "dcnV2"}).model, inputs, seed=0)
    low = DcnV2Tower(
        zoo_spec({"architecture": "dcnV2", "dcnV2": {"lowRank": 4}}).model, inputs, seed=0
    )
    # Three layers of width x width replaced by three pairs of width x 4.
    assert int(full.params.shape[0]) - int(low.params.shape[0]) == 3 * (32 * 32 - 2 * 32 * 4)


def test_settings_without_the_architecture_are_refused() -> None:
    from pydantic import ValidationError

    with pytest.raises(
        ValidationError, match=r"model\.dcnV2 is given but model\.architecture is 'dnn'"
    ):
        zoo_spec({"dcnV2": {"crossLayers": 2}})


@pytest.mark.slow
@pytest.mark.extended  # make test-all; CI runs the same math under ParameterServer for dnn and trains every architecture in test_serving_model's fixture
@pytest.mark.parametrize("structure", ["stacked", "parallel"])
def test_same_math_alone_and_under_parameter_server(tmp_path: Path, structure: str) -> None:
    settings = {
        "crossLayers": 2,
        "structure": structure,
        "lowRank": 4 if structure == "parallel" else None,
    }
    same_math(zoo_spec({"architecture": "dcnV2", "dcnV2": settings}), tmp_path)


@pytest.mark.slow
@pytest.mark.extended  # make test-all; CI runs the quickstart under etj run with dnn (test_dnn, test_runner)
def test_etj_run_trains_the_quickstart(tmp_path: Path) -> None:
    etj_run_trains({"architecture": "dcnV2", "dcnV2": {"crossLayers": 2}}, tmp_path)


def test_export_serves_what_the_model_predicts(tmp_path: Path) -> None:
    settings = {"crossLayers": 2, "structure": "parallel", "lowRank": 3}
    export_serves_what_the_model_predicts(
        zoo_spec({"architecture": "dcnV2", "dcnV2": settings}), tmp_path
    )


@pytest.mark.slow
@pytest.mark.extended  # make test-all (minutes; see the extended marker)
def test_same_math_alone_and_under_multi_worker_mirrored(tmp_path: Path) -> None:
    settings = {"crossLayers": 2, "structure": "stacked", "lowRank": 4}
    same_math_mirrored(zoo_spec({"architecture": "dcnV2", "dcnV2": settings}), tmp_path)
