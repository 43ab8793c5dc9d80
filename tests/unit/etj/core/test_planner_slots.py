"""The planner's bytes for optimizer state: float32 slots whatever a table's dtype, row-wise
Adagrad's one accumulator per row, the largest variable a ps restores, and ``etj plan``."""

from __future__ import annotations

import json

import pytest
import yaml
from click.testing import CliRunner

from etj.api.spec import EmbeddingTrainingJobSpec
from etj.cli.main import main
from etj.core.planner import RESTORE_COPIES, build_plan
from tests.unit.conftest import load_example


def _plan(table: dict, optimizer: str = "adagrad", **extra):
    body = {
        "strategy": "ParameterServer",
        "model": {"embeddings": [{"name": "t", **table}]},
        "training": {"optimizer": optimizer},
        **extra,
    }
    return build_plan(EmbeddingTrainingJobSpec.model_validate(body))


@pytest.mark.parametrize(
    ("dtype", "optimizer", "row_bytes", "slot_row_bytes"),
    [
        # rows x (dimension x dtype + slots x dimension x 4): slots are float32.
        ("float32", "adagrad", 16 * 4 + 16 * 4, 16 * 4),
        ("bfloat16", "adagrad", 16 * 2 + 16 * 4, 16 * 4),
        ("float16", "sgd", 16 * 2, 0),
        ("bfloat16", "ftrl", 16 * 2 + 2 * 16 * 4, 2 * 16 * 4),
        ("float16", "adam", 16 * 2 + 2 * 16 * 4, 2 * 16 * 4),
        # Row-wise Adagrad: one float32 accumulator a row.
        ("float32", "rowwiseAdagrad", 16 * 4 + 4, 4),
        ("bfloat16", "rowwiseAdagrad", 16 * 2 + 4, 4),
    ],
)
def test_table_bytes_are_rows_in_storage_dtype_plus_float32_slots(
    dtype, optimizer, row_bytes, slot_row_bytes
):
    plan = _plan({"vocabularySize": 1000, "dimension": 16, "dtype": dtype}, optimizer)
    table = plan.tables[0]
    assert table.bytes == 1000 * row_bytes
    assert table.slot_bytes == 1000 * slot_row_bytes
    assert plan.total_bytes == table.bytes


def test_rowwise_adagrad_halves_a_float32_tables_memory_and_bfloat16_quarters_it():
    rows, dim = 1_000_000, 64
    adagrad = _plan({"vocabularySize": rows, "dimension": dim}, "adagrad").tables[0]
    rowwise = _plan({"vocabularySize": rows, "dimension": dim}, "rowwiseAdagrad").tables[0]
    low = _plan(
        {"vocabularySize": rows, "dimension": dim, "dtype": "bfloat16"}, "rowwiseAdagrad"
    ).tables[0]
    assert adagrad.bytes == rows * dim * 8
    # Table + one float32 per row: (dim + 1) / (2 dim) of Adagrad's.
    assert rowwise.bytes == rows * (dim * 4 + 4)
    assert rowwise.bytes / adagrad.bytes == pytest.approx(0.5, abs=0.01)
    assert rowwise.slot_bytes * dim == adagrad.slot_bytes
    assert low.bytes / adagrad.bytes == pytest.approx(0.25, abs=0.01)


def test_a_per_table_rowwise_optimizer_overrides_the_jobs():
    plan = _plan(
        {"vocabularySize": 100, "dimension": 8, "optimizer": "rowwiseAdagrad"}, optimizer="adam"
    )
    assert plan.tables[0].optimizer == "rowwiseAdagrad"
    assert plan.tables[0].bytes == 100 * (8 * 4 + 4)


