"""``spec.model``: the embedding tables, the input features and the tower.

Pure: no I/O, no environment, no kopf or Kubernetes client.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from etj.api.architectures import (
    ARCHITECTURE_RULES,
    FIRST_ORDER,
    Architecture,
    LinearPart,
    linear_table_name,
    settings_fields,
    settings_of,
)
from etj.api.base import ApiModel, inline_enum
from etj.api.custom import CUSTOM_RULES, CustomModel
from etj.api.disk import TableStorage
from etj.api.dynamic import DYNAMIC_MODEL_RULES, DynamicTable, check_key_space
from etj.api.features import MODEL_FEATURE_RULES, Feature, FeatureKind
from etj.api.rules import cel_extra, check_rules
from etj.api.sizing import Dtype, Optimizer

_cel = cel_extra


class EmbeddingTable(ApiModel):
    """One embedding table: one categorical feature's id → vector map."""

    name: str = Field(
        min_length=1,
        max_length=63,
        pattern=r"^[a-z][a-z0-9_]*$",
        description="Table name; also the input feature's name (lowercase, digits, '_').",
    )
    vocabulary_size: int = Field(
        ge=1,
        le=2**40,
        description="Number of rows (distinct ids); ids are taken modulo this size.",
    )
    dimension: int = Field(ge=1, le=8192, description="Embedding vector width.")
    dtype: Annotated[Dtype, inline_enum(Dtype)] = Field(
        default=Dtype.FLOAT32,
        description=(
            "Storage dtype of the table. Its optimizer slots are float32 whatever the dtype: "
            "a bfloat16/float16 table is updated in float32 and its rows are rounded "
            "stochastically to the dtype (unbiased: small steps are not lost)."
        ),
    )
    combiner: Literal["sum", "mean"] = Field(
        default="mean", description="How the vectors of a multi-valued feature are combined."
    )
    ids_per_example: int = Field(
        default=1,
        ge=1,
        le=1024,
        description="Ids per example for this feature (its valency).",
    )
    optimizer: Optimizer | None = Field(
        default=None,
        description=(
            "Optimizer for this table only (default: training.optimizer); rowwiseAdagrad "
            "keeps one accumulator per row instead of one per value."
        ),
    )
    dynamic: DynamicTable | None = Field(
        default=None,
        description=(
            "Make the table collisionless: ids get rows of a pool of dynamic.capacity rows "
            "as they are admitted; vocabularySize rows are then the fallback of the others."
        ),
    )
    storage: TableStorage | None = Field(
        default=None,
        description=(
            "Where the rows live: in the ps' RAM (default) or, with disk, in files on each "
            "ps' local disk with only a cache of the hot rows in RAM (tables larger than "
            "memory)."
        ),
    )


class ModelSpec(ApiModel):
    """The CTR model: embedding tables, dense features and a tower (an architecture)."""

    model_config = ApiModel.model_config | {
        "json_schema_extra": _cel(
            *MODEL_FEATURE_RULES, *ARCHITECTURE_RULES, *CUSTOM_RULES, *DYNAMIC_MODEL_RULES
        )
    }

    embeddings: list[EmbeddingTable] = Field(
        min_length=1,
        max_length=256,
        description="The embedding tables, one per categorical feature; names are unique.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    dense_features: int = Field(
        default=13,
        ge=0,
        le=10000,
        description="Number of dense inputs (ignored when features are given: their dense ones count).",
    )
    hidden_units: list[Annotated[int, Field(ge=1, le=65536)]] = Field(
        default_factory=lambda: [256, 128],
        max_length=16,
        description=(
            "Widths of the MLP's hidden layers (dlrm: of the top MLP; dcnV2: of the deep "
            "part, which may be empty)."
        ),
    )
    architecture: Architecture = Field(
        default=Architecture.DNN,
        description=(
            f"The tower: {', '.join(a.value for a in Architecture)}; the settings of one "
            "that has them go in the field of the same name."
        ),
    )
    # The settings of each architecture that has them (wideDeep: {...}, ...), as
    # etj.api.architectures registers them; read with settings_of(spec, TheirSpec).
    for _field, (_annotation, _info) in settings_fields().items():
        __annotations__[_field] = _annotation
        vars()[_field] = _info
    del _field, _annotation, _info
    custom: CustomModel | None = Field(
        default=None,
        description=(
            "Your own tower instead of the architecture's: etj imports module, calls "
            "factory(parameters) once and then tower(embeddings, dense, training) -> logits "
            "[batch]. Only with the default architecture (dnn); hiddenUnits is then unused."
        ),
    )

    @field_validator("embeddings")
    @classmethod
    def _unique_names(cls, v: list[EmbeddingTable]) -> list[EmbeddingTable]:
        seen: set[str] = set()
        for t in v:
            if t.name in seen:
                raise ValueError(f"table name {t.name!r} appears twice; names must be unique")
            seen.add(t.name)
        return v

    features: list[Feature] | None = Field(
        default=None,
        max_length=512,
        description=(
            "The input columns (label, dense, categorical) and how each becomes model input. "
            "Without it the files use etj's own layout (<table>_<i> id columns, dense_<i>)."
        ),
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )

    @field_validator("features")
    @classmethod
    def _unique_features(cls, v: list[Feature] | None) -> list[Feature] | None:
        names = [f.name for f in v or []]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"feature {twice[0]!r} appears twice; names must be unique")
        return v

    @model_validator(mode="after")
    def _feature_rules(self) -> ModelSpec:
        check_rules(self, MODEL_FEATURE_RULES)
        check_rules(self, ARCHITECTURE_RULES)
        check_rules(self, CUSTOM_RULES)
        check_rules(self, DYNAMIC_MODEL_RULES)
        check_key_space(self)
        if self.architecture == Architecture.DLRM and self.interaction_inputs < 2:
            raise ValueError(
                "architecture dlrm takes dot products between the embedding inputs and the "
                "bottom MLP's output (present when there are dense features): it needs at "
                "least two of them"
            )
        return self

    @property
    def interaction_inputs(self) -> int:
        """Vectors DLRM's dot interaction takes: one per embedding input, one for the
        bottom MLP when there are dense features."""
        if self.features is None:
            inputs = len(self.embeddings)
        else:
            inputs = sum(1 for f in self.features if f.table is not None)
        return inputs + (1 if self.dense_inputs else 0)

    @property
    def tables(self) -> list[EmbeddingTable]:
        """Every embedding table the trainer creates, in creation (and plan) order:
        ``embeddings``, then, for wideDeep and deepFM, the first-order table (dimension 1,
        same rows, combiner and dtype) of each of them."""
        if self.architecture not in FIRST_ORDER:
            return list(self.embeddings)
        optimizer = settings_of(self, LinearPart).linear_optimizer
        return list(self.embeddings) + [
            t.model_copy(
                update={
                    "name": linear_table_name(t.name),
                    "dimension": 1,
                    "optimizer": Optimizer(optimizer) if optimizer else t.optimizer,
                    # (A first-order table is a float a row: it stays in RAM, and may
                    # use an optimizer the disk kernels do not apply.)
                    "storage": None,
                }
            )
            for t in self.embeddings
        ]

    @property
    def dense_inputs(self) -> int:
        """Width of the dense input: the dense features, else ``denseFeatures``."""
        if self.features is None:
            return self.dense_features
        return sum(1 for f in self.features if f.kind == FeatureKind.DENSE)
