"""Stochastic rounding of float32 values to a table's bfloat16 or float16 storage.

A value between two neighbours ``lo < x < hi`` of the storage type is written as ``hi`` with
probability ``(x - lo) / (hi - lo)`` and as ``lo`` otherwise, so the stored value is ``x`` on
average: an update smaller than half a storage ulp still moves a row in expectation,
where rounding to nearest drops it every time (a bfloat16 row near 1.0 stops learning once
its steps are under 2^-9). Values past the largest finite storage value saturate to it;
NaN stays NaN.

The uniform draws are a stateless hash of (key, step, global row, column): no RNG state to
place, checkpoint or keep in step, and the same element of the same step gets the same draw
wherever the update runs. So a table rounds the same single-process, sharded over any
number of ps, and on every MultiWorkerMirrored replica (whose copies must stay equal);
tests are deterministic for a seed. Under ParameterServer two workers that update one row
in the same step share its draws; each rounding is still unbiased.

Pure TensorFlow functions: no variables, no I/O.
"""

from __future__ import annotations

import zlib

import tensorflow as tf

# lowbias32 (Wellons' integer hash search): a 32-bit mix whose every output bit depends on
# every input bit.
_M1 = 0x7FEB352D
_M2 = 0x846CA68B
_GOLDEN = 0x9E3779B9
# Draws take the high 24 bits of a hash: a float32 in [0, 1) exactly.
_DRAW_BITS = 24

LOW_PRECISION = (tf.bfloat16, tf.float16)


def _u32(value: int) -> tf.Tensor:
    return tf.constant(value & 0xFFFFFFFF, tf.uint32)


def _mix(x: tf.Tensor) -> tf.Tensor:
    x = tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, _u32(16)))
    x = x * _u32(_M1)
    x = tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, _u32(15)))
    x = x * _u32(_M2)
    return tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, _u32(16)))


def _halves(x: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """Low and high 32 bits of an int64 tensor, as uint32."""
    x = tf.cast(x, tf.int64)
    low = tf.cast(tf.bitwise.bitwise_and(x, tf.constant(0xFFFFFFFF, tf.int64)), tf.uint32)
    high = tf.cast(tf.bitwise.right_shift(x, tf.constant(32, tf.int64)), tf.uint32)
    return low, high


def _hash64(x: tf.Tensor, into: tf.Tensor) -> tf.Tensor:
    """``into`` mixed with every bit of the int64 ``x``."""
    low, high = _halves(x)
    return _mix(tf.bitwise.bitwise_xor(_mix(tf.bitwise.bitwise_xor(into, low)), high))


def key_of(name: str, seed: int) -> int:
    """A 32-bit stream key for one variable: its name and the job's seed (stable across
    processes, unlike ``hash``)."""
    return zlib.crc32(f"{seed}/{name}".encode())


def draws(key: int, step: tf.Tensor, rows: tf.Tensor, width: int) -> tf.Tensor:
    """Uniform float32 draws in ``[0, 1)``, ``[len(rows), width]``: one per (row, column) of
    ``step``, a function of ``key``, ``step``, the global row and the column alone."""
    stream = _hash64(step, _mix(_u32(key)))
    per_row = _hash64(rows, stream)
    columns = _mix(tf.cast(tf.range(width), tf.uint32) * _u32(_GOLDEN) + _u32(key))
    bits = _mix(tf.bitwise.bitwise_xor(per_row[:, None], columns[None, :]))
    high = tf.bitwise.right_shift(bits, _u32(32 - _DRAW_BITS))
    return tf.cast(high, tf.float32) * (1.0 / (1 << _DRAW_BITS))


def _next_up(magnitude: tf.Tensor) -> tf.Tensor:
    """The next representable value above a non-negative bfloat16/float16 ``magnitude``
    (its bit pattern plus one: the formats order non-negative values like their bits)."""
    bits = tf.bitcast(magnitude, tf.int16)
    return tf.bitcast(bits + tf.constant(1, tf.int16), magnitude.dtype)


def _next_down(magnitude: tf.Tensor) -> tf.Tensor:
    """The representable value below a positive ``magnitude``."""
    bits = tf.bitcast(magnitude, tf.int16)
    return tf.bitcast(bits - tf.constant(1, tf.int16), magnitude.dtype)


def stochastic_round(x: tf.Tensor, dtype: tf.DType, u: tf.Tensor) -> tf.Tensor:
    """``x`` (float32) in ``dtype`` (bfloat16 or float16), rounded up in magnitude when
    ``u < (|x| - lo) / (hi - lo)``; ``u``: uniform draws in ``[0, 1)`` shaped like ``x``.
    A float32 ``dtype`` returns ``x`` unchanged."""
    if dtype == tf.float32:
        return x
    if dtype not in LOW_PRECISION:
        raise ValueError(f"stochastic rounding to {dtype.name} is not supported")
    x = tf.convert_to_tensor(x, tf.float32)
    magnitude = tf.abs(x)
    nearest = tf.cast(magnitude, dtype)
    near = tf.cast(nearest, tf.float32)
    # The two neighbours of |x|: nearest is one of them.
    below = near <= magnitude
    safe = tf.where(near > 0, nearest, tf.ones_like(nearest))
    lo = tf.where(below, nearest, _next_down(safe))
    hi = tf.where(below, _next_up(nearest), nearest)
    lo_f, hi_f = tf.cast(lo, tf.float32), tf.cast(hi, tf.float32)
    # Both differences are exact in float32 (neighbours within a factor of two); past the
    # largest finite value hi is inf and p is 0: saturate.
    p = tf.math.divide_no_nan(magnitude - lo_f, hi_f - lo_f)
    rounded = tf.where(u < p, hi, lo)
    rounded = tf.where(near == magnitude, nearest, rounded)
    rounded = tf.where(tf.math.is_nan(x), nearest, rounded)
    return tf.where(x < 0, -rounded, rounded)
