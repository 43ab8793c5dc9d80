"""Keys of a dynamic table's ids: what the input gives a dynamic table instead of rows.

A fixed table's ids become rows at parse time (``features``: hashed modulo the table); a
dynamic table's become keys the model's index maps to rows (``etj_trainer.models.dynamic``).
A string's key is its Fingerprint64 (the hash ``to_hash_bucket_fast`` takes modulo a fixed
table's rows) kept to 63 bits; an integer id is its own key. A negative key is a missing
value (an empty string, a multi-valued feature's padding), as row 0 is for a fixed table.

Pure TensorFlow on tensors; no files, no model state.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

# String keys keep Fingerprint64's low 63 bits, so every id is a non-negative key (among a
# billion distinct strings, two share a key with odds of about 3 %; a hashed table of a
# billion rows would give most of them a shared row).
KEY_MASK = (1 << 63) - 1
MISSING_KEY = -1


def keys_of(values: Any) -> tf.Tensor:
    """Keys of ids (any shape): a string's Fingerprint64 in 63 bits, an empty string
    ``MISSING_KEY``; an integer as it is."""
    values = tf.convert_to_tensor(values)
    if values.dtype == tf.string:
        keys = tf.bitwise.bitwise_and(tf.bitcast(tf.fingerprint(values), tf.int64), KEY_MASK)
        return tf.where(tf.strings.length(values) == 0, tf.constant(MISSING_KEY, tf.int64), keys)
    return tf.cast(values, tf.int64)
