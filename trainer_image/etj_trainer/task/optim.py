"""Optimizers for embedding tables that touch only the rows of a batch.

SGD, Adagrad and FTRL on a float32 table use TensorFlow's fused sparse kernels. Everything
else goes through ``rowupdate`` (float32 math on the batch's rows): Adam, which is a lazy
Adam (the moments of a row decay only when the row is in the batch: a standard Adam's
dense decay reads and writes every row of a table every step); row-wise Adagrad (one
accumulator per row); and every optimizer of a bfloat16/float16 table, whose rows are
written rounded stochastically. Optimizer slots are float32 whatever the table's dtype (a bfloat16 Adagrad
accumulator stops counting at 256). Dense variables (the MLP) use the dense form of the
same optimizer (row-wise Adagrad: Adagrad).

Slots are created colocated with the variable they belong to (one per shard), so they
live on that shard's ps and never advance ParameterServerStrategy's round-robin counter.
Updates go through ``strategy.extended.update``, which runs them next to the variable: on
the ps under ParameterServerStrategy, on every replica's copy under MultiWorkerMirrored.

This module neither computes gradients nor decides which variables exist.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import tensorflow as tf

from etj.api.spec import Optimizer
from etj_trainer.models.disk import INITIAL_ACCUMULATOR as DISK_INITIAL_ACCUMULATOR
from etj_trainer.models.disk import DiskShard
from etj_trainer.task.rowupdate import BETA_1, BETA_2, EPSILON, ROWWISE_ADAGRAD, update_rows

OPTIMIZERS = (Optimizer.SGD, Optimizer.ADAGRAD, ROWWISE_ADAGRAD, Optimizer.FTRL, Optimizer.ADAM)
SLOTS: dict[str, tuple[str, ...]] = {
    Optimizer.SGD: (),
    Optimizer.ADAGRAD: ("accumulator",),
    # Its own name: a checkpoint of the other Adagrad is refused by name, not by shape.
    ROWWISE_ADAGRAD: ("row_accumulator",),
    Optimizer.FTRL: ("accumulator", "linear"),
    Optimizer.ADAM: ("m", "v"),
}
# Slots with one value per row, not per element.
ROW_SLOTS = frozenset({"row_accumulator"})
SLOT_DTYPE = tf.float32
# Adagrad's accumulators start here (TensorFlow's initial_accumulator_value); a disk
# table's records too, so its value lives beside them.
INITIAL_ACCUMULATOR = DISK_INITIAL_ACCUMULATOR
FTRL_LR_POWER = -0.5


def slot_initial(optimizer: str, slot: str) -> float:
    """The value a slot starts from (and a freed dynamic-table row's slot is reset to)."""
    return INITIAL_ACCUMULATOR if slot in ("accumulator", "row_accumulator") else 0.0


def dense_optimizer(optimizer: str) -> str:
    """The optimizer of the dense variables when ``optimizer`` is the job's: row-wise
    Adagrad is for tables; the MLP gets Adagrad."""
    return Optimizer.ADAGRAD if optimizer == ROWWISE_ADAGRAD else optimizer


def _const(value: float, dtype: tf.DType) -> tf.Tensor:
    return tf.constant(value, dtype)


def dedup(grad: tf.IndexedSlices) -> tf.IndexedSlices:
    """Sum the rows of repeated indices (the fused sparse kernels apply them one by one)."""
    unique, position = tf.unique(grad.indices)
    values = tf.math.unsorted_segment_sum(grad.values, position, tf.shape(unique)[0])
    return tf.IndexedSlices(values, unique, grad.dense_shape)


def _sparse_sgd(var: Any, slots: Sequence[Any], g: tf.IndexedSlices, lr: float, t: Any) -> Any:
    return var.scatter_sub(tf.IndexedSlices(g.values * _const(lr, var.dtype), g.indices))


def _sparse_adagrad(var: Any, slots: Sequence[Any], g: tf.IndexedSlices, lr: float, t: Any) -> Any:
    return tf.raw_ops.ResourceSparseApplyAdagradV2(
        var=var.handle,
        accum=slots[0].handle,
        lr=_const(lr, var.dtype),
        epsilon=_const(EPSILON, var.dtype),
        grad=g.values,
        indices=g.indices,
    )


def _sparse_ftrl(var: Any, slots: Sequence[Any], g: tf.IndexedSlices, lr: float, t: Any) -> Any:
    return tf.raw_ops.ResourceSparseApplyFtrl(
        var=var.handle,
        accum=slots[0].handle,
        linear=slots[1].handle,
        grad=g.values,
        indices=g.indices,
        lr=_const(lr, var.dtype),
        l1=_const(0.0, var.dtype),
        l2=_const(0.0, var.dtype),
        lr_power=_const(FTRL_LR_POWER, var.dtype),
    )


def _dense_sgd(var: Any, slots: Sequence[Any], g: tf.Tensor, lr: float, t: Any) -> Any:
    return tf.raw_ops.ResourceApplyGradientDescent(
        var=var.handle, alpha=_const(lr, var.dtype), delta=g
    )


def _dense_adagrad(var: Any, slots: Sequence[Any], g: tf.Tensor, lr: float, t: Any) -> Any:
    return tf.raw_ops.ResourceApplyAdagradV2(
        var=var.handle,
        accum=slots[0].handle,
        lr=_const(lr, var.dtype),
        epsilon=_const(EPSILON, var.dtype),
        grad=g,
    )


def _dense_ftrl(var: Any, slots: Sequence[Any], g: tf.Tensor, lr: float, t: Any) -> Any:
    return tf.raw_ops.ResourceApplyFtrl(
        var=var.handle,
        accum=slots[0].handle,
        linear=slots[1].handle,
        grad=g,
        lr=_const(lr, var.dtype),
        l1=_const(0.0, var.dtype),
        l2=_const(0.0, var.dtype),
        lr_power=_const(FTRL_LR_POWER, var.dtype),
    )


def _dense_adam(var: Any, slots: Sequence[Any], g: tf.Tensor, lr: float, t: Any) -> Any:
    dtype = var.dtype
    return tf.raw_ops.ResourceApplyAdam(
        var=var.handle,
        m=slots[0].handle,
        v=slots[1].handle,
        beta1_power=tf.cast(tf.pow(BETA_1, t), dtype),
        beta2_power=tf.cast(tf.pow(BETA_2, t), dtype),
        lr=_const(lr, dtype),
        beta1=_const(BETA_1, dtype),
        beta2=_const(BETA_2, dtype),
        epsilon=_const(EPSILON, dtype),
        grad=g,
    )


UpdateFn = Callable[[Any, Sequence[Any], Any, float, Any], Any]
# The fused kernels, for float32 tables; every other sparse update is ``update_rows``.
_FUSED_SPARSE: dict[str, UpdateFn] = {
    Optimizer.SGD: _sparse_sgd,
    Optimizer.ADAGRAD: _sparse_adagrad,
    Optimizer.FTRL: _sparse_ftrl,
}
_DENSE: dict[str, UpdateFn] = {
    Optimizer.SGD: _dense_sgd,
    Optimizer.ADAGRAD: _dense_adagrad,
    Optimizer.FTRL: _dense_ftrl,
    Optimizer.ADAM: _dense_adam,
}


@dataclass
class Slotted:
    """One variable (a table shard or a dense variable), its optimizer and its slots."""

    var: Any
    optimizer: str
    learning_rate: float
    slots: list[Any]
    # Stochastic rounding of a low-precision table: the table's stream key
    # (``rounding.key_of``) and the first row of this shard in the whole table.
    key: int = 0
    row_offset: int = 0


def slot_shape(var: Any, slot: str) -> tf.TensorShape:
    """A slot's shape: the variable's, or one value per row (row-wise Adagrad's)."""
    shape = tf.TensorShape(var.shape)
    return shape[:1] if slot in ROW_SLOTS else shape


def create_slots(strategy: tf.distribute.Strategy, var: Any, optimizer: str) -> list[Any]:
    """The optimizer's slots of ``var``, float32, on the same device (built before any
    restore)."""
    if optimizer not in SLOTS:
        raise ValueError(f"unknown optimizer {optimizer!r}; use one of {', '.join(OPTIMIZERS)}")
    slots = []
    base = var.name.split(":")[0]
    for slot in SLOTS[optimizer]:
        fill = slot_initial(optimizer, slot)
        shape = slot_shape(var, slot)

        # A callable initial value: evaluated next to the variable, so a large slot never
        # travels over the network.
        def initial(shape: Any = shape, fill: float = fill) -> Any:
            return tf.fill(shape, tf.constant(fill, SLOT_DTYPE))

        with strategy.extended.colocate_vars_with(var):
            slots.append(
                tf.Variable(
                    initial,
                    shape=shape,
                    dtype=SLOT_DTYPE,
                    trainable=False,
                    name=f"{base}/{slot}",
                )
            )
    return slots


def apply_update(item: Slotted, grad: Any, t: Any, deduplicate: bool) -> Any:
    """The update of one variable with its gradient (in an ``extended.update`` context)."""

    def fn(var: Any, g: Any, *slots: Any) -> Any:
        if isinstance(var, DiskShard):
            # The kernels' math, in the record beside each row (TensorFlow's fused kernels'
            # element by element): rows in order, repeated ones summed first when asked.
            g = tf.IndexedSlices(tf.cast(g.values, tf.float32), g.indices, g.dense_shape)
            return var.apply(dedup(g) if deduplicate else g, item.learning_rate)
        if isinstance(g, tf.IndexedSlices):
            fused = _FUSED_SPARSE.get(item.optimizer)
            if fused is not None and var.dtype == tf.float32:
                g = tf.IndexedSlices(tf.cast(g.values, var.dtype), g.indices, g.dense_shape)
                if deduplicate:
                    g = dedup(g)
                return fused(var, slots, g, item.learning_rate, t)
            # Gathered rows are written back once each: repeated rows summed first.
            g = dedup(tf.IndexedSlices(tf.cast(g.values, tf.float32), g.indices, g.dense_shape))
            return update_rows(
                item.optimizer,
                var,
                slots,
                g,
                item.learning_rate,
                t,
                key=item.key,
                row_offset=item.row_offset,
            )
        optimizer = dense_optimizer(item.optimizer)
        return _DENSE[optimizer](var, slots, tf.cast(g, var.dtype), item.learning_rate, t)

    return fn
