"""dnn (the default architecture): exactly etj's original MLP, and the same math alone and
under ParameterServer."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from harness import trainer_config
from zoo import (
    etj_run_trains,
    export_serves_what_the_model_predicts,
    same_math,
    same_math_mirrored,
    zoo_spec,
)


def test_dnn_is_the_default_and_keeps_the_original_weights() -> None:
    """The architecture field left out gives the tower etj had before the zoo: one
    variable ``tower`` at checkpoint key model/tower_params, its layers' kernels Glorot
    uniform seeded (seed, 10000 + layer), biases zero, in (kernel, bias) order."""
    import tensorflow as tf

    from etj_trainer.task.state import TrainingState

    config = trainer_config(zoo_spec({}, training={"seed": 5, "batchSizePerReplica": 8}))
    assert config.model.architecture == "dnn"
    state = TrainingState(config, tf.distribute.get_strategy())
    width = 8 * 3 + 3
    expected = []
    for i, units in enumerate([16, 8, 1]):
        limit = (6.0 / (width + units)) ** 0.5
        kernel = tf.random.stateless_uniform(
            (width, units), seed=(5, 10_000 + i), minval=-limit, maxval=limit
        )
        expected += [kernel.numpy().reshape(-1), np.zeros(units, np.float32)]
        width = units
    np.testing.assert_array_equal(state.model.tower.params.numpy(), np.concatenate(expected))
    assert state.model.tower.params.name.startswith("tower")
    assert "model/tower_params" in state.named_variables()
    # Saved under the key it always had.
    names = [n for n, _ in tf.train.list_variables(_save(state))]
    assert "model/tower_params/.ATTRIBUTES/VARIABLE_VALUE" in names
    assert not any("model/tower/" in n for n in names), names


def _save(state: object) -> str:
    import tempfile

    return str(state.checkpoint.write(tempfile.mkdtemp() + "/ckpt"))  # type: ignore[attr-defined]


def test_forward_is_the_mlp_on_embeddings_then_dense() -> None:
    import tensorflow as tf

    from etj_trainer.models.base import TowerInputs
    from etj_trainer.models.dnn import DnnTower

    spec = zoo_spec({"hiddenUnits": [6]}).model
    tower = DnnTower(spec, TowerInputs(names=("a", "b"), dims=(3, 2), dense=2), seed=1)
    rng = np.random.default_rng(1)
    emb = {"a": rng.normal(size=(4, 3)), "b": rng.normal(size=(4, 2))}
    dense = rng.normal(size=(4, 2))
    got = tower(
        {k: tf.constant(v, tf.float32) for k, v in emb.items()}, tf.constant(dense, tf.float32)
    )
    w = {k: v.numpy() for k, v in tower.weights().items()}
    x = np.concatenate([emb["a"], emb["b"], dense], axis=1)
    h = np.maximum(x @ w["mlp/0/kernel"] + w["mlp/0/bias"], 0)
    want = (h @ w["mlp/1/kernel"] + w["mlp/1/bias"])[:, 0]
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_same_math_alone_and_under_parameter_server(tmp_path: Path) -> None:
    same_math(zoo_spec({"architecture": "dnn"}), tmp_path)


@pytest.mark.extended  # make test-all; CI runs the quickstart through `etj run` in tests/local/etj/local/test_runner.py (a killed worker included)
@pytest.mark.slow
def test_etj_run_trains_the_quickstart(tmp_path: Path) -> None:
    etj_run_trains({}, tmp_path)


def test_export_serves_what_the_model_predicts(tmp_path: Path) -> None:
    export_serves_what_the_model_predicts(zoo_spec({}), tmp_path)


@pytest.mark.slow
@pytest.mark.extended  # make test-all (minutes; see the extended marker)
def test_same_math_alone_and_under_multi_worker_mirrored(tmp_path: Path) -> None:
    same_math_mirrored(zoo_spec({"architecture": "dnn"}), tmp_path)
