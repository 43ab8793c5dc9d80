"""The shard planner: sizes, shard counts, TensorFlow's placement rule, ps: auto, errors."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from etj.api.quantity import quantity_bytes
from etj.api.spec import MAX_PS, EmbeddingTrainingJobSpec
from etj.core.planner import (
    MAX_TOTAL_SHARDS,
    PlanError,
    PlanTooLarge,
    build_plan,
    ps_memory_budget,
    resolve_strategy,
    rows_per_shard,
)


def spec(tables, **extra) -> EmbeddingTrainingJobSpec:
    body = {"model": {"embeddings": tables}, **extra}
    return EmbeddingTrainingJobSpec.model_validate(body)


BIG = {"name": "user_id", "vocabularySize": 20_000_000, "dimension": 64, "dtype": "float32"}


def test_issue_example_20m_x_64_adagrad_shards_and_fits_ps_memory():
    s = spec(
        [BIG],
        strategy="ParameterServer",
        training={"optimizer": "adagrad"},
        replicas={"ps": {"replicas": "auto", "resources": {"limits": {"memory": "8Gi"}}}},
    )
    plan = build_plan(s)
    table = plan.tables[0]
    # 20M x 64 x 4 bytes x (1 + 1 Adagrad slot) = 10.24 GB.
    assert table.bytes == 20_000_000 * 64 * 4 * 2
    assert table.shards >= 3
    assert all(
        table.shard_bytes(j) <= quantity_bytes(s.sharding.max_shard_bytes)
        for j in range(table.shards)
    )
    assert all(p.memory_request_bytes <= quantity_bytes("8Gi") for p in plan.ps)
    assert plan.ps_replicas >= 2  # 10 GB cannot fit one 8 Gi ps


@pytest.mark.parametrize(
    ("optimizer", "slots"), [("sgd", 0), ("adagrad", 1), ("ftrl", 2), ("adam", 2)]
)
def test_bytes_count_optimizer_slots(optimizer, slots):
    plan = build_plan(
        spec(
            [{"name": "t", "vocabularySize": 1000, "dimension": 8}],
            training={"optimizer": optimizer},
            strategy="ParameterServer",
        )
    )
    assert plan.tables[0].bytes == 1000 * 8 * 4 * (1 + slots)


def test_per_table_optimizer_and_dtype():
    plan = build_plan(
        spec(
            [
                {
                    "name": "a",
                    "vocabularySize": 100,
                    "dimension": 8,
                    "dtype": "bfloat16",
                    "optimizer": "sgd",
                },
                {"name": "b", "vocabularySize": 100, "dimension": 8},
            ],
            training={"optimizer": "adagrad"},
            strategy="ParameterServer",
        )
    )
    assert plan.tables[0].bytes == 100 * 8 * 2 * 1
    assert plan.tables[0].optimizer == "sgd"
    assert plan.tables[1].bytes == 100 * 8 * 4 * 2


def test_rows_split_like_tensorflow():
    # TF's example in parameter_server_strategy_v2: 10 rows in 4 parts -> [3, 3, 2, 2].
    assert rows_per_shard(10, 4) == [3, 3, 2, 2]
    assert rows_per_shard(8, 4) == [2, 2, 2, 2]


def test_placement_follows_the_global_round_robin_counter():
    s = spec(
        [
            {"name": "a", "vocabularySize": 1_000_000, "dimension": 32},  # 256 MB -> split
            {"name": "b", "vocabularySize": 10, "dimension": 4},  # tiny -> 1 shard
            {"name": "c", "vocabularySize": 1_000_000, "dimension": 32},
        ],
        strategy="ParameterServer",
        sharding={"maxShardBytes": "64Mi"},
        replicas={"ps": {"replicas": 3, "resources": {"limits": {"memory": "4Gi"}}}},
    )
    plan = build_plan(s)
    a, b, c = plan.tables
    assert a.shards % 3 == 0 and a.shards >= 4  # rounded up to a multiple of the ps count
    assert a.ps_of_shard == [j % 3 for j in range(a.shards)]
    assert b.ps_of_shard == [a.shards % 3]
    assert c.ps_of_shard == [(a.shards + 1 + j) % 3 for j in range(c.shards)]
    held = [sum(1 for t in plan.tables for p in t.ps_of_shard if p == i) for i in range(3)]
    assert max(held) - min(held) <= 1


def test_ps_auto_is_the_fewest_that_fit():
    s = spec(
        [BIG],
        strategy="ParameterServer",
        replicas={"ps": {"resources": {"limits": {"memory": "4Gi"}}}},
    )
    plan = build_plan(s)
    fewer = spec(
        [BIG],
        strategy="ParameterServer",
        replicas={
            "ps": {"replicas": plan.ps_replicas - 1, "resources": {"limits": {"memory": "4Gi"}}}
        },
    )
    with pytest.raises(PlanError) as err:
        build_plan(fewer)
    assert err.value.field == "spec.replicas.ps"
    assert "would need" in err.value.message


def test_table_that_fits_no_ps_names_the_field_and_the_way_out():
    s = spec(
        [BIG],
        strategy="ParameterServer",
        replicas={"ps": {"maxReplicas": 2, "resources": {"limits": {"memory": "2Gi"}}}},
    )
    with pytest.raises(PlanError) as err:
        build_plan(s)
    assert err.value.field == "spec.replicas.ps"
    assert "fit no set of up to 2 ps" in err.value.message
    assert "maxReplicas" in err.value.message


def test_row_larger_than_max_shard_is_an_error():
    s = spec(
        [{"name": "wide", "vocabularySize": 10, "dimension": 8192}],
        strategy="ParameterServer",
        sharding={"maxShardBytes": "1Ki"},
    )
    with pytest.raises(PlanError) as err:
        build_plan(s)
    assert err.value.field == "spec.sharding.maxShardBytes"


def test_auto_strategy_picks_by_table_size():
    small = spec([{"name": "t", "vocabularySize": 1000, "dimension": 8}])
    assert resolve_strategy(small) == "MultiWorkerMirrored"
    assert build_plan(small).ps_replicas == 0
    assert resolve_strategy(spec([BIG])) == "ParameterServer"
    # Asking for ps settles it, whatever the size.
    assert (
        resolve_strategy(
            spec(
                [{"name": "t", "vocabularySize": 10, "dimension": 2}],
                replicas={"ps": {"replicas": 1}},
            )
        )
        == "ParameterServer"
    )


def test_mirrored_tables_must_fit_the_worker():
    s = spec(
        [{"name": "t", "vocabularySize": 1_000_000, "dimension": 64}],
        strategy="MultiWorkerMirrored",
        replicas={"worker": {"replicas": 2, "resources": {"limits": {"memory": "512Mi"}}}},
    )
    with pytest.raises(PlanError) as err:
        build_plan(s)
    assert err.value.field == "spec.replicas.worker.resources"


def test_default_ps_budget():
    s = spec([BIG], strategy="ParameterServer")
    assert ps_memory_budget(s) == quantity_bytes("4Gi")


# ---- properties -------------------------------------------------------------------------

tables_st = st.lists(
    st.fixed_dictionaries(
        {
            "vocabularySize": st.integers(1, 50_000_000),
            "dimension": st.integers(1, 256),
            "dtype": st.sampled_from(["float32", "bfloat16", "float16"]),
            "optimizer": st.sampled_from(["sgd", "adagrad", "rowwiseAdagrad", "ftrl", "adam"]),
        }
    ),
    min_size=1,
    max_size=6,
)


def _spec_from(tables, ps, memory_gi, shard_mi):
    named = [{"name": f"t{i}", **t} for i, t in enumerate(tables)]
    return spec(
        named,
        strategy="ParameterServer",
        sharding={"maxShardBytes": f"{shard_mi}Mi"},
        replicas={
            "ps": {
                "replicas": ps,
                "maxReplicas": 32,
                "resources": {"limits": {"memory": f"{memory_gi}Gi"}},
            }
        },
    )


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    tables=tables_st,
    ps=st.one_of(st.just("auto"), st.integers(1, 8)),
    memory_gi=st.integers(1, 64),
    shard_mi=st.integers(1, 2048),
)
def test_plan_properties(tables, ps, memory_gi, shard_mi):
    s = _spec_from(tables, ps, memory_gi, shard_mi)
    try:
        plan = build_plan(s)
    except PlanError as err:
        # Refusals always name a spec field and say why.
        assert err.field.startswith("spec.")
        assert err.message
        return
    budget = quantity_bytes(f"{memory_gi}Gi")
    max_shard = quantity_bytes(f"{shard_mi}Mi")
    counter = 0
    for t in plan.tables:
        # Every row of every table is in exactly one shard.
        assert sum(t.rows_per_shard) == t.rows
        assert all(r >= 1 for r in t.rows_per_shard)
        assert len(t.rows_per_shard) == len(t.ps_of_shard) == t.shards
        # No shard over the limit.
        assert all(t.shard_bytes(j) <= max_shard for j in range(t.shards))
        # TensorFlow's placement.
        assert t.ps_of_shard == [(counter + j) % plan.ps_replicas for j in range(t.shards)]
        counter += t.shards
    # No ps over its memory; bytes add up.
    assert all(p.memory_request_bytes <= budget for p in plan.ps)
    assert sum(p.bytes for p in plan.ps) <= plan.total_bytes
    assert sum(len(p.shards) for p in plan.ps) == counter
    # Deterministic.
    assert build_plan(s) == plan
    # auto is minimal: one ps fewer does not fit.
    if ps == "auto" and plan.ps_replicas > 1:
        with pytest.raises(PlanError):
            build_plan(_spec_from(tables, plan.ps_replicas - 1, memory_gi, shard_mi))


@settings(max_examples=50, deadline=None)
@given(rows=st.integers(1, 10**9), shards=st.integers(1, 1000))
def test_rows_per_shard_partitions_exactly(rows, shards):
    k = min(rows, shards)
    parts = rows_per_shard(rows, k)
    assert sum(parts) == rows
    assert max(parts) - min(parts) <= 1
    assert parts == sorted(parts, reverse=True)
    assert math.ceil(rows / k) == parts[0]


@pytest.mark.parametrize(("optimizer", "slots"), [("sgd", 0), ("adagrad", 1), ("adam", 2)])
def test_ps_memory_covers_restoring_its_largest_variable(optimizer, slots):
    """Restoring reads one variable (a shard or one of its slots) at a time, holding a few
    copies of it: the request adds RESTORE_COPIES x the largest such variable on the ps."""
    from etj.core.planner import RESTORE_COPIES

    tables = [
        {"name": "big", "vocabularySize": 1_000_000, "dimension": 32},
        {"name": "small", "vocabularySize": 1000, "dimension": 8},
    ]
    s = spec(
        tables,
        strategy="ParameterServer",
        training={"optimizer": optimizer},
        replicas={"ps": {"replicas": 2}},
        sharding={"maxShardBytes": "64Mi", "psMemoryHeadroom": 1.0, "psBaseMemory": "0"},
    )
    plan = build_plan(s)
    big = plan.tables[0]
    for ps in plan.ps:
        pieces = [
            big.rows_per_shard[j] * 32 * 4 for j, p in enumerate(big.ps_of_shard) if p == ps.index
        ]
        assert pieces, "the big table is split over both ps"
        assert ps.memory_request_bytes == ps.bytes + RESTORE_COPIES * max(pieces)
        # The slots are the same size as the shard: one piece is 1 / (1 + slots) of it.
        assert max(pieces) * (1 + slots) == max(
            big.shard_bytes(j) for j, p in enumerate(big.ps_of_shard) if p == ps.index
        )


# ---- bounded planning ---------------------------------------------------------------------


def _brute_force_ps(plan, spec_):
    """Per-ps bytes and memory requests recomputed shard by shard from the plan's lists."""
    from etj.core.planner import memory_request

    held = [0] * plan.ps_replicas
    piece = [0] * plan.ps_replicas
    for t in plan.tables:
        for j, ps in enumerate(t.ps_of_shard):
            held[ps] += t.shard_bytes(j)
            piece[ps] = max(piece[ps], t.piece_bytes(j))
    return held, [memory_request(h, p, spec_) for h, p in zip(held, piece, strict=True)]


