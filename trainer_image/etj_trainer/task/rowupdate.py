"""Sparse updates computed in float32 on the batch's rows: row-wise Adagrad, and every
optimizer of a bfloat16/float16 table.

A low-precision table keeps its optimizer state in float32 (``optim.create_slots``); its
update gathers the batch's rows of the table and of each slot, computes the step in
float32, writes the slots back in float32 and the table's rows rounded stochastically to the
storage dtype (``rounding``), so small steps are not lost to rounding and an Adagrad
accumulator keeps counting past where a bfloat16 one stops (256 for gradients of 1).

Row-wise Adagrad (``rowwiseAdagrad``, as TorchRec/FBGEMM's exact row-wise Adagrad) keeps one
accumulator per row, the sum over steps of the mean of the row's squared gradient, and
steps the whole row by ``lr * g / (sqrt(accumulator) + epsilon)``: a ``[rows]`` slot
instead of a ``[rows, dimension]`` one, so a float32 table with it needs half the memory of
one with Adagrad.

The math is TensorFlow's for the same optimizers (``ResourceSparseApplyAdagradV2``,
``ResourceSparseApplyFtrl`` with l1 = l2 = 0 and learning-rate power -0.5, a lazy Adam), so
a float32 row follows the fused kernels to float32 rounding. The gradient must have one
entry per row (``optim.dedup``). Gather, compute and write are separate ops: under
ParameterServer two workers updating one row at once may lose one's step, as the fused
kernels without locking may.

This module neither creates variables nor decides which optimizer a table uses.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import tensorflow as tf

from etj.api.spec import Optimizer
from etj_trainer.task.rounding import draws, stochastic_round

# The same constants as the fused kernels' (``optim``).
EPSILON = 1e-7
BETA_1 = 0.9
BETA_2 = 0.999

ROWWISE_ADAGRAD = Optimizer.ROWWISE_ADAGRAD.value

# (rows, slot rows, gradient rows, learning rate, step) -> (step to subtract, new slot rows)
RowMath = Callable[
    [tf.Tensor, list[tf.Tensor], tf.Tensor, float, tf.Tensor],
    tuple[tf.Tensor, list[tf.Tensor]],
]


def _sgd(w: Any, s: list[Any], g: Any, lr: float, t: Any) -> tuple[Any, list[Any]]:
    return lr * g, []


def _adagrad(w: Any, s: list[Any], g: Any, lr: float, t: Any) -> tuple[Any, list[Any]]:
    accumulator = s[0] + g * g
    return lr * g / (tf.sqrt(accumulator) + EPSILON), [accumulator]


def _rowwise_adagrad(w: Any, s: list[Any], g: Any, lr: float, t: Any) -> tuple[Any, list[Any]]:
    accumulator = s[0] + tf.reduce_mean(g * g, axis=1)
    return lr * g / (tf.sqrt(accumulator)[:, None] + EPSILON), [accumulator]


def _ftrl(w: Any, s: list[Any], g: Any, lr: float, t: Any) -> tuple[Any, list[Any]]:
    accumulator, linear = s
    new_accumulator = accumulator + g * g
    root = tf.sqrt(new_accumulator)
    linear = linear + g - (root - tf.sqrt(accumulator)) / lr * w
    # With l1 = 0 the proximal step is -linear / quadratic (0 where linear is 0).
    new_w = -linear / (root / lr)
    return w - new_w, [new_accumulator, linear]


def _adam(w: Any, s: list[Any], g: Any, lr: float, t: Any) -> tuple[Any, list[Any]]:
    m = BETA_1 * s[0] + (1.0 - BETA_1) * g
    v = BETA_2 * s[1] + (1.0 - BETA_2) * g * g
    t = tf.cast(t, tf.float32)
    lr_t = lr * tf.sqrt(1.0 - tf.pow(BETA_2, t)) / (1.0 - tf.pow(BETA_1, t))
    return lr_t * m / (tf.sqrt(v) + EPSILON), [m, v]


ROW_MATH: dict[str, RowMath] = {
    Optimizer.SGD: _sgd,
    Optimizer.ADAGRAD: _adagrad,
    ROWWISE_ADAGRAD: _rowwise_adagrad,
    Optimizer.FTRL: _ftrl,
    Optimizer.ADAM: _adam,
}


def update_rows(
    optimizer: str,
    var: Any,
    slots: Sequence[Any],
    grad: tf.IndexedSlices,
    lr: float,
    t: Any,
    key: int = 0,
    row_offset: int = 0,
) -> Any:
    """Update the rows ``grad.indices`` (each once) of ``var`` and its float32 ``slots``.

    A low-precision ``var`` gets its new rows rounded stochastically with the draws of
    (``key``, step ``t``, ``row_offset`` + row): ``row_offset`` is the first row of a
    shard in its whole table, so a table rounds alike however it is sharded.
    """
    idx = grad.indices
    g = tf.cast(grad.values, tf.float32)
    w = tf.cast(tf.gather(var, idx), tf.float32)
    state = [tf.gather(s, idx) for s in slots]
    step, new_state = ROW_MATH[optimizer](w, state, g, lr, t)
    writes = [
        s.scatter_update(tf.IndexedSlices(value, idx))
        for s, value in zip(slots, new_state, strict=True)
    ]
    if var.dtype == tf.float32:
        # A subtraction, not an overwrite: another worker's step to the row in between
        # is kept.
        writes.append(var.scatter_sub(tf.IndexedSlices(step, idx)))
    else:
        global_rows = tf.cast(idx, tf.int64) + row_offset
        u = draws(key, tf.cast(t, tf.int64), global_rows, int(var.shape[1]))
        rows = stochastic_round(w - step, var.dtype, u)
        writes.append(var.scatter_update(tf.IndexedSlices(rows, idx)))
    return tf.group(*writes)
