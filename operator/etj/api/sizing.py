"""Optimizers and table dtypes, and the bytes of one table row with its optimizer slots
(what the planner counts against a ps's memory).

Pure: no I/O, no environment, no kopf or Kubernetes client.
"""

from __future__ import annotations

from enum import StrEnum


class Optimizer(StrEnum):
    SGD = "sgd"
    ADAGRAD = "adagrad"
    ROWWISE_ADAGRAD = "rowwiseAdagrad"
    FTRL = "ftrl"
    ADAM = "adam"


class Dtype(StrEnum):
    """The storage dtype of a table (``model.embeddings[].dtype``)."""

    FLOAT32 = "float32"
    BFLOAT16 = "bfloat16"
    FLOAT16 = "float16"


# Optimizer slot variables of a table: each lives next to its table shard, so it counts
# against the ps memory. A slot is table-shaped ([rows, dimension]) except row-wise
# Adagrad's one accumulator per row ([rows]).
OPTIMIZER_SLOTS: dict[Optimizer, int] = {
    Optimizer.SGD: 0,
    Optimizer.ADAGRAD: 1,
    Optimizer.ROWWISE_ADAGRAD: 1,
    Optimizer.FTRL: 2,
    Optimizer.ADAM: 2,
}
ROW_SLOT_OPTIMIZERS = frozenset({Optimizer.ROWWISE_ADAGRAD})

DTYPE_BYTES: dict[Dtype, int] = {Dtype.FLOAT32: 4, Dtype.BFLOAT16: 2, Dtype.FLOAT16: 2}
# Optimizer slots are float32 whatever the table's dtype: a bfloat16/float16 table is
# updated in float32 and its rows rounded stochastically to the storage dtype.
SLOT_DTYPE_BYTES = 4


def slot_bytes_per_row(optimizer: Optimizer, dimension: int) -> int:
    """Bytes of one slot (each of an optimizer's is the same size) for one table row."""
    if OPTIMIZER_SLOTS[optimizer] == 0:
        return 0
    per_row = 1 if optimizer in ROW_SLOT_OPTIMIZERS else dimension
    return per_row * SLOT_DTYPE_BYTES


def table_row_bytes(dtype: Dtype, optimizer: Optimizer, dimension: int) -> int:
    """Bytes of one table row with its optimizer slots: ``dimension x dtype`` for the row,
    ``slots x slot_bytes_per_row`` for its optimizer state (float32)."""
    slots = OPTIMIZER_SLOTS[optimizer] * slot_bytes_per_row(optimizer, dimension)
    return dimension * DTYPE_BYTES[dtype] + slots


def largest_variable_row_bytes(dtype: Dtype, optimizer: Optimizer, dimension: int) -> int:
    """Bytes per row of the largest variable of a table shard: the shard or one slot."""
    return max(dimension * DTYPE_BYTES[dtype], slot_bytes_per_row(optimizer, dimension))
