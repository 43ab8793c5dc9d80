"""The layout of a batch: the contract between every input format and the model.

A batch is a dict of tensors: ``label`` float32 ``[batch]``; ``dense`` float32
``[batch, denseFeatures]`` when the model has dense features; per embedding input
(``lookups``) its ids, int64 ``[batch, width]``, under the table's name (jobs that give
tables only) or under ``ids/<feature>`` (``spec.model.features``; multi-valued rows padded
with -1); and ``bad_records`` (``etj_trainer.data.records.BAD_KEY``), the count of bad
records skipped.

The input formats write these keys and the model reads them, so they live here, below
both. Pure: no TensorFlow, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from etj.api.spec import ModelSpec

DENSE_KEY = "dense"
LABEL_KEY = "label"


@dataclass(frozen=True)
class Lookup:
    """One pooled embedding input of the tower: batch key ``key`` looked up in table
    ``table`` (an index into ``model.embeddings``), ``width`` ids per example; ``masked``
    ids are padded with -1 (multi-valued features), which pooling leaves out."""

    key: str
    table: int
    width: int
    masked: bool


INPUT_PREFIX = "ids/"


def input_key(feature: str) -> str:
    """The batch key of a categorical feature's rows (apart from "label" and "dense")."""
    return f"{INPUT_PREFIX}{feature}"


def lookups(model: ModelSpec) -> list[Lookup]:
    """The tower's embedding inputs: one per table (etj's own layout), or one per
    categorical feature (``model.features``; several may share a table)."""
    if model.features is None:
        return [Lookup(t.name, i, t.ids_per_example, False) for i, t in enumerate(model.embeddings)]
    index = {t.name: i for i, t in enumerate(model.embeddings)}
    return [
        Lookup(input_key(f.name), index[f.table], f.values_per_example, f.multi_valued)
        for f in model.features
        if f.table is not None
    ]
