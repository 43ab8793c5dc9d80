"""``model.embeddings[].dynamic``: a collisionless table whose ids get rows as they earn them.

A dynamic table maps raw 64-bit keys (a string id through Fingerprint64, an integer id as it
is) to rows of a pool of ``capacity`` rows through an index (a hash table next to the pool).
An id gets a row once it has been seen ``admitAfter`` times; a row unseen for
``evictAfterSteps`` steps is freed (its optimizer state reset) for the next id. Admission and
eviction run every ``maintainEverySteps`` steps, by one writer, between steps.

Ids without a row (not yet admitted, or the pool full) read the table's fallback: the
table's ``vocabularySize`` rows, hashed as a fixed table hashes (row 0 for missing values).
``vocabularySize: 1`` makes it one shared row; a larger fallback gives the long tail a
learned, collided vector instead of one shared one. So a dynamic table holds
``vocabularySize + capacity`` rows, and ``vocabularySize`` keeps its meaning of "the rows
hashing uses".

Pure: no I/O, no environment, no kopf or Kubernetes client.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from etj.api.base import ApiModel
from etj.api.rules import Rule

# Most rows a pool may have: the same bound as vocabularySize.
MAX_CAPACITY = 2**40


class DynamicTable(ApiModel):
    """How a dynamic table admits and evicts ids."""

    capacity: int = Field(
        ge=1,
        le=MAX_CAPACITY,
        description=(
            "Rows of the pool: at most this many ids hold their own row at once (the "
            "table's vocabularySize rows are the fallback of the others)."
        ),
    )
    admit_after: int = Field(
        default=1,
        ge=1,
        le=1 << 30,
        description=(
            "Occurrences of an id before it gets a row (1: at the first maintenance after "
            "it is seen); until then it reads the fallback."
        ),
    )
    evict_after_steps: int | None = Field(
        default=None,
        ge=1,
        description=(
            "A row unseen for this many steps is freed and its optimizer state reset; "
            "unset: rows are never freed (the pool then fills and stays full)."
        ),
    )
    maintain_every_steps: int = Field(
        default=100,
        ge=1,
        le=1 << 20,
        description=(
            "Steps between admission/eviction passes (one writer, between steps); a new "
            "id waits up to this many steps for its row."
        ),
    )


def table_rows(table: Any) -> int:
    """Rows of an ``EmbeddingTable``'s variable: a dynamic table's pool follows its
    ``vocabularySize`` fallback rows."""
    return int(table.vocabulary_size) + (table.dynamic.capacity if table.dynamic else 0)


def _dynamic_names(m: Any) -> set[str]:
    return {t.name for t in m.embeddings if t.dynamic is not None}


def _value_type(f: Any) -> str:
    return str(f.value_type or "string")


def check_key_space(m: Any) -> None:
    """The features of each dynamic table are all strings or all integers.

    Code only, not CEL: the rule compares every feature with every other of each table,
    and the API server's cost estimate over 256 tables x 512 features x 2 passes is over
    its per-rule budget (measured: by 3.6 %). ``etj validate`` and the operator refuse it.
    """
    dynamic = _dynamic_names(m)
    types: dict[str, set[str]] = {}
    for f in m.features or []:
        if f.table in dynamic:
            types.setdefault(f.table, set()).add(_value_type(f))
    mixed = sorted(name for name, v in types.items() if len(v) > 1)
    if mixed:
        raise ValueError(
            f"the features of dynamic table {mixed[0]!r} are all strings or all ints (a "
            "string '42' and the int 42 would be two different ids); give them one valueType"
        )


# Rules on model (embeddings + features); the CEL runs on ModelSpec's wire form.
DYNAMIC_MODEL_RULES = (
    Rule(
        "!has(self.features) || self.features.all(f, !has(f.vocabularyFile) || !has(f.table) || !self.embeddings.exists(t, t.name == f.table && has(t.dynamic)))",
        "a feature of a dynamic table has no vocabularyFile (every id earns its own row); "
        "drop vocabularyFile or dynamic",
        lambda m: (
            m.features is None
            or not any(f.vocabulary_file and f.table in _dynamic_names(m) for f in m.features)
        ),
    ),
)
