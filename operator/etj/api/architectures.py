"""``spec.model.architecture``: which standard CTR tower the trainer builds, and its settings.

- ``dnn`` (the default): pooled embeddings and dense features into an MLP (``hiddenUnits``).
- ``wideDeep``: the MLP plus a wide (linear) part: a first-order weight per id of every
  table, and one per dense feature (Cheng et al. 2016).
- ``deepFM``: the MLP plus a factorization machine: first-order weights per id and the
  pairwise dot products of all embeddings (Guo et al. 2017). All tables one dimension.
- ``dcnV2``: cross layers ``x_{l+1} = x0 * (W x_l + b) + x_l`` (``W`` optionally low
  rank ``U V^T``) stacked under the MLP or beside it (Wang et al. 2021).
- ``dlrm``: a bottom MLP on the dense features to the embedding dimension, the pairwise
  dot products of it and every embedding, a top MLP (``hiddenUnits``) on both (Naumov et
  al. 2019). All tables one dimension.

The first-order weights of ``wideDeep`` and ``deepFM`` are embedding tables too (dimension
1, one per table of ``model.embeddings``, named ``<table>__linear``): ``ModelSpec.tables``
lists them after the user's tables, and both the planner and the trainer read that list,
so they are planned, sharded, optimized and checkpointed like every other table.

Pure: no I/O, no environment, no kopf or Kubernetes client.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Any, Literal, TypeVar

from pydantic import Field

from etj.api.base import ApiModel
from etj.api.rules import Rule

S = TypeVar("S", bound=ApiModel)


LINEAR_SUFFIX = "__linear"


def linear_table_name(table: str) -> str:
    """The first-order table of ``table`` (``wideDeep``/``deepFM``)."""
    return f"{table}{LINEAR_SUFFIX}"


class LinearPart(ApiModel):
    """Settings shared by the first-order part of wideDeep and deepFM."""

    linear_optimizer: Literal["sgd", "adagrad", "ftrl", "adam"] | None = Field(
        default=None,
        description=(
            "Optimizer of the first-order tables (<table>__linear); default: the optimizer "
            "of the table each belongs to. The Wide & Deep paper trains its wide part with ftrl."
        ),
    )


class WideDeepSpec(LinearPart):
    """wideDeep: the MLP (hiddenUnits) plus a linear model over every id and dense feature."""


class DeepFmSpec(LinearPart):
    """deepFM: the MLP (hiddenUnits) plus a factorization machine over the embeddings."""


class CrossStructure(StrEnum):
    STACKED = "stacked"
    PARALLEL = "parallel"


class DcnV2Spec(ApiModel):
    """dcnV2: cross layers over the concatenated embeddings and dense features."""

    cross_layers: int = Field(default=3, ge=1, le=16, description="Number of cross layers.")
    structure: CrossStructure = Field(
        default=CrossStructure.STACKED,
        description=(
            "stacked: the MLP (hiddenUnits) on the cross layers' output; parallel: the cross "
            "layers and the MLP side by side on the input, their outputs concatenated."
        ),
    )
    low_rank: int | None = Field(
        default=None,
        ge=1,
        le=8192,
        description=(
            "Rank r of each cross layer's weight as U V^T (U, V: width x r); default: a full "
            "width x width matrix."
        ),
    )


class DlrmSpec(ApiModel):
    """dlrm: bottom MLP on the dense features, dot interaction, top MLP (hiddenUnits)."""

    bottom_units: list[Annotated[int, Field(ge=1, le=65536)]] = Field(
        default_factory=lambda: [64],
        max_length=16,
        description=(
            "Hidden widths of the bottom MLP on the dense features; a last layer of the "
            "embedding dimension follows."
        ),
    )


@dataclass(frozen=True)
class Registration:
    """One architecture, as registered in ``Architecture``."""

    name: str  # the wire name: the enum's value and, with settings, their field's camelCase
    settings: type[ApiModel] | None = None  # its settings model, in ``model.<name>``
    first_order: bool = False  # a first-order (dimension 1) table per embedding table
    same_dimension: bool = False  # it takes dot products: every table of one dimension

    def __post_init__(self) -> None:
        # Refused here, at import, rather than as an AttributeError in ModelSpec.tables (which
        # reads a first-order architecture's linearOptimizer from its settings).
        if self.first_order and not (
            isinstance(self.settings, type) and issubclass(self.settings, LinearPart)
        ):
            raise TypeError(
                f"architecture {self.name!r} has first_order=True, so its settings model must "
                "derive from LinearPart (it carries linearOptimizer of the first-order tables); "
                f"got {self.settings!r}"
            )


# The standard towers, each registered once, here: its wire name, its settings model and
# what the planner and the rules must know of it. The CRD's enum, ModelSpec's settings
# fields, SETTINGS_FIELD, FIRST_ORDER, SAME_DIMENSION and the CEL of ARCHITECTURE_RULES
# derive from these members; the trainer's tower of each is etj_trainer.models.TOWERS.
# (A comment, not a docstring: pydantic would put a docstring into the CRD.)
class Architecture(StrEnum):
    _value_: str
    registration: Registration

    def __new__(cls, registration: Registration) -> Architecture:
        member = str.__new__(cls, registration.name)
        member._value_ = registration.name
        member.registration = registration
        return member

    DNN = Registration("dnn")
    WIDE_DEEP = Registration("wideDeep", WideDeepSpec, first_order=True)
    DEEP_FM = Registration("deepFM", DeepFmSpec, first_order=True, same_dimension=True)
    DCN_V2 = Registration("dcnV2", DcnV2Spec)
    DLRM = Registration("dlrm", DlrmSpec, same_dimension=True)


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()


# Field name of each architecture's settings in ModelSpec (its wire name in snake case).
SETTINGS_FIELD: dict[Architecture, str] = {
    a: _snake(a.value) for a in Architecture if a.registration.settings is not None
}
_WIRE = {field: a.value for a, field in SETTINGS_FIELD.items()}
# Architectures with a first-order (dimension 1) table per embedding table.
FIRST_ORDER = frozenset(a for a in Architecture if a.registration.first_order)
# Architectures that take dot products between embeddings: one dimension for all tables.
SAME_DIMENSION = frozenset(a for a in Architecture if a.registration.same_dimension)


def settings_fields() -> dict[str, Any]:
    """``ModelSpec``'s settings fields, one per architecture with settings: name ->
    (annotation, ``Field``), in the architectures' order."""
    fields: dict[str, Any] = {}
    for a, field in SETTINGS_FIELD.items():
        settings = a.registration.settings
        assert settings is not None  # SETTINGS_FIELD holds only architectures with settings
        fields[field] = (
            settings | None,
            Field(
                default=None,
                alias=a.value,
                description=f"{a.value} settings (architecture {a.value} only).",
            ),
        )
    return fields


