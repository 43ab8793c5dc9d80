"""Dynamic tables in the API and the plan: what a valid ``dynamic`` means, the bytes the
planner counts for a pool with its index and counters, and a capacity the ps cannot hold
(the malformed corpus covers the one-line rejections)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from etj.api.dynamic import DYNAMIC_MODEL_RULES
from etj.api.spec import EmbeddingTrainingJobSpec
from etj.cli.main import main
from etj.core.planner import (
    CANDIDATE_ENTRY_BYTES,
    INDEX_ENTRY_BYTES,
    ROW_STATE_BYTES,
    PlanError,
    build_plan,
)

DYNAMIC = {"name": "user", "vocabularySize": 1, "dimension": 16}


def _spec(dynamic: dict, **extra) -> EmbeddingTrainingJobSpec:
    body = {
        "strategy": "ParameterServer",
        "replicas": {"ps": {"replicas": 2}},
        "model": {"embeddings": [{**DYNAMIC, "dynamic": dynamic}]},
        "training": {"optimizer": "adagrad", "batchSizePerReplica": 100},
        **extra,
    }
    return EmbeddingTrainingJobSpec.model_validate(body)


def test_defaults_admit_at_first_sight_never_evict_and_maintain_every_100_steps():
    d = _spec({"capacity": 10}).model.embeddings[0].dynamic
    assert d is not None
    assert (d.admit_after, d.evict_after_steps, d.maintain_every_steps) == (1, None, 100)


@given(
    capacity=st.integers(1, 10**7),
    fallback=st.integers(1, 1000),
    every=st.integers(1, 1000),
    batch=st.integers(1, 4096),
)
@settings(max_examples=50, deadline=None)
def test_a_dynamic_table_costs_pool_slots_index_row_state_and_candidates(
    capacity, fallback, every, batch
):
    s = EmbeddingTrainingJobSpec.model_validate(
        {
            "strategy": "MultiWorkerMirrored",
            "model": {
                "embeddings": [
                    {
                        **DYNAMIC,
                        "vocabularySize": fallback,
                        "dynamic": {"capacity": capacity, "maintainEverySteps": every},
                    }
                ]
            },
            "training": {"optimizer": "adagrad", "batchSizePerReplica": batch},
        }
    )
    table = build_plan(s).tables[0]
    rows = fallback + capacity
    variables = rows * 16 * 4 * 2  # pool and fallback rows, table and Adagrad accumulator
    overhead = (
        capacity * (INDEX_ENTRY_BYTES + ROW_STATE_BYTES)
        + (capacity + every * batch) * CANDIDATE_ENTRY_BYTES
    )
    assert (table.rows, table.capacity) == (rows, capacity)
    # The overhead is spread over the rows, rounded up per row: never under the estimate.
    assert variables + overhead <= table.bytes < variables + overhead + rows


def test_a_fixed_table_plan_is_unchanged_and_has_no_capacity():
    s = EmbeddingTrainingJobSpec.model_validate(
        {"model": {"embeddings": [{"name": "t", "vocabularySize": 1000, "dimension": 8}]}}
    )
    table = build_plan(s).tables[0]
    assert (table.rows, table.bytes, table.capacity) == (1000, 1000 * 8 * 4 * 2, None)


def test_the_pool_shards_over_the_ps_like_any_table():
    s = _spec({"capacity": 10_000_000}, sharding={"maxShardBytes": "512Mi"})
    plan = build_plan(s)
    table = plan.tables[0]
    assert table.shards > 1 and table.shards % 2 == 0
    assert sum(table.rows_per_shard) == 10_000_001
    assert sum(p.bytes for p in plan.ps) == table.bytes


def test_a_capacity_the_ps_cannot_hold_is_refused_by_its_field_with_what_fits():
    with pytest.raises(PlanError) as err:
        build_plan(_spec({"capacity": 500_000_000}))
    assert err.value.field == "spec.model.embeddings[0].dynamic.capacity"
    assert "lower capacity" in err.value.message
    # The capacity it says the ps hold passes this check (a plan may still need more
    # memory for restore copies and uneven shards: that is the ps check's to say).
    fits = int(err.value.message.split("hold about ")[1].split(" rows")[0].replace(",", ""))
    assert 0 < fits < 500_000_000
    for capacity, refused in ((fits, False), (fits + fits // 100, True)):
        try:
            build_plan(_spec({"capacity": capacity}))
            field = None
        except PlanError as e:
            field = e.field
        assert (field == "spec.model.embeddings[0].dynamic.capacity") == refused, field


def test_a_dynamic_table_with_an_int_feature_and_string_features_elsewhere_is_valid():
    body = {
        "model": {
            "embeddings": [
                {**DYNAMIC, "dynamic": {"capacity": 10}},
                {"name": "item", "vocabularySize": 100, "dimension": 16},
            ],
            "features": [
                {"name": "y", "kind": "label"},
                {"name": "u1", "kind": "categorical", "table": "user", "valueType": "int"},
                {"name": "u2", "kind": "categorical", "table": "user", "valueType": "int"},
                {"name": "i", "kind": "categorical", "table": "item"},
                {"name": "i2", "kind": "categorical", "table": "item", "valueType": "int"},
            ],
        }
    }
    model = EmbeddingTrainingJobSpec.model_validate(body).model
    assert all(rule.check(model) for rule in DYNAMIC_MODEL_RULES)


def test_etj_plan_shows_the_dynamic_tables(tmp_path):
    job = tmp_path / "job.yaml"
    job.write_text(
        "apiVersion: training.etj.dev/v1alpha1\nkind: EmbeddingTrainingJob\n"
        "metadata: {name: dyn}\nspec:\n  model:\n    embeddings:\n"
        "    - {name: user, vocabularySize: 7, dimension: 16, dynamic: {capacity: 123456}}\n"
        "  checkpoint: {uri: gs://ckpt/dyn}\n"
    )
    out = CliRunner().invoke(main, ["plan", str(job)], terminal_width=200)
    assert out.exit_code == 0, out.output
    assert "Dynamic tables" in out.output
    line = next(x for x in out.output.splitlines() if "123,456" in x)
    assert "user" in line and " 7 " in line
