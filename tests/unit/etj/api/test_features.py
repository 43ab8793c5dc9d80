"""spec.model.features and the file settings: what a valid schema means, and the rules
written once for CEL and pydantic (the malformed corpus covers the rejections)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from etj.api.features import FEATURE_RULES, MODEL_FEATURE_RULES, Feature
from etj.api.spec import EmbeddingTrainingJobSpec, ModelSpec
from etj.core.crd import build_crd

ROOT = Path(__file__).resolve().parents[4]
TABLES = [{"name": "ids", "vocabularySize": 1000, "dimension": 8}]


def _model(*features: dict) -> ModelSpec:
    return ModelSpec.model_validate({"embeddings": TABLES, "features": list(features)})


def test_dense_inputs_count_the_dense_features_and_not_dense_features():
    m = _model(
        {"name": "y", "kind": "label"},
        {"name": "a", "kind": "dense"},
        {"name": "b", "kind": "dense", "transform": "log1p"},
        {"name": "c", "kind": "categorical", "table": "ids"},
    )
    assert m.dense_inputs == 2
    assert ModelSpec.model_validate({"embeddings": TABLES, "denseFeatures": 5}).dense_inputs == 5


def test_a_multi_valued_feature_reads_max_length_values():
    f = Feature.model_validate(
        {"name": "g", "kind": "categorical", "table": "ids", "delimiter": "|", "maxLength": 3}
    )
    assert f.multi_valued and f.values_per_example == 3
    single = Feature.model_validate({"name": "g", "kind": "categorical", "table": "ids"})
    assert not single.multi_valued and single.values_per_example == 1
    assert str(single.stored_type) == "string"


def test_two_features_may_share_a_table():
    m = _model(
        {"name": "y", "kind": "label"},
        {"name": "from", "kind": "categorical", "table": "ids"},
        {"name": "to", "kind": "categorical", "table": "ids"},
    )
    assert [f.table for f in m.features or []] == [None, "ids", "ids"]


def test_duplicate_feature_names_are_refused():
    with pytest.raises(ValidationError, match="appears twice"):
        _model(
            {"name": "y", "kind": "label"},
            {"name": "c", "kind": "categorical", "table": "ids"},
            {"name": "c", "kind": "dense"},
        )


@pytest.mark.parametrize("rule", FEATURE_RULES + MODEL_FEATURE_RULES, ids=lambda r: r.message)
def test_every_rule_is_in_the_crd_with_its_message(rule):
    text = json.dumps(build_crd())
    assert rule.message in text


@pytest.mark.parametrize(
    "example", ["criteo.yaml", "avazu.yaml", "movielens.yaml", "movielens-parquet.yaml"]
)
def test_the_data_examples_validate(example):
    doc = yaml.safe_load((ROOT / "examples" / example).read_text())
    spec = EmbeddingTrainingJobSpec.model_validate(doc["spec"])
    assert spec.model.features and spec.data.validation and spec.training.epochs


def _parquet_job(**spec: object) -> dict:
    doc = yaml.safe_load((ROOT / "examples" / "movielens-parquet.yaml").read_text())
    return doc["spec"] | spec


def test_parquet_needs_features_and_no_parameter_server():
    from etj.api.spec.job import _EPOCH_RULES

    EmbeddingTrainingJobSpec.model_validate(_parquet_job())
    with pytest.raises(ValidationError, match="cannot be read under strategy ParameterServer"):
        EmbeddingTrainingJobSpec.model_validate(_parquet_job(strategy="ParameterServer"))
    model = {"embeddings": [{"name": "t", "vocabularySize": 10, "dimension": 4}]}
    with pytest.raises(ValidationError, match=r"parquet needs model\.features"):
        EmbeddingTrainingJobSpec.model_validate(_parquet_job(model=model, strategy="Auto"))
    text = json.dumps(build_crd())
    for rule in _EPOCH_RULES:
        assert rule.message in text