def settings_of(model: Any, kind: type[S]) -> S:
    """``model.architecture``'s settings as ``kind`` (its defaults when not given)."""
    given = getattr(model, SETTINGS_FIELD[model.architecture])
    return given if given is not None else kind()


def _listed(architectures: frozenset[Architecture]) -> list[str]:
    return [a.value for a in Architecture if a in architectures]


def _said(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _arch(m: Any) -> str:
    return str(m.architecture)


def _settings_match(m: Any) -> bool:
    return all(
        getattr(m, field) is None or _arch(m) == arch for arch, field in SETTINGS_FIELD.items()
    )


def _settings_detail(m: Any) -> str:
    wrong = [
        _WIRE[f] for a, f in SETTINGS_FIELD.items() if getattr(m, f) is not None and _arch(m) != a
    ]
    return (
        f"model.{wrong[0]} is given but model.architecture is {_arch(m)!r}: settings are "
        f"only for the architecture of the same name; set architecture to {wrong[0]!r} or "
        f"remove model.{wrong[0]}"
    )


def _same_dimension(m: Any) -> bool:
    return _arch(m) not in SAME_DIMENSION or len({t.dimension for t in m.embeddings}) == 1


def _dimension_detail(m: Any) -> str:
    first = m.embeddings[0]
    other = next(t for t in m.embeddings if t.dimension != first.dimension)
    return (
        f"architecture {_arch(m)} needs every table of the same dimension (it takes dot "
        f"products between embeddings): table {other.name!r} has dimension "
        f"{other.dimension}, table {first.name!r} has {first.dimension}"
    )


def _no_reserved_names(m: Any) -> bool:
    if _arch(m) not in FIRST_ORDER:
        return True
    names = {t.name for t in m.embeddings}
    return not any(linear_table_name(n) in names for n in names)


def _reserved_detail(m: Any) -> str:
    names = {t.name for t in m.embeddings}
    clash = next(n for n in sorted(names) if linear_table_name(n) in names)
    return (
        f"table name {linear_table_name(clash)!r} is reserved for the first-order table of "
        f"{clash!r} under architecture {_arch(m)}; rename the table"
    )


ARCHITECTURE_RULES = (
    Rule(
        " && ".join(
            f"(!has(self.{w}) || (has(self.architecture) && self.architecture == '{a}'))"
            for a, w in ((str(a), _WIRE[f]) for a, f in SETTINGS_FIELD.items())
        ),
        f"{_said([f'model.{w}' for w in _WIRE.values()])} are only for the architecture of "
        "the same name",
        _settings_match,
        _settings_detail,
    ),
    Rule(
        f"!has(self.architecture) || !(self.architecture in {_listed(SAME_DIMENSION)}) || "
        "self.embeddings.all(t, t.dimension == self.embeddings[0].dimension)",
        f"architectures {_said(_listed(SAME_DIMENSION))} need every table of the same "
        "dimension (they take dot products between embeddings)",
        _same_dimension,
        _dimension_detail,
    ),
    Rule(
        f"!has(self.architecture) || !(self.architecture in {_listed(FIRST_ORDER)}) || "
        "self.embeddings.all(t, !self.embeddings.exists(u, u.name == t.name + "
        f"'{LINEAR_SUFFIX}'))",
        f"under {_said(_listed(FIRST_ORDER))} a table name <table>{LINEAR_SUFFIX} is reserved "
        "for the first-order table of <table>",
        _no_reserved_names,
        _reserved_detail,
    ),
)