@pytest.mark.parametrize(
    ("dtype", "optimizer", "piece_row_bytes"),
    [
        # The float32 slot is larger than a bfloat16 shard: restoring it is the peak.
        ("bfloat16", "adagrad", 32 * 4),
        ("bfloat16", "sgd", 32 * 2),
        # A row-wise accumulator is smaller than its shard.
        ("float32", "rowwiseAdagrad", 32 * 4),
        ("bfloat16", "rowwiseAdagrad", 32 * 2),
    ],
)
def test_ps_memory_covers_restoring_its_largest_variable(dtype, optimizer, piece_row_bytes):
    plan = _plan(
        {"vocabularySize": 4_000_000, "dimension": 32, "dtype": dtype},
        optimizer,
        replicas={"ps": {"replicas": 2}},
        sharding={"maxShardBytes": "64Mi", "psMemoryHeadroom": 1.0, "psBaseMemory": "0"},
    )
    table = plan.tables[0]
    for ps in plan.ps:
        rows = max(
            table.rows_per_shard[j] for j, p in enumerate(table.ps_of_shard) if p == ps.index
        )
        assert ps.memory_request_bytes == ps.bytes + RESTORE_COPIES * rows * piece_row_bytes
        assert (
            max(table.piece_bytes(j) for j, p in enumerate(table.ps_of_shard) if p == ps.index)
            == rows * piece_row_bytes
        )


def test_mirrored_workers_request_their_largest_variable_too():
    plan = _plan(
        {"vocabularySize": 10_000, "dimension": 16, "dtype": "float16"},
        "adagrad",
        strategy="MultiWorkerMirrored",
        replicas={"chief": {"replicas": 0}, "worker": {"replicas": 2}},
        sharding={"psMemoryHeadroom": 1.0, "psBaseMemory": "0"},
    )
    assert plan.total_bytes == 10_000 * (16 * 2 + 16 * 4)
    assert plan.replica_memory_bytes == plan.total_bytes + RESTORE_COPIES * 10_000 * 16 * 4


def test_etj_plan_shows_the_slots(tmp_path):
    doc = load_example("quickstart.yaml")
    tables = doc["spec"]["model"]["embeddings"]
    tables[0].update({"dtype": "bfloat16", "optimizer": "rowwiseAdagrad"})
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(doc))
    result = CliRunner().invoke(main, ["plan", str(path)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "slots" in result.output and "rowwiseAdagrad" in result.output
    assert "of slots, float32" in result.output
    as_json = json.loads(
        CliRunner().invoke(main, ["plan", str(path), "--json"], catch_exceptions=False).output
    )
    first = as_json["tables"][0]
    assert first["optimizer"] == "rowwiseAdagrad" and first["dtype"] == "bfloat16"
    assert first["bytes"] == first["rows"] * (first["dimension"] * 2 + 4)


def test_bfloat16_tables_are_refused_under_multi_worker_mirrored_and_auto_picks_ps():
    """TensorFlow's collectives have no bfloat16 kernels (the initial values' broadcast
    fails before training): a clear error on the table's dtype instead."""
    from etj.core.planner import PlanError, resolve_strategy

    mirrored = {"chief": {"replicas": 0}, "worker": {"replicas": 2}}
    table = {"vocabularySize": 100, "dimension": 8, "dtype": "bfloat16"}
    with pytest.raises(PlanError) as err:
        _plan(table, strategy="MultiWorkerMirrored", replicas=mirrored)
    assert err.value.field == "spec.model.embeddings[0].dtype"
    assert "float16 or strategy ParameterServer" in str(err.value)
    small = EmbeddingTrainingJobSpec.model_validate(
        {"strategy": "Auto", "model": {"embeddings": [{"name": "t", **table}]}}
    )
    assert resolve_strategy(small) == "ParameterServer"
    float16 = small.model_copy(deep=True)
    float16.model.embeddings[0].dtype = "float16"
    assert resolve_strategy(float16) == "MultiWorkerMirrored"
    # One process has no collectives: a single worker trains bfloat16 tables.
    one = _plan(
        table,
        strategy="MultiWorkerMirrored",
        replicas={"chief": {"replicas": 0}, "worker": {"replicas": 1}},
    )
    assert one.strategy == "MultiWorkerMirrored" and one.tables[0].dtype == "bfloat16"
