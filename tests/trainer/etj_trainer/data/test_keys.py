"""etj_trainer.data.keys: a dynamic table's keys — a string's Fingerprint64 in 63 bits, an
empty string missing, an integer its own key."""

from __future__ import annotations

import numpy as np

from etj_trainer.data.keys import KEY_MASK, MISSING_KEY, keys_of


def test_a_string_key_is_its_fingerprint_in_63_bits(tf):
    keys = keys_of(tf.constant(["user-1", "user-2", "user-1"])).numpy()
    assert keys.dtype == np.int64 and (keys >= 0).all()
    assert keys[0] == keys[2] and keys[0] != keys[1]
    fingerprint = tf.bitcast(tf.fingerprint(tf.constant(["user-1"])), tf.int64).numpy()[0]
    assert keys[0] == fingerprint & KEY_MASK


def test_an_empty_string_is_the_missing_key_whatever_the_shape(tf):
    keys = keys_of(tf.constant([["a", ""], ["", "b"]])).numpy()
    assert keys.shape == (2, 2)
    assert keys[0, 1] == keys[1, 0] == MISSING_KEY < 0
    assert keys[0, 0] >= 0 and keys[1, 1] >= 0


def test_an_integer_id_is_its_own_key(tf):
    keys = keys_of(np.array([0, 42, 2**40, -1], dtype=np.int64)).numpy()
    assert keys.tolist() == [0, 42, 2**40, -1]
    assert keys_of(tf.constant([7], tf.int32)).dtype == tf.int64
