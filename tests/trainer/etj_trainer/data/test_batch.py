"""data/batch: the keys of a batch and the tower's embedding inputs, for jobs that give
tables only and for jobs with a feature schema (several features on one table,
multi-valued features). Pure: no TensorFlow."""

from __future__ import annotations

from etj.api.spec import ModelSpec
from etj_trainer.data.batch import INPUT_PREFIX, Lookup, input_key, lookups

TABLES = [
    {"name": "user", "vocabularySize": 100, "dimension": 4, "idsPerExample": 2},
    {"name": "item", "vocabularySize": 50, "dimension": 4},
]


def test_tables_only_one_input_per_table_under_its_name():
    model = ModelSpec.model_validate({"embeddings": TABLES})
    assert lookups(model) == [Lookup("user", 0, 2, False), Lookup("item", 1, 1, False)]


def test_features_one_input_per_categorical_feature_on_its_table():
    model = ModelSpec.model_validate(
        {
            "embeddings": TABLES,
            "features": [
                {"name": "y", "kind": "label"},
                {"name": "price", "kind": "dense"},
                {"name": "buyer", "kind": "categorical", "table": "user"},
                {"name": "seller", "kind": "categorical", "table": "user"},
                {
                    "name": "tags",
                    "kind": "categorical",
                    "table": "item",
                    "delimiter": "|",
                    "maxLength": 3,
                },
            ],
        }
    )
    assert lookups(model) == [
        Lookup("ids/buyer", 0, 1, False),
        Lookup("ids/seller", 0, 1, False),
        Lookup("ids/tags", 1, 3, True),
    ]


def test_feature_keys_cannot_collide_with_label_or_dense():
    # A feature may be named "label" or "dense": its ids live under the prefix.
    assert input_key("label") == f"{INPUT_PREFIX}label" != "label"
    assert input_key("dense").startswith(INPUT_PREFIX)
