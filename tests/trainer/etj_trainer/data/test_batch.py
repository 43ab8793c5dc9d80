"""data/batch: the keys of a batch and the tower's embedding inputs, for jobs that give
tables only and for jobs with a feature schema (several features on one table,
multi-valued features). Pure: no TensorFlow."""

from __future__ import annotations

from pathlib import Path
from typing import Any

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


def test_a_feature_schema_trains_on_synthetic_data(tf: Any) -> None:
    """Criteo's schema with data.source synthetic: every categorical feature gets its own
    input (two features share a table here), the dense features one matrix, and the model
    built from that schema takes the batch (it used to fail on the table-named keys)."""
    import yaml

    from etj.api.job import EmbeddingTrainingJob
    from etj_trainer.data.batch import input_key, lookups
    from etj_trainer.data.pipeline import make_dataset

    root = Path(__file__).resolve().parents[4]
    doc = yaml.safe_load((root / "examples" / "criteo.yaml").read_text())
    doc["spec"]["model"]["features"][-1]["table"] = "c25"  # C26 shares C25's table
    doc["spec"]["model"]["embeddings"] = doc["spec"]["model"]["embeddings"][:-1]
    doc["spec"]["data"] = {"source": "synthetic"}
    doc["spec"]["training"] = {"steps": 10, "batchSizePerReplica": 64}
    spec = EmbeddingTrainingJob.from_manifest(doc).spec
    batch = next(iter(make_dataset(spec.model, spec.data, 64)))
    keys = {x.key for x in lookups(spec.model)}
    assert keys == {input_key(f"C{i}") for i in range(1, 27)}
    assert keys <= set(batch) and batch["dense"].shape == (64, 13)
    c26 = batch[input_key("C26")].numpy()
    assert c26.shape == (64, 1) and c26.min() >= 0 and c26.max() < 100  # c25's rows
    assert 0.05 < batch["label"].numpy().mean() < 0.95
    from etj.api.trainer import TrainerConfig
    from etj.core.planner import build_plan
    from etj_trainer.models.ctr import CtrModel

    config = TrainerConfig(
        job_name="j",
        strategy="MultiWorkerMirrored",
        model=spec.model,
        data=spec.data,
        training=spec.training,
        shard_plan=build_plan(spec),
        metrics_port=9102,
    )
    assert CtrModel(config)(batch).shape == (64,)
