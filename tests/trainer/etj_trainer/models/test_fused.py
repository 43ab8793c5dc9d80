"""The fused table path (``etj_trainer.models.fused``) against the plain one, in process.

Under ParameterServerStrategy the trainer reads and updates table rows packed per ps;
the same-math tests (``zoo.same_math``) check it on a real cluster with sharded tables.
This fast sibling runs both paths in one process on the same batches, with what those
models lack: two features sharing one table and a multi-valued (masked) feature, so
several lookups feed one variable's update.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

MODEL = {
    "embeddings": [
        {"name": "ids", "vocabularySize": 50, "dimension": 4},
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


STEPS = 7


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
                # Blocks of 3 steps (a step's gradient rows travel with the next step's
                # ids) and a rest of 1 step alone.
                "stepsPerExecution": 3,
            },
        }
    )
    return trainer_config(spec)


def _batches(config: Any) -> dict[str, np.ndarray]:
    from etj_trainer.data.batch import lookups

    rng = np.random.default_rng(3)
    out: dict[str, np.ndarray] = {"label": rng.integers(0, 2, (STEPS, 32)).astype(np.float32)}
    out["dense"] = rng.normal(size=(STEPS, 32, config.model.dense_inputs)).astype(np.float32)
    for x in lookups(config.model):
        ids = rng.integers(0, 20, (STEPS, 32, x.width))  # few ids: rows repeat within a batch
        if x.masked:
            ids[rng.random(ids.shape) < 0.4] = -1
        out[x.key] = ids
    return out


@pytest.mark.parametrize("optimizer", ["adagrad", "adam"])
def test_fused_trains_as_the_plain_path(optimizer: str) -> None:
    import tensorflow as tf

    from etj_trainer.data.batch import lookups
    from etj_trainer.task.state import TrainingState

    config = _config(optimizer)
    assert len({x.table for x in lookups(config.model)}) < len(lookups(config.model))
    assert any(x.masked for x in lookups(config.model))
    data = _batches(config)
    ends, losses, starts = [], [], []
    for fused in (False, True):
        state = TrainingState(config, tf.distribute.get_strategy(), fused=fused)
        assert (state.fused is not None) == fused
        starts.append({k: [c.numpy() for c in v] for k, v in state.named_variables().items()})
        it = iter(tf.data.Dataset.from_tensor_slices(data))
        losses.append(float(state.train_chunk(it, tf.constant(STEPS, tf.int64))[0].numpy()))
        ends.append({k: [c.numpy() for c in v] for k, v in state.named_variables().items()})
    assert losses[0] == pytest.approx(losses[1], rel=1e-6)
    # Same initial values (same seed); training moved every table, slot and the tower,
    # and both paths moved them alike.
    for key, plain in ends[0].items():
        for a, b, s0, s1 in zip(plain, ends[1][key], starts[0][key], starts[1][key], strict=True):
            np.testing.assert_array_equal(s0, s1, err_msg=key)
            assert np.abs(a - s0).max() > 0, key
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7, err_msg=key)
