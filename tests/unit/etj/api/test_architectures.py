"""spec.model.architecture: defaults, per-architecture settings, the rules that refuse bad
combinations (naming what to change), and the first-order tables the planner plans."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from etj.api import EmbeddingTrainingJob
from etj.api.architectures import FIRST_ORDER, Architecture
from etj.api.spec import ModelSpec
from etj.core.planner import build_plan
from tests.unit.conftest import ROOT, load_example


def _model(**kw: Any) -> ModelSpec:
    doc: dict[str, Any] = {
        "embeddings": [
            {"name": "user_id", "vocabularySize": 1000, "dimension": 8},
            {"name": "item_id", "vocabularySize": 500, "dimension": 8, "optimizer": "adam"},
        ],
        "denseFeatures": 2,
    }
    doc.update(kw)
    return ModelSpec.model_validate(doc)


def test_dnn_is_the_default_and_has_only_the_users_tables() -> None:
    model = _model()
    assert model.architecture == Architecture.DNN
    assert [t.name for t in model.tables] == ["user_id", "item_id"]


@pytest.mark.parametrize("arch", ["wideDeep", "deepFM"])
def test_first_order_tables_follow_the_users_tables(arch: str) -> None:
    model = _model(architecture=arch)
    tables = model.tables
    assert [t.name for t in tables] == ["user_id", "item_id", "user_id__linear", "item_id__linear"]
    assert [(t.vocabulary_size, t.dimension) for t in tables[2:]] == [(1000, 1), (500, 1)]
    # Each inherits its table's optimizer unless linearOptimizer says otherwise.
    assert [t.optimizer for t in tables[2:]] == [None, "adam"]
    settings = {"wideDeep": "wideDeep", "deepFM": "deepFM"}[arch]
    ftrl = _model(architecture=arch, **{settings: {"linearOptimizer": "ftrl"}})
    assert [t.optimizer for t in ftrl.tables[2:]] == ["ftrl", "ftrl"]


def test_the_plan_shards_first_order_tables_like_the_others() -> None:
    doc = load_example("quickstart.yaml")
    doc["spec"]["model"]["architecture"] = "wideDeep"
    doc["spec"]["sharding"]["maxShardBytes"] = "512Ki"
    spec = EmbeddingTrainingJob.from_manifest(doc).spec
    plan = build_plan(spec)
    names = [t.name for t in plan.tables]
    assert names == ["user_id", "item_id", "user_id__linear", "item_id__linear"]
    linear = plan.tables[2]
    assert linear.dimension == 1 and linear.rows == 200000 and linear.shards > 1
    # The ps memory counts them: a dnn plan of the same job holds less.
    doc["spec"]["model"]["architecture"] = "dnn"
    dnn = build_plan(EmbeddingTrainingJob.from_manifest(doc).spec)
    assert plan.total_bytes == dnn.total_bytes + 250000 * 4 * 2  # float32 + one Adagrad slot


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"dcnV2": {"crossLayers": 2}}, "model.dcnV2 is given but model.architecture is 'dnn'"),
        (
            {"architecture": "deepFM", "dlrm": {}},
            "model.dlrm is given but model.architecture is 'deepFM'",
        ),
        (
            {
                "architecture": "dlrm",
                "embeddings": [
                    {"name": "user_id", "vocabularySize": 10, "dimension": 8},
                    {"name": "item_id", "vocabularySize": 10, "dimension": 16},
                ],
            },
            "table 'item_id' has dimension 16, table 'user_id' has 8",
        ),
        (
            {
                "architecture": "wideDeep",
                "embeddings": [
                    {"name": "a", "vocabularySize": 10, "dimension": 8},
                    {"name": "a__linear", "vocabularySize": 10, "dimension": 8},
                ],
            },
            "'a__linear' is reserved for the first-order table of 'a'",
        ),
        (
            {
                "architecture": "dlrm",
                "embeddings": [{"name": "a", "vocabularySize": 10, "dimension": 8}],
                "denseFeatures": 0,
            },
            "needs at least two of them",
        ),
        ({"architecture": "dcnV2", "dcnV2": {"structure": "diagonal"}}, "stacked"),
        ({"architecture": "dcnV2", "dcnV2": {"lowRank": 0}}, "greater than or equal to 1"),
        ({"architecture": "transformer"}, "dnn"),
    ],
)
def test_bad_combinations_are_refused_with_what_to_change(change: dict, message: str) -> None:
    with pytest.raises(ValidationError) as err:
        _model(**change)
    assert message in str(err.value)


def test_dims_may_differ_for_architectures_without_dot_products() -> None:
    tables = [
        {"name": "a", "vocabularySize": 10, "dimension": 8},
        {"name": "b", "vocabularySize": 10, "dimension": 4},
    ]
    for arch in ("dnn", "wideDeep", "dcnV2"):
        assert _model(architecture=arch, embeddings=tables).architecture == arch


def test_the_crd_describes_every_architecture() -> None:
    crd = yaml.safe_load(
        (ROOT / "crds" / "embeddingtrainingjobs.training.etj.dev.yaml").read_text()
    )
    model = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"][
        "properties"
    ]["model"]
    assert model["properties"]["architecture"]["enum"] == [a.value for a in Architecture]
    assert {"wideDeep", "deepFM", "dcnV2", "dlrm"} <= set(model["properties"])
    dcn = model["properties"]["dcnV2"]["properties"]
    assert dcn["structure"]["enum"] == ["stacked", "parallel"]
    messages = [r["message"] for r in model["x-kubernetes-validations"]]
    assert any("every table of the same dimension" in m for m in messages)


def test_the_example_validates_and_plans() -> None:
    doc = yaml.safe_load((ROOT / "examples" / "dcn-v2.yaml").read_text())
    spec = EmbeddingTrainingJob.from_manifest(doc).spec
    assert spec.model.architecture == "dcnV2" and spec.model.dcn_v2 is not None
    assert spec.model.dcn_v2.low_rank == 32
    assert build_plan(spec).ps_replicas == 2


CRITEO_EXAMPLES = sorted(p.stem for p in (ROOT / "examples").glob("criteo-*.yaml"))


def test_every_architecture_but_dnn_has_a_criteo_example() -> None:
    """The Criteo examples are found by the architecture they name (here and in
    tests/local/etj/local/test_runner_examples.py): a new architecture needs its example."""
    named = {
        yaml.safe_load((ROOT / "examples" / f"{e}.yaml").read_text())["spec"]["model"][
            "architecture"
        ]
        for e in CRITEO_EXAMPLES
    }
    assert named == {a.value for a in Architecture} - {Architecture.DNN.value}


@pytest.mark.parametrize("example", CRITEO_EXAMPLES)
def test_each_criteo_example_is_criteo_yaml_with_another_architecture(example: str) -> None:
    """One Criteo example per architecture (tests/local/etj/local/test_runner_examples.py trains each): the
    same columns, tables, data and training as criteo.yaml; only the name and the
    architecture with its settings differ, so they cannot drift apart."""
    base = yaml.safe_load((ROOT / "examples" / "criteo.yaml").read_text())
    doc = yaml.safe_load((ROOT / "examples" / f"{example}.yaml").read_text())
    assert doc["metadata"]["name"] == example
    model = doc["spec"]["model"]
    architecture = model.pop("architecture")
    settings = model.pop(architecture)
    assert architecture != "dnn" and isinstance(settings, dict)
    doc["metadata"]["name"] = base["metadata"]["name"]
    assert doc == base
    job = EmbeddingTrainingJob.from_manifest(
        yaml.safe_load((ROOT / "examples" / f"{example}.yaml").read_text())
    )
    tables = [t.name for t in job.spec.model.tables]
    first_order = Architecture(architecture) in FIRST_ORDER
    assert len(tables) == 26 * (2 if first_order else 1)
    assert build_plan(job.spec).ps_replicas == 1


def test_a_first_order_registration_without_linear_settings_is_refused() -> None:
    from etj.api.architectures import DcnV2Spec, LinearPart, Registration

    for settings in (None, DcnV2Spec):
        with pytest.raises(TypeError, match="must derive from LinearPart"):
            Registration("sparseLinear", settings, first_order=True)

    class SparseLinearSpec(LinearPart):
        pass

    assert Registration("sparseLinear", SparseLinearSpec, first_order=True).first_order
    assert Registration("plain", DcnV2Spec).settings is DcnV2Spec
