"""etj.api.dynamic: a dynamic table's settings, its rows, and the rules on its features."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from pydantic import ValidationError

from etj.api.dynamic import MAX_CAPACITY, DynamicTable, check_key_space, table_rows
from etj.api.spec import ModelSpec


def _feature(name: str, **more: str) -> dict:
    return {"name": name, "kind": "categorical", "table": "user", **more}


def _model(features: list[dict], dynamic: bool = True) -> dict:
    table = {"name": "user", "vocabularySize": 100, "dimension": 8}
    if dynamic:
        table["dynamic"] = {"capacity": 1000}
    return {"embeddings": [table], "features": [{"name": "clicked", "kind": "label"}, *features]}


def test_the_defaults_and_bounds():
    d = DynamicTable(capacity=10)
    assert (d.admit_after, d.evict_after_steps, d.maintain_every_steps) == (1, None, 100)
    for bad in ({"capacity": 0}, {"capacity": MAX_CAPACITY + 1}, {"capacity": 1, "admitAfter": 0}):
        with pytest.raises(ValidationError):
            DynamicTable.model_validate(bad)


def test_a_dynamic_tables_rows_are_its_fallback_then_its_pool():
    spec = ModelSpec.model_validate(_model([_feature("u")]))
    assert table_rows(spec.embeddings[0]) == 100 + 1000
    fixed = ModelSpec.model_validate(_model([_feature("u")], dynamic=False))
    assert table_rows(fixed.embeddings[0]) == 100


def test_the_features_of_a_dynamic_table_share_one_value_type():
    check_key_space(ModelSpec.model_validate(_model([_feature("a"), _feature("b")])))
    # The key space is checked alone (``etj validate`` and the model's validator call it).
    table = SimpleNamespace(name="user", dynamic=DynamicTable(capacity=10))
    mixed = SimpleNamespace(
        embeddings=[table],
        features=[
            SimpleNamespace(table="user", value_type=None),  # a string by default
            SimpleNamespace(table="user", value_type="int"),
        ],
    )
    with pytest.raises(ValueError, match=r"dynamic table 'user'.*one valueType"):
        check_key_space(mixed)
    with pytest.raises(ValidationError, match="one valueType"):
        ModelSpec.model_validate(_model([_feature("a"), _feature("b", valueType="int")]))


def test_mixed_value_types_are_fine_on_a_fixed_table():
    spec = ModelSpec.model_validate(
        _model(
            [_feature("a"), _feature("b", valueType="int")],
            dynamic=False,
        )
    )
    check_key_space(spec)


def test_a_dynamic_tables_feature_has_no_vocabulary_file():
    with pytest.raises(ValidationError, match="drop vocabularyFile or dynamic"):
        ModelSpec.model_validate(_model([_feature("a", vocabularyFile="/v/users.txt")]))