@settings(max_examples=200, deadline=None)
@given(tables=tables_st, ps=st.integers(1, 40), shard_mi=st.integers(1, 2048))
def test_arithmetic_loads_equal_shard_by_shard_sums(tables, ps, shard_mi):
    s = _spec_from(tables, ps, 1 << 20, shard_mi)
    try:
        plan = build_plan(s)
    except PlanError:
        return
    held, requests = _brute_force_ps(plan, s)
    assert [p.bytes for p in plan.ps] == held
    assert [p.memory_request_bytes for p in plan.ps] == requests
    for p in plan.ps:
        assert p.shards == [
            f"{t.name}/{j}"
            for t in plan.tables
            for j, q in enumerate(t.ps_of_shard)
            if q == p.index
        ]


def test_the_2_to_the_40_by_8192_table_is_refused_at_once():
    s = spec([{"name": "big", "vocabularySize": 2**40, "dimension": 8192}])
    with pytest.raises(PlanTooLarge) as err:
        build_plan(s)
    assert err.value.field == "spec.model.embeddings[0]"
    assert err.value.message.startswith("PlanTooLarge: ")
    assert "134217728 shards" in err.value.message and "maxShardBytes" in err.value.message


def test_too_many_shards_in_all_names_max_shard_bytes():
    tables = [{"name": f"t{i}", "vocabularySize": 10_000_000, "dimension": 64} for i in range(20)]
    with pytest.raises(PlanTooLarge) as err:
        build_plan(spec(tables, strategy="ParameterServer", sharding={"maxShardBytes": "16Mi"}))
    assert err.value.field == "spec.sharding.maxShardBytes"
    assert f"{MAX_TOTAL_SHARDS} shards a job may have" in err.value.message


