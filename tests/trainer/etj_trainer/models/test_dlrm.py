"""dlrm: the dot interaction against direct pairwise products (no self-pairs), and the
same math alone and under ParameterServer."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from zoo import (
    checkpoint_restores_every_variable,
    etj_run_trains,
    export_serves_what_the_model_predicts,
    same_math,
    same_math_mirrored,
    zoo_spec,
)

MODEL = {"architecture": "dlrm", "dlrm": {"bottomUnits": [8]}}


def test_dot_interaction_is_every_distinct_pair_once() -> None:
    import tensorflow as tf

    from etj_trainer.models.dlrm import dot_interaction

    v = np.random.default_rng(5).normal(size=(3, 4, 6))
    got = dot_interaction(tf.constant(v, tf.float32)).numpy()
    want = np.stack([(v[:, i] * v[:, j]).sum(axis=1) for i in range(4) for j in range(i)], axis=1)
    assert got.shape == (3, 6)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_tower_is_bottom_mlp_interaction_top_mlp() -> None:
    import tensorflow as tf

    from etj_trainer.models.base import TowerInputs
    from etj_trainer.models.dlrm import DlrmTower

    spec = zoo_spec({**MODEL, "hiddenUnits": [5]}).model
    tower = DlrmTower(spec, TowerInputs(("a", "b"), (4, 4), 3), seed=6)
    rng = np.random.default_rng(6)
    emb = {n: rng.normal(size=(7, 4)) for n in "ab"}
    dense = rng.normal(size=(7, 3))
    got = tower(
        {k: tf.constant(v, tf.float32) for k, v in emb.items()}, tf.constant(dense, tf.float32)
    )
    w = {k: v.numpy() for k, v in tower.weights().items()}
    relu = lambda x: np.maximum(x, 0)  # noqa: E731
    z = relu(dense @ w["bottom/0/kernel"] + w["bottom/0/bias"])
    z = relu(z @ w["bottom/1/kernel"] + w["bottom/1/bias"])
    assert z.shape == (7, 4), "the bottom MLP ends at the embedding dimension"
    vectors = [z, emb["a"], emb["b"]]
    dots = [(vectors[i] * vectors[j]).sum(axis=1) for i in range(3) for j in range(i)]
    x = np.concatenate([z, np.stack(dots, axis=1)], axis=1)
    h = relu(x @ w["top/0/kernel"] + w["top/0/bias"])
    want = (h @ w["top/1/kernel"] + w["top/1/bias"])[:, 0]
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-4, atol=1e-5)


def test_one_embedding_and_no_dense_is_refused() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="needs at least two of them"):
        zoo_spec(
            {
                **MODEL,
                "embeddings": [{"name": "user_id", "vocabularySize": 10, "dimension": 8}],
                "denseFeatures": 0,
            }
        )


@pytest.mark.slow
@pytest.mark.extended  # make test-all; CI runs the same math under ParameterServer for dnn and trains every architecture in test_serving_model's fixture
def test_same_math_alone_and_under_parameter_server(tmp_path: Path) -> None:
    same_math(zoo_spec(MODEL), tmp_path)


@pytest.mark.slow
@pytest.mark.extended  # make test-all; CI runs the quickstart under etj run with dnn (test_dnn, test_runner)
def test_etj_run_trains_the_quickstart(tmp_path: Path) -> None:
    etj_run_trains(MODEL, tmp_path)


def test_export_serves_what_the_model_predicts(tmp_path: Path) -> None:
    export_serves_what_the_model_predicts(zoo_spec(MODEL), tmp_path)


@pytest.mark.slow
@pytest.mark.extended  # make test-all (minutes; see the extended marker)
def test_same_math_alone_and_under_multi_worker_mirrored(tmp_path: Path) -> None:
    same_math_mirrored(zoo_spec(MODEL), tmp_path)


def test_checkpoint_restores_every_variable(tmp_path: Path) -> None:
    checkpoint_restores_every_variable(zoo_spec(MODEL), tmp_path)
