"""``spec.model.features``: the input columns of a job and how each becomes model input.

Tables (``model.embeddings``) are what the planner shards; features are what the files
hold. Each feature is one column (a delimited-text column or a ``tf.train.Example``
feature key) of one kind:

- ``label``: the binary target: 0/1 as stored, or a ``threshold`` turning e.g. a rating
  into 0/1, or ``positive`` values (text or numbers as written, ``>50K``, ``yes``) meaning
  1, everything else 0 (or, with ``negative`` values too, 0 for those and a bad record for
  anything else);
- ``dense``: a number with a default for empty/missing values and a transform;
- ``categorical``: a string (or integer) id mapped to a row of its ``table``; with a
  ``delimiter`` it is multi-valued (``Comedy|Drama``), pooled by the table's combiner over
  the values present. Several features may share one table.

Pure: no I/O, no environment, no kopf or Kubernetes client.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import Field, model_validator

from etj.api.base import ApiModel
from etj.api.rules import Rule, cel_extra, check_rules

# A label value as written in the data (bounded: the CEL rules' cost is estimated from it).
LabelValue = Annotated[str, Field(min_length=1, max_length=256)]

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
        "self.kind == 'label' || (!has(self.positive) && !has(self.negative))",
        "positive and negative are only for the label",
        lambda f: f.kind == FeatureKind.LABEL or (f.positive is None and f.negative is None),
    ),
    Rule(
        "!has(self.threshold) || !has(self.positive)",
        "a label has a threshold or positive values, not both",
        lambda f: f.threshold is None or f.positive is None,
    ),
    Rule(
        "!has(self.negative) || has(self.positive)",
        "negative values need positive ones (positive alone: everything else is 0)",
        lambda f: f.negative is None or f.positive is not None,
    ),
    Rule(
        "!has(self.negative) || !has(self.positive) || self.negative.all(v, !(v in self.positive))",
        "a value cannot be both positive and negative",
        lambda f: f.negative is None or f.positive is None or not set(f.negative) & set(f.positive),
    ),
    Rule(
        "!has(self.positive) || !has(self.valueType) || self.valueType == 'string'",
        "a label with positive values reads text (valueType string, or none)",
        lambda f: f.positive is None or f.value_type in (None, ValueType.STRING),
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
    column: str | None = Field(
        default=None,
        min_length=1,
        max_length=1024,
        description=(
            "The column as the data names it, when that is no valid feature name (a header "
            "'Review Text', a Parquet column, a tf.train.Example key); default: name. The "
            "name is then what the job's tables, errors and serving inputs call it."
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
    positive: list[LabelValue] | None = Field(
        default=None,
        min_length=1,
        max_length=64,
        description=(
            "Label only: the values (as written in the data, compared after trimming spaces; "
            "numbers quoted, e.g. ['>50K'], ['yes'], ['4', '5']) meaning 1; every other "
            "value is 0, unless negative is given. An empty label is a bad record."
        ),
    )
    negative: list[LabelValue] | None = Field(
        default=None,
        min_length=1,
        max_length=64,
        description=(
            "Label only, with positive: the values meaning 0; any value neither positive "
            "nor negative is then a bad record (a typo in the data stops the job, or is "
            "skipped under data.maxBadRecords)."
        ),
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
    def source(self) -> str:
        """The column (header name, Parquet column, Example key) the data holds it in."""
        return self.column or self.name

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
        text = self.kind == FeatureKind.CATEGORICAL or self.positive is not None
        return ValueType.STRING if text else ValueType.FLOAT

    @property
    def label_values(self) -> str:
        """What a label's values must be, as an error names it."""
        if self.positive is not None and self.negative is not None:
            return f"one of {', '.join([*self.positive, *self.negative])} (positive/negative)"
        if self.threshold is not None:
            return "a finite number"
        return "0 or 1 (set a threshold, or positive values)"

    @property
    def placeholder_label(self) -> str:
        """A valid label value: what parsing a request without a label puts in its place."""
        return self.positive[0] if self.positive else "0"


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
