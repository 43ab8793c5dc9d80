"""etj.api.plan: a table's plan and the bytes it derives from its rows and shards."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from etj.api.plan import ShardPlan, TablePlan
from etj.api.spec import table_row_bytes


def _table(
    rows_per_shard: list[int], dtype: str = "float32", optimizer: str = "adagrad"
) -> TablePlan:
    rows = sum(rows_per_shard)
    return TablePlan(
        name="user",
        rows=rows,
        dimension=16,
        dtype=dtype,
        optimizer=optimizer,
        bytes=rows * table_row_bytes(dtype, optimizer, 16),
        shards=len(rows_per_shard),
        rows_per_shard=rows_per_shard,
        ps_of_shard=[i % 2 for i in range(len(rows_per_shard))],
    )


def test_a_shards_bytes_are_its_share_of_the_tables():
    t = _table([300, 100])
    assert t.bytes_per_row == 128  # 16 float32 + one float32 Adagrad slot
    assert t.shard_bytes(0) == 300 * 128 and t.shard_bytes(1) == 100 * 128
    assert t.shard_bytes(0) + t.shard_bytes(1) == t.bytes


def test_a_shards_largest_piece_is_the_shard_or_one_slot():
    assert _table([300, 100]).piece_bytes(0) == 300 * 64  # rows and slot both 64 B a row
    assert _table([300, 100], dtype="bfloat16").piece_bytes(1) == 100 * 64  # the slot
    assert _table([300], dtype="bfloat16", optimizer="sgd").piece_bytes(0) == 300 * 32


def test_the_slot_bytes_count_every_slot_of_every_row():
    assert _table([300, 100], optimizer="adam").slot_bytes == 400 * 2 * 64
    assert _table([400], optimizer="rowwiseAdagrad").slot_bytes == 400 * 4
    assert _table([400], optimizer="sgd").slot_bytes == 0


def test_a_plan_round_trips_through_its_wire_form():
    plan = ShardPlan(
        strategy="ParameterServer",
        ps_replicas=2,
        total_bytes=_table([300, 100]).bytes,
        tables=[_table([300, 100])],
        ps=[],
    )
    wire = plan.to_wire()
    assert wire["tables"][0]["rowsPerShard"] == [300, 100]
    assert ShardPlan.model_validate(wire) == plan


def test_a_table_has_rows_and_shards():
    with pytest.raises(ValidationError):
        TablePlan.model_validate({**_table([1]).to_wire(), "rows": 0})
