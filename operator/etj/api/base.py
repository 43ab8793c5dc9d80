"""The base every API model derives from: camelCase on the wire, unknown fields refused.

Pure: no I/O, no environment, no kopf or Kubernetes client.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema
from pydantic.alias_generators import to_camel

from etj.api.quantity import QUANTITY_PATTERN, parse_quantity


class ApiModel(BaseModel):
    """Base of every spec/status model.

    ``extra="forbid"`` so that a typo in a job (``vocabSize``) is an error from ``etj
    validate`` instead of a silently ignored field; the API server prunes unknown fields
    anyway, so the CRD schema does not need it. Enum fields hold the enum (``Strategy``,
    ``Phase``...), compared as such in the core; ``to_wire`` writes their values.
    """

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        validate_default=True,
    )

    def to_wire(self) -> dict[str, Any]:
        """The camelCase JSON form, without unset optional fields."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


def _check_quantity(value: object) -> object:
    if isinstance(value, str | int) and not isinstance(value, bool):
        parse_quantity(value)  # raises ValueError with a readable message
    return value


# A Kubernetes resource quantity: an integer or a string such as "512Mi" or "1.5G".
# The schema marker becomes ``x-kubernetes-int-or-string`` in the CRD.
Quantity = Annotated[
    int | str,
    BeforeValidator(_check_quantity),
    Field(json_schema_extra={"x-etj-quantity": True, "pattern": QUANTITY_PATTERN, "minimum": 0}),
]


# An enum field of the status (or of the plan it holds) keeps the schema of a plain string:
# the API server validates status writes against the CRD, and the field's enum is checked
# by the model that writes it (the core holds the enum; the wire holds its value).
WIRE_STRING = WithJsonSchema({"type": "string"})


def inline_enum(enum: type[StrEnum]) -> WithJsonSchema:
    """The schema of an enum field written in place (``enum`` and ``type: string``), as a
    ``Literal`` of its values would be, instead of a reference to the enum's definition."""
    return WithJsonSchema({"enum": [member.value for member in enum], "type": "string"})
