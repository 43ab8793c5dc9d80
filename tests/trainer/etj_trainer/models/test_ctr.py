"""etj_trainer.models.ctr in-process: pooling of distinct ids, the tower's inputs, the
partitioner's shard counts, initial rows independent of sharding, and the model's tables
and forward pass on one device. (Under ParameterServer, as planned: test_placement.py.)"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from harness import job_spec, trainer_config

from etj.api.architectures import Architecture, linear_table_name
from etj.api.spec import EmbeddingTable
from etj_trainer.models.ctr import (
    EMBEDDING_INIT,
    CtrModel,
    TablePartitioner,
    _table_initializer,
    ids_per_table,
    pooled,
    tower_inputs_of,
    unique_ids,
)


def _table(**kw: Any) -> EmbeddingTable:
    return EmbeddingTable.model_validate(
        {"name": "t", "vocabularySize": 10, "dimension": 2, "idsPerExample": 2, **kw}
    )


def test_each_distinct_id_is_read_once_modulo_the_vocabulary(tf):
    distinct = unique_ids(_table(), tf.constant([[3, 13], [3, 4]]))
    assert distinct.ids.numpy().tolist() == [3, 4]
    assert distinct.position.numpy().tolist() == [0, 0, 0, 1]
    dynamic = _table(dynamic={"capacity": 100})
    assert unique_ids(dynamic, tf.constant([[13, 3]])).ids.numpy().tolist() == [13, 3]  # keys


@pytest.mark.parametrize(
    ("combiner", "want"), [("sum", [[5, 50], [8, 80]]), ("mean", [[2.5, 25], [4, 40]])]
)
def test_pooling_combines_an_examples_rows(tf, combiner, want):
    table = tf.constant([[float(i), 10.0 * i] for i in range(10)])
    got = pooled(
        _table(combiner=combiner), lambda ids: tf.gather(table, ids), tf.constant([[2, 3], [4, 14]])
    )
    np.testing.assert_allclose(got.numpy(), want)


def test_absent_values_are_left_out_and_an_example_with_none_is_zeros(tf):
    table = tf.constant([[float(i), 0.0] for i in range(10)])
    ids = tf.constant([[2, -1], [-1, -1], [4, 6]])
    got = pooled(
        _table(combiner="mean"), lambda i: tf.gather(table, tf.maximum(i, 0)), ids, masked=True
    )
    np.testing.assert_allclose(got.numpy()[:, 0], [2.0, 0.0, 5.0])


def test_the_partitioner_gives_the_announced_shards_to_the_next_table_only():
    p = TablePartitioner()
    assert p([100, 8]) == [1, 1]
    with p.shards_for(4):
        assert p([100, 8]) == [4, 1]
    assert p([100]) == [1]


def test_a_shards_initial_rows_depend_on_its_offset_not_on_where_it_is_built(tf):
    make = _table_initializer((10, 3), tf.float32, (5, 1))
    whole = make().numpy()
    assert whole.shape == (10, 3) and np.abs(whole).max() <= EMBEDDING_INIT
    shard = make((4, 3), (6, 0)).numpy()
    assert shard.shape == (4, 3) and np.abs(shard).max() <= EMBEDDING_INIT
    np.testing.assert_array_equal(shard, make((4, 3), (6, 0)).numpy())  # rebuilt: the same
    assert not np.array_equal(shard, make((4, 3), (2, 0)).numpy())  # another shard: its own
    other_table = _table_initializer((10, 3), tf.float32, (5, 2))
    assert not np.array_equal(shard, other_table((4, 3), (6, 0)).numpy())
    assert (
        make(
            (4, 3),
            (6, 0),
        ).dtype
        == tf.float32
    )
    assert _table_initializer((10, 3), tf.bfloat16, (5, 1))().dtype == tf.bfloat16


def test_tower_inputs_and_ids_per_table_follow_the_lookups():
    spec = job_spec(
        model={**job_spec().model.to_wire(), "architecture": Architecture.WIDE_DEEP.value}
    )
    inputs = tower_inputs_of(spec.model)
    assert inputs.names == ("user_id", "item_id") and inputs.dims == (8, 8)
    assert inputs.dense == 4 and inputs.linear
    assert ids_per_table(spec.model) == [1, 3, 1, 3]  # then the first-order tables'


def test_the_model_makes_every_table_first_and_predicts_one_logit_per_example(tf):
    spec = job_spec(
        model={**job_spec().model.to_wire(), "architecture": Architecture.DEEP_FM.value}
    )
    config = trainer_config(spec)
    model = CtrModel(config)
    assert [t.name for t in model.specs] == [
        "user_id",
        "item_id",
        linear_table_name("user_id"),
        linear_table_name("item_id"),
    ]
    assert [tuple(t.shape) for t in model.tables] == [(5000, 8), (2000, 8), (5000, 1), (2000, 1)]
    assert model.table_components(0) == [model.tables[0]]
    batch = {
        "user_id": tf.constant([[1], [2], [3]], tf.int64),
        "item_id": tf.constant([[1, 2, 3], [4, 5, 6], [7, 8, 9]], tf.int64),
        "dense": tf.ones([3, 4]),
    }
    logits = model(batch)
    assert logits.shape == (3,)
    assert np.isfinite(logits.numpy()).all()
