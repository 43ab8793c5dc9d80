"""etj.api.spec.model: tables and features, unique names, and the tables an architecture
adds."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from etj.api.architectures import Architecture, linear_table_name
from etj.api.features import FeatureKind
from etj.api.spec import ModelSpec, Optimizer


def _model(**more) -> dict:
    return {
        "embeddings": [
            {"name": "user", "vocabularySize": 100, "dimension": 8},
            {"name": "item", "vocabularySize": 50, "dimension": 8},
        ],
        **more,
    }


def _features(dense: int = 1) -> list[dict]:
    return [
        {"name": "clicked", "kind": FeatureKind.LABEL.value},
        {"name": "u", "kind": FeatureKind.CATEGORICAL.value, "table": "user"},
        {"name": "i", "kind": FeatureKind.CATEGORICAL.value, "table": "item"},
        *({"name": f"d{i}", "kind": FeatureKind.DENSE.value} for i in range(dense)),
    ]


def test_table_and_feature_names_are_unique():
    twice = _model()
    twice["embeddings"].append({"name": "user", "vocabularySize": 3, "dimension": 2})
    with pytest.raises(ValidationError, match="table name 'user' appears twice"):
        ModelSpec.model_validate(twice)
    features = [*_features(), {"name": "u", "kind": FeatureKind.DENSE.value}]
    with pytest.raises(ValidationError, match="feature 'u' appears twice"):
        ModelSpec.model_validate(_model(features=features))


def test_the_tables_are_the_embeddings_alone_for_a_dnn():
    m = ModelSpec.model_validate(_model())
    assert [t.name for t in m.tables] == ["user", "item"]


@pytest.mark.parametrize("architecture", [Architecture.WIDE_DEEP, Architecture.DEEP_FM])
def test_first_order_architectures_add_a_dimension_one_table_per_embedding(architecture):
    m = ModelSpec.model_validate(_model(architecture=architecture.value))
    names = [t.name for t in m.tables]
    assert names == ["user", "item", linear_table_name("user"), linear_table_name("item")]
    linear = m.tables[2]
    assert (linear.dimension, linear.vocabulary_size) == (1, 100)
    assert linear.optimizer == m.embeddings[0].optimizer  # no linear optimizer given


def test_a_linear_optimizer_is_the_first_order_tables():
    m = ModelSpec.model_validate(
        _model(architecture=Architecture.WIDE_DEEP.value, wideDeep={"linearOptimizer": "ftrl"})
    )
    assert {t.optimizer for t in m.tables[2:]} == {Optimizer.FTRL}
    assert m.tables[0].optimizer != Optimizer.FTRL


def test_dense_inputs_come_from_the_features_else_dense_features():
    assert ModelSpec.model_validate(_model(denseFeatures=13)).dense_inputs == 13
    assert ModelSpec.model_validate(_model(features=_features(dense=3))).dense_inputs == 3


def test_interaction_inputs_count_embedding_inputs_and_the_dense_tower():
    assert ModelSpec.model_validate(_model(denseFeatures=13)).interaction_inputs == 3
    assert ModelSpec.model_validate(_model(denseFeatures=0)).interaction_inputs == 2
    assert ModelSpec.model_validate(_model(features=_features(dense=0))).interaction_inputs == 2
    assert ModelSpec.model_validate(_model(features=_features(dense=2))).interaction_inputs == 3


def test_dlrm_needs_two_interaction_inputs():
    one_table = {"embeddings": _model()["embeddings"][:1], "denseFeatures": 0}
    with pytest.raises(ValidationError, match=r"architecture dlrm .* at least two"):
        ModelSpec.model_validate({**one_table, "architecture": Architecture.DLRM.value})
    ModelSpec.model_validate(
        {**one_table, "architecture": Architecture.DLRM.value, "denseFeatures": 1}
    )