def test_balancing_that_would_pass_a_limit_keeps_the_minimal_counts():
    # 3 shards each at 2 GiB; 1000 ps would round each table to 1000 shards (3000 in all).
    tables = [{"name": f"t{i}", "vocabularySize": 10_000_000, "dimension": 64} for i in range(5)]
    s = spec(
        tables,
        strategy="ParameterServer",
        sharding={"maxShardBytes": "2Gi"},
        replicas={"ps": {"replicas": 1000, "resources": {"limits": {"memory": "64Gi"}}}},
    )
    plan = build_plan(s)
    assert [t.shards for t in plan.tables] == [3] * 5  # 5000 > MAX_TOTAL_SHARDS
    assert sum(len(p.shards) for p in plan.ps) == 15


@pytest.mark.parametrize("replicas", [MAX_PS + 1, 10**9])
def test_ps_count_over_the_limit_is_a_schema_error(replicas):
    with pytest.raises(ValueError, match=f"<= {MAX_PS}"):
        spec([BIG], replicas={"ps": {"replicas": replicas}})


def test_largest_quantities_plan_and_print():
    s = spec(
        [BIG],
        strategy="ParameterServer",
        sharding={"psBaseMemory": "6Ei", "maxShardBytes": "7Ei"},
        replicas={"ps": {"resources": {"limits": {"memory": "7Ei"}}}},
    )
    plan = build_plan(s)
    assert plan.ps_replicas == 1 and plan.tables[0].shards == 1
    assert plan.ps[0].memory_request_bytes > 6 * 2**60


def test_quantities_beyond_int64_are_refused():
    with pytest.raises(ValueError, match="larger than any Kubernetes quantity"):
        spec([BIG], sharding={"maxShardBytes": "1e999999999"})
