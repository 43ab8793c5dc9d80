"""spec.warmStart's shape and the table rules both sides apply (etj.api.warmstart)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from etj.api.spec import EmbeddingTrainingJobSpec
from etj.api.warmstart import (
    LabelSelector,
    TableAction,
    TableInfo,
    WarmStartSpec,
    decision_line,
    table_decisions,
)
from etj.core.crd import build_crd


def _spec(warm_start: dict[str, Any]) -> EmbeddingTrainingJobSpec:
    return EmbeddingTrainingJobSpec.model_validate(
        {
            "model": {"embeddings": [{"name": "user_id", "vocabularySize": 10, "dimension": 4}]},
            "warmStart": warm_start,
        }
    )


def test_the_wire_form_is_camel_case_with_defaults():
    ws = _spec({"fromJob": "day-1"}).warm_start
    assert ws is not None
    assert ws.to_wire() == {
        "fromJob": "day-1",
        "stepCount": "Restart",
        "optimizerState": "Keep",
        "ifNoSource": "Wait",
    }


@pytest.mark.parametrize(
    ("warm_start", "message"),
    [
        ({}, "set exactly one of fromJob, selector and checkpoint"),
        (
            {"fromJob": "a", "checkpoint": {"uri": "gs://b/p"}},
            "set exactly one of fromJob, selector and checkpoint",
        ),
        ({"checkpoint": {}}, "set exactly one of uri and claim"),
        ({"checkpoint": {"uri": "s3://b/p"}}, "must be gs://bucket/path or an absolute path"),
        ({"checkpoint": {"uri": "/a", "path": "x"}}, "path is a directory in the claim"),
        ({"fromJob": "a", "freshTables": ["item_id"]}, "item_id is not a table"),
        ({"fromJob": "a", "stepCount": "restart"}, "Restart"),
    ],
)
def test_bad_warm_starts_are_refused_naming_the_field(warm_start, message):
    with pytest.raises(ValidationError, match=message):
        _spec(warm_start)


def test_every_warm_start_field_is_described_for_kubectl_explain():
    schema = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    spec = schema["properties"]["spec"]["properties"]["warmStart"]
    status = schema["properties"]["status"]["properties"]["warmStart"]

    def undescribed(node: dict[str, Any], path: str) -> list[str]:
        out = [] if node.get("description") else [path]
        for name, child in (node.get("properties") or {}).items():
            out += undescribed(child, f"{path}.{name}")
        for name, child in (node.get("items") or {}).get("properties", {}).items():
            out += undescribed(child, f"{path}[].{name}")
        return out

    assert undescribed(spec, "spec.warmStart") == []
    assert undescribed(status, "status.warmStart") == []
    # The API server checks the one-source rule too.
    rules = [r["rule"] for r in spec["x-kubernetes-validations"]]
    assert any("fromJob" in r and "selector" in r for r in rules)


def test_a_selector_matches_as_kubernetes_selectors_do():
    s = LabelSelector.model_validate(
        {
            "matchLabels": {"chain": "ctr"},
            "matchExpressions": [
                {"key": "day", "operator": "In", "values": ["1", "2"]},
                {"key": "broken", "operator": "DoesNotExist"},
            ],
        }
    )
    assert s.matches({"chain": "ctr", "day": "1"})
    assert not s.matches({"chain": "ctr", "day": "3"})
    assert not s.matches({"chain": "other", "day": "1"})
    assert not s.matches({"chain": "ctr", "day": "2", "broken": "yes"})
    assert s.text() == "chain=ctr,day in (1,2),!broken"
    assert LabelSelector().matches({"anything": "x"})


def _t(name: str, rows: int = 100, dim: int = 8, **kw: Any) -> TableInfo:
    base: dict[str, Any] = {"dtype": "float32", "optimizer": "adagrad", "capacity": None}
    return TableInfo(name, rows, dim, **{**base, **kw})


def test_tables_restored_started_fresh_and_dropped_each_with_its_reason():
    source = [_t("user"), _t("item"), _t("old")]
    job = [_t("user", dtype="bfloat16"), _t("item", optimizer="ftrl"), _t("new")]
    tables, problems = table_decisions(source, job, [], keep_optimizer=True)
    assert problems == []
    assert [decision_line(t) for t in tables] == [
        "table user: restored (float32 -> bfloat16; adagrad state kept)",
        "table item: restored (optimizer state reset (adagrad -> ftrl))",
        "table new: started fresh (not in the checkpoint)",
        "table old: dropped (not in this job's model: left in the checkpoint)",
    ]
    assert [t.optimizer_state for t in tables] == ["Kept", "Reset", None, None]


def test_a_changed_vocabulary_size_is_refused_naming_the_table_unless_named_fresh():
    source = [_t("user", rows=5000), _t("item")]
    job = [_t("user", rows=6000), _t("item")]
    _, problems = table_decisions(source, job, [], keep_optimizer=True)
    assert len(problems) == 1
    assert problems[0].startswith("table user: vocabularySize 5000 in the checkpoint, 6000 here")
    assert "list it in warmStart.freshTables" in problems[0]
    tables, problems = table_decisions(source, job, ["user"], keep_optimizer=False)
    assert problems == []
    assert [(t.name, t.action) for t in tables] == [
        ("user", TableAction.STARTED_FRESH),
        ("item", TableAction.RESTORED),
    ]
    assert tables[1].optimizer_state == "Reset"


@pytest.mark.parametrize(
    ("saved", "here", "says"),
    [
        (_t("user", dim=8), _t("user", dim=16), "dimension 8 in the checkpoint, 16 here"),
        (_t("user", capacity=50), _t("user"), "dynamic in the checkpoint, hashed here"),
        (_t("user", rows=4, capacity=50), _t("user", rows=8, capacity=50), "fallback rows"),
    ],
)
def test_other_tables_that_cannot_carry_over(saved, here, says):
    _, problems = table_decisions([saved], [here], [], keep_optimizer=True)
    assert len(problems) == 1 and says in problems[0] and problems[0].startswith("table user:")


def test_a_first_order_table_goes_with_its_table_when_named_fresh():
    tables, problems = table_decisions(
        [_t("user"), _t("user__linear", dim=1)],
        [_t("user", rows=7), _t("user__linear", rows=7, dim=1)],
        ["user"],
        keep_optimizer=True,
    )
    assert problems == []
    assert {t.action for t in tables} == {TableAction.STARTED_FRESH}


def test_the_spec_model_round_trips():
    ws = WarmStartSpec.model_validate(
        {"selector": {"matchLabels": {"chain": "ctr"}}, "stepCount": "Continue"}
    )
    assert WarmStartSpec.model_validate(ws.to_wire()) == ws


def test_a_dynamic_table_may_change_capacity_the_least_recently_seen_going_first():
    tables, problems = table_decisions(
        [_t("user", rows=4, capacity=80)], [_t("user", rows=4, capacity=50)], [], True
    )
    assert problems == []
    assert decision_line(tables[0]) == (
        "table user: restored (capacity 80 -> 50: the ids seen least recently go first when "
        "a shard has no row left; adagrad state kept)"
    )


def test_a_feature_that_maps_its_values_to_rows_another_way_is_refused():
    from etj.api.spec import ModelSpec
    from etj.api.warmstart import table_infos

    def model(vocabulary: str | None, value_type: str = "string") -> ModelSpec:
        site: dict[str, Any] = {
            "name": "site",
            "kind": "categorical",
            "table": "site",
            "valueType": value_type,
        }
        if vocabulary:
            site["vocabularyFile"] = vocabulary
        return ModelSpec.model_validate(
            {
                "embeddings": [{"name": "site", "vocabularySize": 100, "dimension": 4}],
                "features": [{"name": "label", "kind": "label"}, site],
            }
        )

    saved = table_infos(model("/v/sites-1.txt"), "adagrad")
    _, problems = table_decisions(saved, table_infos(model("/v/sites-2.txt"), "adagrad"), [], True)
    assert problems == [
        "table site: feature site maps its values to rows another way (valueType string, "
        "vocabularyFile /v/sites-1.txt in the checkpoint; string, /v/sites-2.txt here): an "
        "id would read another id's row: keep the feature as it was, or list it in "
        "warmStart.freshTables to start it fresh"
    ]
    _, problems = table_decisions(saved, table_infos(model(None, "int"), "adagrad"), [], True)
    assert len(problems) == 1 and "in the checkpoint; int, none here" in problems[0]
    _, problems = table_decisions(saved, table_infos(model("/v/sites-1.txt"), "adagrad"), [], True)
    assert problems == []
