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

from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import Field

from etj.api.base import ApiModel
from etj.api.rules import Rule


class Architecture(StrEnum):
    DNN = "dnn"
    WIDE_DEEP = "wideDeep"
    DEEP_FM = "deepFM"
    DCN_V2 = "dcnV2"
    DLRM = "dlrm"


# Architectures with a first-order (dimension 1) table per embedding table.
FIRST_ORDER = frozenset({Architecture.WIDE_DEEP, Architecture.DEEP_FM})
# Architectures that take dot products between embeddings: one dimension for all tables.
SAME_DIMENSION = frozenset({Architecture.DEEP_FM, Architecture.DLRM})
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


# Field name of each architecture's settings in ModelSpec (camelCase on the wire).
SETTINGS_FIELD: dict[Architecture, str] = {
    Architecture.WIDE_DEEP: "wide_deep",
    Architecture.DEEP_FM: "deep_fm",
    Architecture.DCN_V2: "dcn_v2",
    Architecture.DLRM: "dlrm",
}
_WIRE = {"wide_deep": "wideDeep", "deep_fm": "deepFM", "dcn_v2": "dcnV2", "dlrm": "dlrm"}


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
        "model.wideDeep, model.deepFM, model.dcnV2 and model.dlrm are only for the "
        "architecture of the same name",
        _settings_match,
        _settings_detail,
    ),
    Rule(
        "!has(self.architecture) || !(self.architecture in ['deepFM', 'dlrm']) || "
        "self.embeddings.all(t, t.dimension == self.embeddings[0].dimension)",
        "architectures deepFM and dlrm need every table of the same dimension (they take "
        "dot products between embeddings)",
        _same_dimension,
        _dimension_detail,
    ),
    Rule(
        "!has(self.architecture) || !(self.architecture in ['wideDeep', 'deepFM']) || "
        "self.embeddings.all(t, !self.embeddings.exists(u, u.name == t.name + '__linear'))",
        "under wideDeep and deepFM a table name <table>__linear is reserved for the "
        "first-order table of <table>",
        _no_reserved_names,
        _reserved_detail,
    ),
)
