"""Optimizers for embedding tables that touch only the rows of a batch.

SGD, Adagrad and FTRL use TensorFlow's fused sparse kernels; Adam is a lazy Adam (the
moments of a row decay only when the row is in the batch), because the dense moment decay
of a standard Adam reads and writes every row of a table every step. Dense variables (the
MLP) use the dense form of the same optimizer.

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

OPTIMIZERS = ("sgd", "adagrad", "ftrl", "adam")
SLOTS: dict[str, tuple[str, ...]] = {
    "sgd": (),
    "adagrad": ("accumulator",),
    "ftrl": ("accumulator", "linear"),
    "adam": ("m", "v"),
}
INITIAL_ACCUMULATOR = 0.1
EPSILON = 1e-7
BETA_1 = 0.9
BETA_2 = 0.999
FTRL_LR_POWER = -0.5


def slot_initial(optimizer: str, slot: str) -> float:
    """The value a slot starts from (and a freed dynamic-table row's slot is reset to)."""
    return INITIAL_ACCUMULATOR if slot == "accumulator" else 0.0


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


def _sparse_lazy_adam(
    var: Any, slots: Sequence[Any], g: tf.IndexedSlices, lr: float, t: Any
) -> Any:
    """Adam on the batch's rows only; the math in float32 whatever the storage dtype."""
    m, v = slots
    idx = g.indices
    grad = tf.cast(g.values, tf.float32)
    m_rows = BETA_1 * tf.cast(tf.gather(m, idx), tf.float32) + (1.0 - BETA_1) * grad
    v_rows = BETA_2 * tf.cast(tf.gather(v, idx), tf.float32) + (1.0 - BETA_2) * grad * grad
    lr_t = lr * tf.sqrt(1.0 - tf.pow(BETA_2, t)) / (1.0 - tf.pow(BETA_1, t))
    step = lr_t * m_rows / (tf.sqrt(v_rows) + EPSILON)
    return tf.group(
        m.scatter_update(tf.IndexedSlices(tf.cast(m_rows, m.dtype), idx)),
        v.scatter_update(tf.IndexedSlices(tf.cast(v_rows, v.dtype), idx)),
        var.scatter_sub(tf.IndexedSlices(tf.cast(step, var.dtype), idx)),
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
_SPARSE: dict[str, UpdateFn] = {
    "sgd": _sparse_sgd,
    "adagrad": _sparse_adagrad,
    "ftrl": _sparse_ftrl,
    "adam": _sparse_lazy_adam,
}
_DENSE: dict[str, UpdateFn] = {
    "sgd": _dense_sgd,
    "adagrad": _dense_adagrad,
    "ftrl": _dense_ftrl,
    "adam": _dense_adam,
}


@dataclass
class Slotted:
    """One variable (a table shard or a dense variable), its optimizer and its slots."""

    var: Any
    optimizer: str
    learning_rate: float
    slots: list[Any]


def create_slots(strategy: tf.distribute.Strategy, var: Any, optimizer: str) -> list[Any]:
    """The optimizer's slots of ``var``, on the same device (built before any restore)."""
    if optimizer not in SLOTS:
        raise ValueError(f"unknown optimizer {optimizer!r}; use one of {', '.join(OPTIMIZERS)}")
    slots = []
    base = var.name.split(":")[0]
    for slot in SLOTS[optimizer]:
        fill = slot_initial(optimizer, slot)

        # A callable initial value: evaluated next to the variable, so a large slot never
        # travels over the network.
        def initial(shape: Any = var.shape, dtype: Any = var.dtype, fill: float = fill) -> Any:
            return tf.fill(shape, tf.constant(fill, dtype))

        with strategy.extended.colocate_vars_with(var):
            slots.append(
                tf.Variable(
                    initial,
                    shape=var.shape,
                    dtype=var.dtype,
                    trainable=False,
                    name=f"{base}/{slot}",
                )
            )
    return slots


def apply_update(item: Slotted, grad: Any, t: Any, deduplicate: bool) -> Any:
    """The update of one variable with its gradient (in an ``extended.update`` context)."""

    def fn(var: Any, g: Any, *slots: Any) -> Any:
        if isinstance(g, tf.IndexedSlices):
            g = tf.IndexedSlices(tf.cast(g.values, var.dtype), g.indices, g.dense_shape)
            if deduplicate:
                g = dedup(g)
            return _SPARSE[item.optimizer](var, slots, g, item.learning_rate, t)
        return _DENSE[item.optimizer](var, slots, tf.cast(g, var.dtype), item.learning_rate, t)

    return fn
