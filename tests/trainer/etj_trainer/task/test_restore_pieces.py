"""etj_trainer.task.restore in-process: a saved tensor read back a slice at a time into any
number of components, and a checkpoint that does not fit refused, naming the variable.
(Across processes and ps counts: test_restore.py.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from etj_trainer.task.restore import CheckpointMismatch, restore_components, slice_spec


def test_a_slice_spec_names_its_rows_and_keeps_the_other_dimensions_whole():
    assert slice_spec([10, 4], 0, 10) == ""  # the whole tensor
    assert slice_spec([10, 4], 3, 5) == "10 4 3,5:-"
    assert slice_spec([10], 6, 4) == "10 6,4"
    assert slice_spec([10, 4, 2], 0, 2) == "10 4 2 0,2:-:-"


def _saved(tf: Any, tmp_path: Path) -> tuple[str, np.ndarray, np.ndarray]:
    table = np.arange(40, dtype=np.float32).reshape(10, 4)
    accumulator = np.linspace(0, 1, 10).astype(np.float32)
    ckpt = tf.train.Checkpoint(
        table=tf.Variable(table), accumulator=tf.Variable(tf.cast(accumulator, tf.bfloat16))
    )
    return ckpt.write(str(tmp_path / "ckpt")), table, accumulator


def test_a_table_restores_into_any_number_of_shards_and_casts_to_their_dtype(tf, tmp_path):
    path, table, accumulator = _saved(tf, tmp_path)
    shards = [tf.Variable(tf.zeros([n, 4])) for n in (3, 3, 4)]
    slot = [tf.Variable(tf.zeros([10]))]  # float32, saved in bfloat16
    restore_components(path, {"table": shards, "accumulator": slot})
    np.testing.assert_array_equal(np.concatenate([s.numpy() for s in shards]), table)
    want = tf.cast(tf.cast(accumulator, tf.bfloat16), tf.float32).numpy()
    np.testing.assert_array_equal(slot[0].numpy(), want)


def test_a_missing_variable_is_named(tf, tmp_path):
    path, _, _ = _saved(tf, tmp_path)
    with pytest.raises(CheckpointMismatch, match=r"has no other, tower: was the model changed"):
        restore_components(path, {"tower": [tf.Variable(1.0)], "other": [tf.Variable(1.0)]})


@pytest.mark.parametrize("shapes", [[(6, 4), (6, 4)], [(10, 8)]])
def test_a_resized_table_is_refused_naming_both_shapes(tf, tmp_path, shapes):
    path, _, _ = _saved(tf, tmp_path)
    parts = [tf.Variable(tf.zeros(s)) for s in shapes]
    with pytest.raises(CheckpointMismatch, match=r"table is \[10, 4\] in .* was a table resized"):
        restore_components(path, {"table": parts})
    assert all(not p.numpy().any() for p in parts)  # nothing assigned
