"""``spec.model.features``: the input columns of a job and how each becomes model input.

Tables (``model.embeddings``) are what the planner shards; features are what the files
hold. Each feature is one column (a delimited-text column or a ``tf.train.Example``
feature key) of one kind:

- ``label``: the binary target (a ``threshold`` turns e.g. a rating into 0/1);
- ``dense``: a number with a default for empty/missing values and a transform;
- ``categorical``: a string (or integer) id mapped to a row of its ``table``; with a
  ``delimiter`` it is multi-valued (``Comedy|Drama``), pooled by the table's combiner over
  the values present. Several features may share one table.

Pure: no I/O, no environment, no kopf or Kubernetes client.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field, model_validator

from etj.api.base import ApiModel
from etj.api.rules import Rule, cel_extra, check_rules

# Row 0 of every table a categorical feature uses is reserved for empty/missing values.
MISSING_ROW = 0


class FeatureKind(StrEnum):
    LABEL = "label"
    DENSE = "dense"
    CATEGORICAL = "categorical"


class Transform(StrEnum):
    NONE = "none"
    LOG1P = "log1p"
    STANDARDIZE = "standardize"
    CLIP = "clip"


class ValueType(StrEnum):
    STRING = "string"
    INT = "int"
    FLOAT = "float"


FEATURE_RULES = (
    Rule(
        "self.kind == 'categorical' ? has(self.table) : !has(self.table)",
        "a categorical feature names its table (and only a categorical one does)",
        lambda f: (f.table is not None) == (f.kind == FeatureKind.CATEGORICAL),
    ),
    Rule(
        "self.kind == 'label' || !has(self.threshold)",
        "threshold is only for the label",
        lambda f: f.kind == FeatureKind.LABEL or f.threshold is None,
    ),
    Rule(
        "self.kind == 'dense' || !has(self.transform) || self.transform == 'none'",
        "transform is only for dense features",
        lambda f: f.kind == FeatureKind.DENSE or f.transform == Transform.NONE,
    ),
    Rule(
        "!has(self.transform) || self.transform != 'standardize' || (has(self.mean) && has(self.std))",
        "transform standardize needs mean and std",
        lambda f: (
            f.transform != Transform.STANDARDIZE or (f.mean is not None and f.std is not None)
        ),
    ),
    Rule(
        "!has(self.transform) || self.transform != 'clip' || has(self.min) || has(self.max)",
        "transform clip needs min or max",
        lambda f: f.transform != Transform.CLIP or f.min is not None or f.max is not None,
    ),
    Rule(
        "!has(self.min) || !has(self.max) || self.min <= self.max",
        "min must not exceed max",
        lambda f: f.min is None or f.max is None or f.min <= f.max,
    ),
    Rule(
        "self.kind == 'categorical' || (!has(self.delimiter) && !has(self.maxLength) && !has(self.vocabularyFile))",
        "delimiter, maxLength and vocabularyFile are only for categorical features",
        lambda f: (
            f.kind == FeatureKind.CATEGORICAL
            or (f.delimiter is None and f.max_length is None and f.vocabulary_file is None)
        ),
    ),
    Rule(
        "!has(self.maxLength) || has(self.delimiter)",
        "maxLength needs a delimiter (a multi-valued feature)",
        lambda f: f.max_length is None or f.delimiter is not None,
    ),
    Rule(
        "!has(self.valueType) || self.valueType != 'float' || self.kind != 'categorical'",
        "a categorical feature is a string or an int, not a float",
        lambda f: not (f.kind == FeatureKind.CATEGORICAL and f.value_type == ValueType.FLOAT),
    ),
)


class Feature(ApiModel):
    """One input column and how it becomes model input."""

    model_config = ApiModel.model_config | {"json_schema_extra": cel_extra(*FEATURE_RULES)}

    name: str = Field(
        min_length=1,
        max_length=128,
        pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.:/-]*$",
        description=(
            "The column: a header name of delimited text (or one of data.files.columns), or "
            "a tf.train.Example feature key."
        ),
    )
    kind: FeatureKind = Field(description="label, dense or categorical.")
    value_type: ValueType | None = Field(
        default=None,
        description=(
            "How the value is stored: string (default for categorical: hashed to a row), int "
            "(a categorical integer id taken modulo the table; a TFRecord int64 feature) or "
            "float (default for label and dense)."
        ),
    )
    threshold: float | None = Field(
        default=None,
        description="Label only: the label is 1 when the value is >= threshold (e.g. rating >= 4).",
    )
    default: float = Field(
        default=0.0, description="Dense only: the value used when the field is empty or missing."
    )
    transform: Transform = Field(
        default=Transform.NONE,
        description=(
            "Dense only: none; log1p (log(1+x), negatives clipped to 0 first, as for "
            "Criteo's counts); standardize ((x-mean)/std); clip (to [min, max])."
        ),
    )
    mean: float | None = Field(default=None, description="standardize: the mean subtracted.")
    std: float | None = Field(default=None, gt=0, description="standardize: the std divided by.")
    min: float | None = Field(default=None, description="clip: the lower bound.")
    max: float | None = Field(default=None, description="clip: the upper bound.")
    table: str | None = Field(
        default=None,
        min_length=1,
        max_length=63,
        description=(
            "Categorical only: the model.embeddings table whose rows this feature's values "
            "map to (a stable 64-bit fingerprint modulo the table's vocabulary; row 0 is "
            "reserved for empty/missing). Several features may share a table."
        ),
    )
    delimiter: str | None = Field(
        default=None,
        min_length=1,
        max_length=1,
        description=(
            "Categorical only: makes the feature multi-valued, the values split on this "
            "character (e.g. '|'); pooled by the table's combiner over the values present."
        ),
    )
    max_length: int | None = Field(
        default=None,
        ge=1,
        le=1024,
        description="Multi-valued only: values kept per example (default 8); the rest dropped.",
    )
    vocabulary_file: str | None = Field(
        default=None,
        min_length=1,
        description=(
            "Categorical only: a text file with one known value per line; known values get "
            "rows 1..n of the table in file order, other values are hashed into the rest."
        ),
    )

    @model_validator(mode="after")
    def _rules(self) -> Feature:
        check_rules(self, FEATURE_RULES)
        return self

    @property
    def multi_valued(self) -> bool:
        return self.delimiter is not None

    @property
    def values_per_example(self) -> int:
        """Ids looked up per example: 1, or the multi-valued maximum length."""
        if self.delimiter is None:
            return 1
        return self.max_length or DEFAULT_MAX_LENGTH

    @property
    def stored_type(self) -> ValueType:
        if self.value_type is not None:
            return ValueType(self.value_type)
        return ValueType.STRING if self.kind == FeatureKind.CATEGORICAL else ValueType.FLOAT


DEFAULT_MAX_LENGTH = 8


def _labels(features: list[Feature]) -> list[Feature]:
    return [f for f in features if f.kind == FeatureKind.LABEL]


def _tables_used(features: list[Feature]) -> set[str]:
    return {f.table for f in features if f.table is not None}


# Rules on model (embeddings + features); the CEL runs on ModelSpec's wire form.
MODEL_FEATURE_RULES = (
    Rule(
        "!has(self.features) || self.features.filter(f, f.kind == 'label').size() == 1",
        "model.features needs exactly one feature of kind label",
        lambda m: m.features is None or len(_labels(m.features)) == 1,
    ),
    Rule(
        "!has(self.features) || self.features.all(f, !has(f.table) || self.embeddings.exists(t, t.name == f.table))",
        "every categorical feature's table must be one of model.embeddings",
        lambda m: m.features is None or _tables_used(m.features) <= {t.name for t in m.embeddings},
    ),
    Rule(
        "!has(self.features) || self.embeddings.all(t, self.features.exists(f, has(f.table) && f.table == t.name))",
        "every table of model.embeddings must be used by a categorical feature",
        lambda m: m.features is None or {t.name for t in m.embeddings} <= _tables_used(m.features),
    ),
    Rule(
        "!has(self.features) || self.features.all(f, !has(f.vocabularyFile) || self.embeddings.exists(t, t.name == f.table && t.vocabularySize >= 2))",
        "a table with a vocabularyFile needs at least 2 rows (row 0 is for missing values)",
        lambda m: (
            m.features is None
            or all(
                t.vocabulary_size >= 2
                for f in m.features
                if f.vocabulary_file
                for t in m.embeddings
                if t.name == f.table
            )
        ),
    ),
)
