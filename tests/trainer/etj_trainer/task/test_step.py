"""etj_trainer.task.step: steps per loop iteration, the prediction histogram and a packed
chunk's results. In-process (eager TensorFlow, no server)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from harness import job_spec, trainer_config

from etj_trainer.task.auc import BINS
from etj_trainer.task.step import (
    LONG_UNROLL,
    LONG_UNROLL_MIN_STEPS,
    UNROLL,
    ChunkResult,
    block_steps,
    histogram,
    unpack_chunk,
)


def _config(steps: int | None = 400, spe: int | None = 10, epochs: int | None = None):
    training: dict[str, Any] = {
        "batchSizePerReplica": 256,
        "optimizer": "adagrad",
        "learningRate": 0.1,
    }
    if spe is not None:
        training["stepsPerExecution"] = spe
    if epochs is not None:
        training["epochs"] = epochs
        data = {"source": "files", "files": {"pattern": "/d/*.csv", "format": "csv"}}
        return trainer_config(job_spec(training=training, data=data))
    training["steps"] = steps
    return trainer_config(job_spec(training=training))


@pytest.mark.parametrize(
    ("steps", "spe", "want"),
    [
        (400, 10, UNROLL),
        (400, 4, 4),  # never more than a chunk
        (400, 100, UNROLL),  # a short job does not repay compiling long blocks
        (LONG_UNROLL_MIN_STEPS, 100, LONG_UNROLL),
        (LONG_UNROLL_MIN_STEPS, LONG_UNROLL - 1, UNROLL),
    ],
)
def test_block_steps(steps, spe, want):
    assert block_steps(_config(steps, spe)) == want


def test_a_job_by_epochs_is_a_long_job():
    assert block_steps(_config(spe=50, epochs=2)) == LONG_UNROLL


def test_the_histogram_counts_negatives_and_positives_per_bucket(tf: Any):
    predictions = tf.constant([0.0, 0.001, 0.5, 0.999, 1.0, 1.5, -0.2])
    labels = tf.constant([0.0, 1.0, 1.0, 0.0, 1.0, 1.0, 0.0])
    hist = histogram(predictions, labels).numpy()
    assert hist.shape == (2, BINS)
    assert hist.sum() == 7 and hist[1].sum() == 4
    top, middle = BINS - 1, int(0.5 * BINS)
    assert hist[0, 0] == 2 and hist[1, 0] == 1  # 0.0 and -0.2 (clipped) negative, 0.001 positive
    assert hist[1, middle] == 1
    assert hist[0, top] == 1 and hist[1, top] == 2  # 0.999, and 1.0 and 1.5 clipped


def test_a_packed_chunk_unpacks_to_its_results():
    hist = np.arange(2 * BINS, dtype=np.float64)
    packed = np.concatenate([[0.25, 7.0, 1.5], hist])
    result = unpack_chunk(packed)
    assert isinstance(result, ChunkResult)
    assert (result.loss, result.bad, result.seconds) == (0.25, 7, 1.5)
    np.testing.assert_array_equal(result.hist, hist.reshape(2, BINS))
    assert result.hist.dtype == np.float32
