"""etj.api.base: camelCase on the wire, unknown fields refused, quantities checked."""

from __future__ import annotations

from enum import StrEnum

import pytest
from pydantic import ValidationError

from etj.api.base import ApiModel, Quantity


class Color(StrEnum):
    RED = "Red"


class Sample(ApiModel):
    table_name: str
    max_bytes: Quantity = "1Gi"
    color: Color = Color.RED
    note: str | None = None


def test_fields_are_camel_case_on_the_wire_and_python_names_are_accepted():
    by_alias = Sample.model_validate({"tableName": "user_id"})
    by_name = Sample(table_name="user_id")
    assert by_alias == by_name
    assert by_alias.to_wire() == {"tableName": "user_id", "maxBytes": "1Gi", "color": "Red"}


def test_the_wire_form_leaves_unset_optional_fields_out_and_writes_enum_values():
    wire = Sample(table_name="t", note="n").to_wire()
    assert wire["note"] == "n" and wire["color"] == "Red"
    assert "note" not in Sample(table_name="t").to_wire()
    assert isinstance(Sample(table_name="t").color, Color)  # the model keeps the enum


def test_an_unknown_field_is_an_error_naming_it():
    with pytest.raises(ValidationError, match="vocabSize"):
        Sample.model_validate({"tableName": "t", "vocabSize": 10})


@pytest.mark.parametrize("good", ["512Mi", "1.5G", 1024, "0"])
def test_a_quantity_is_checked_and_kept_as_given(good):
    assert Sample(table_name="t", max_bytes=good).max_bytes == good


@pytest.mark.parametrize("bad", ["lots", "12XB", "1.2.3Mi"])
def test_a_malformed_quantity_is_refused(bad):
    with pytest.raises(ValidationError):
        Sample(table_name="t", max_bytes=bad)


def test_defaults_are_validated_too():
    class BadDefault(ApiModel):
        size: Quantity = "lots"

    with pytest.raises(ValidationError):
        BadDefault()
