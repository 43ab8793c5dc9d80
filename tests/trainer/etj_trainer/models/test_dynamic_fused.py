"""A dynamic table on the fused path (``etj_trainer.models.fused``) against the plain one,
in process (the fast sibling of the ParameterServer runs, where the fused path is taken).

The dynamic table is read by two features (two lookups feed one pool's update) next to a
hashed multi-valued one; ids are admitted at every step's pass, a pool too small for them
all leaves some on the shared fallback rows (distinct keys reading one row), and both
paths must end with the same loss, pool, slots, tower, index and counters.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

MODEL = {
    "embeddings": [
        {
            "name": "ids",
            "vocabularySize": 3,
            "dimension": 4,
            "dynamic": {"capacity": 12, "admitAfter": 2, "maintainEverySteps": 1},
        },
        {"name": "tags", "vocabularySize": 30, "dimension": 6},
    ],
    "features": [
        {"name": "y", "kind": "label"},
        {"name": "x", "kind": "dense"},
        {"name": "a", "kind": "categorical", "table": "ids"},
        {"name": "b", "kind": "categorical", "table": "ids"},
        {"name": "g", "kind": "categorical", "table": "tags", "delimiter": "|"},
    ],
    "hiddenUnits": [8],
}
STEPS = 4


def _config(optimizer: str) -> Any:
    from harness import trainer_config

    from etj.api.spec import EmbeddingTrainingJobSpec

    spec = EmbeddingTrainingJobSpec.model_validate(
        {
            "strategy": "MultiWorkerMirrored",
            "replicas": {"worker": {"replicas": 1}},
            "model": MODEL,
            "training": {
                "batchSizePerReplica": 32,
                "optimizer": optimizer,
                "learningRate": 0.1,
                "steps": STEPS,
            },
        }
    )
    return trainer_config(spec)


def _batches(config: Any) -> dict[str, np.ndarray]:
    from etj_trainer.data.batch import lookups

    rng = np.random.default_rng(5)
    out: dict[str, np.ndarray] = {"label": rng.integers(0, 2, (STEPS, 32)).astype(np.float32)}
    out["dense"] = rng.normal(size=(STEPS, 32, config.model.dense_inputs)).astype(np.float32)
    for x in lookups(config.model):
        # More distinct keys than the pool has rows, large ones too (keys, not rows).
        ids = rng.choice([*range(25), 10**12 + 7, 2**62 + 3], (STEPS, 32, x.width))
        if x.masked:
            ids[rng.random(ids.shape) < 0.4] = -1
        out[x.key] = ids
    return out


def _dynamic_state(state: Any) -> dict[str, Any]:
    (table,) = state.model.dynamic["ids"].shards
    keys, slots = (t.numpy() for t in table.index.export())
    order = np.argsort(keys)
    return {
        "index": (keys[order].tolist(), slots[order].tolist()),
        "stats": state.dynamic_stats()["ids"],
        "violations": table.invariant_violations(),
    }


@pytest.mark.parametrize("optimizer", ["adagrad"])
def test_a_dynamic_table_trains_on_the_fused_path_as_on_the_plain_one(optimizer: str) -> None:
    import tensorflow as tf

    from etj_trainer.task.state import TrainingState

    config = _config(optimizer)
    data = _batches(config)
    ends, losses, starts, dynamic = [], [], [], []
    for fused in (False, True):
        state = TrainingState(config, tf.distribute.get_strategy(), fused=fused)
        assert (state.fused is not None) == fused
        starts.append({k: [c.numpy() for c in v] for k, v in state.named_variables().items()})
        it = iter(tf.data.Dataset.from_tensor_slices(data))
        losses.append(float(state.train_chunk(it, tf.constant(STEPS, tf.int64))[0].numpy()))
        ends.append({k: [c.numpy() for c in v] for k, v in state.named_variables().items()})
        dynamic.append(_dynamic_state(state))
    plain, fused_ = dynamic
    # Not vacuous: the pool filled up, and keys beyond it read the fallback rows.
    assert plain["stats"]["rowsUsed"] == 12 and plain["stats"]["fallbackLookups"] > 0
    assert plain["violations"] == [] and fused_["violations"] == []
    assert fused_["index"] == plain["index"] and fused_["stats"] == plain["stats"]
    assert losses[0] == pytest.approx(losses[1], rel=1e-6)
    for key, a_parts in ends[0].items():
        for a, b, s0, s1 in zip(a_parts, ends[1][key], starts[0][key], starts[1][key], strict=True):
            np.testing.assert_array_equal(s0, s1, err_msg=key)
            assert np.abs(a - s0).max() > 0, key
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7, err_msg=key)
