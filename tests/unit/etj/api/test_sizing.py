"""etj.api.sizing: the bytes of a table row with its optimizer slots."""

from __future__ import annotations

import pytest

from etj.api.spec import (
    OPTIMIZER_SLOTS,
    Optimizer,
    largest_variable_row_bytes,
    slot_bytes_per_row,
    table_row_bytes,
)


def test_every_optimizer_has_a_slot_count():
    assert set(OPTIMIZER_SLOTS) == {o.value for o in Optimizer}


@pytest.mark.parametrize(
    ("optimizer", "slot", "row"),
    [
        # dimension 16, float32 rows (64 bytes); slots are float32 whatever the table's dtype
        ("sgd", 0, 64),
        ("adagrad", 64, 64 + 64),
        ("rowwiseAdagrad", 4, 64 + 4),  # one accumulator per row
        ("ftrl", 64, 64 + 2 * 64),
        ("adam", 64, 64 + 2 * 64),
    ],
)
def test_a_rows_bytes_are_the_row_and_its_slots(optimizer, slot, row):
    assert slot_bytes_per_row(optimizer, 16) == slot
    assert table_row_bytes("float32", optimizer, 16) == row


def test_a_low_precision_table_halves_its_rows_not_its_slots():
    assert table_row_bytes("bfloat16", "adagrad", 16) == 16 * 2 + 16 * 4
    assert table_row_bytes("float16", "sgd", 16) == 16 * 2


def test_the_largest_variable_is_the_shard_or_one_slot():
    # A bfloat16 table's float32 Adagrad slot is twice its rows.
    assert largest_variable_row_bytes("bfloat16", "adagrad", 16) == 64
    assert largest_variable_row_bytes("float32", "adam", 16) == 64
    # Row-wise Adagrad's slot is one float per row: the shard is the largest.
    assert largest_variable_row_bytes("bfloat16", "rowwiseAdagrad", 16) == 32


def test_an_unknown_optimizer_or_dtype_is_no_silent_zero():
    with pytest.raises(KeyError):
        table_row_bytes("float32", "lamb", 16)
    with pytest.raises(KeyError):
        table_row_bytes("int8", "sgd", 16)
