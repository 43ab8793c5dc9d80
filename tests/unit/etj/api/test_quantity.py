"""Kubernetes quantities: parsing and formatting round-trip."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from etj.api.quantity import format_bytes, parse_quantity, quantity_bytes


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("512Mi", 512 * 2**20),
        ("2Gi", 2 * 2**30),
        ("1.5G", Decimal("1.5e9")),
        ("500m", Decimal("0.5")),
        ("1e3", 1000),
        (1024, 1024),
        ("7", 7),
    ],
)
def test_parse(text, value):
    assert parse_quantity(text) == Decimal(value)


@pytest.mark.parametrize("bad", ["lots", "12XB", "", "Gi", "1.2.3Mi", True])
def test_parse_rejects(bad):
    with pytest.raises(ValueError):
        parse_quantity(bad)


@given(st.integers(0, 2**50))
def test_format_never_rounds_down(n):
    assert quantity_bytes(format_bytes(n)) >= n
    assert quantity_bytes(format_bytes(n)) - n < 2**20
