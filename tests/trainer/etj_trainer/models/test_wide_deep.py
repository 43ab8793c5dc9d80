"""wideDeep: its math, its first-order tables, and the same math alone and under
ParameterServer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

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

MODEL = {"architecture": "wideDeep", "wideDeep": {"linearOptimizer": "ftrl"}}


def test_wide_part_adds_first_order_weights_and_dense_weights_to_the_mlp() -> None:
    import tensorflow as tf

    from etj_trainer.models.base import TowerInputs, apply_mlp
    from etj_trainer.models.wide_deep import WideDeepTower

    spec = zoo_spec(MODEL).model
    inputs = TowerInputs(names=("a", "b"), dims=(4, 4), dense=3, linear=True)
    tower = WideDeepTower(spec, inputs, seed=3)
    rng = np.random.default_rng(0)
    w = tower.weights()
    w = {**w, "wide/dense": tf.constant(rng.normal(size=3), tf.float32)}
    emb = {n: tf.constant(rng.normal(size=(5, 4)), tf.float32) for n in ("a", "b")}
    emb |= {f"{n}__linear": tf.constant(rng.normal(size=(5, 1)), tf.float32) for n in "ab"}
    dense = tf.constant(rng.normal(size=(5, 3)), tf.float32)
    got = tower.forward(w, emb, dense, False).numpy()
    x = tf.concat([emb["a"], emb["b"], dense], axis=1)
    deep = apply_mlp(w, "deep", 3, x, relu_last=False).numpy()[:, 0]
    wide = emb["a__linear"].numpy()[:, 0] + emb["b__linear"].numpy()[:, 0]
    wide += dense.numpy() @ w["wide/dense"].numpy()
    np.testing.assert_allclose(got, deep + wide, rtol=1e-5, atol=1e-6)


def test_first_order_tables_are_planned_after_the_users_tables() -> None:
    from harness import trainer_config

    config = trainer_config(zoo_spec(MODEL))
    names = [t.name for t in config.shard_plan.tables]
    assert names == [
        "user_id",
        "item_id",
        "country",
        "user_id__linear",
        "item_id__linear",
        "country__linear",
    ]
    linear = config.shard_plan.tables[3]
    assert (linear.rows, linear.dimension, linear.optimizer) == (3000, 1, "ftrl")


@pytest.mark.slow
@pytest.mark.extended  # make test-all; CI runs the same math under ParameterServer for dnn and trains wide_deep in test_serving_model's fixture
def test_same_math_alone_and_under_parameter_server(tmp_path: Path) -> None:
    report: dict[str, Any] = same_math(zoo_spec(MODEL), tmp_path)
    # The ftrl slots of the first-order tables trained too.
    assert report["moved"]["slots/tables/user_id__linear/linear"] > 0


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


def test_checkpoint_restores_tables_first_order_tables_tower_and_slots(tmp_path: Path) -> None:
    checkpoint_restores_every_variable(zoo_spec(MODEL), tmp_path)
