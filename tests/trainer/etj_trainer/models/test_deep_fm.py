"""deepFM: the FM term against a direct pairwise sum, and the same math alone and under
ParameterServer."""

from __future__ import annotations

from itertools import combinations
from pathlib import Path

import numpy as np
import pytest
from zoo import (
    etj_run_trains,
    export_serves_what_the_model_predicts,
    same_math,
    same_math_mirrored,
    zoo_spec,
)

MODEL = {"architecture": "deepFM"}


def test_fm_second_order_is_the_sum_of_pairwise_dot_products() -> None:
    import tensorflow as tf

    from etj_trainer.models.deep_fm import fm_second_order

    v = np.random.default_rng(2).normal(size=(5, 4, 3))
    want = sum((v[:, i] * v[:, j]).sum(axis=1) for i, j in combinations(range(4), 2))
    got = fm_second_order(tf.constant(v, tf.float32)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_logit_is_deep_plus_first_order_plus_fm() -> None:
    import tensorflow as tf

    from etj_trainer.models.base import TowerInputs, apply_mlp
    from etj_trainer.models.deep_fm import DeepFmTower

    spec = zoo_spec(MODEL).model
    tower = DeepFmTower(spec, TowerInputs(("a", "b", "c"), (4, 4, 4), 2, linear=True), seed=0)
    rng = np.random.default_rng(3)
    emb = {n: rng.normal(size=(6, 4)) for n in "abc"}
    emb |= {f"{n}__linear": rng.normal(size=(6, 1)) for n in "abc"}
    dense = rng.normal(size=(6, 2))
    t = {k: tf.constant(v, tf.float32) for k, v in emb.items()}
    got = tower(t, tf.constant(dense, tf.float32)).numpy()
    x = tf.constant(np.concatenate([emb["a"], emb["b"], emb["c"], dense], axis=1), tf.float32)
    deep = apply_mlp(tower.weights(), "deep", 3, x, relu_last=False).numpy()[:, 0]
    first = sum(emb[f"{n}__linear"][:, 0] for n in "abc")
    pairs = sum((emb[i] * emb[j]).sum(axis=1) for i, j in combinations("abc", 2))
    np.testing.assert_allclose(got, deep + first + pairs, rtol=1e-4, atol=1e-5)


def test_tables_of_different_dimensions_are_refused_naming_the_table() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="table 'item_id' has dimension 4, table 'user_id'"):
        zoo_spec(
            {
                **MODEL,
                "embeddings": [
                    {"name": "user_id", "vocabularySize": 10, "dimension": 8},
                    {"name": "item_id", "vocabularySize": 10, "dimension": 4},
                ],
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
