"""A chunk's results in one value (``train_chunk_packed``, what the ParameterServer chief
schedules) are ``train_chunk``'s three, unchanged, with the chunk's own seconds; how many
steps a chunk writes out per loop iteration (``block_steps``)."""

from __future__ import annotations

import time

import numpy as np
import tensorflow as tf
from harness import job_spec, trainer_config

from etj_trainer.data.pipeline import make_dataset
from etj_trainer.task.auc import BINS
from etj_trainer.task.state import TrainingState
from etj_trainer.task.step import (
    LONG_UNROLL,
    LONG_UNROLL_MIN_STEPS,
    UNROLL,
    block_steps,
    unpack_chunk,
)


def _state_and_input() -> tuple[TrainingState, object]:
    config = trainer_config(job_spec())
    state = TrainingState(config, tf.distribute.get_strategy())
    return state, iter(make_dataset(config.model, config.data, 64))


def test_the_packed_chunk_carries_the_same_loss_histogram_and_bad_records() -> None:
    plain, plain_input = _state_and_input()
    packed, packed_input = _state_and_input()
    for steps in (3, 5):  # two chunks: the second starts from the first's state
        loss, hist, bad = plain.train_chunk(plain_input, tf.constant(steps, tf.int64))
        began = time.monotonic()
        got = packed.train_chunk_packed(packed_input, tf.constant(steps, tf.int64))
        wall = time.monotonic() - began
        got_loss, got_hist, got_bad, seconds = unpack_chunk(got)
        # Timed inside the call, around its steps: more than nothing, less than the call.
        assert seconds is not None and 0 < seconds <= wall
        assert got_loss == float(loss.numpy())
        np.testing.assert_array_equal(got_hist, hist.numpy())
        assert got_hist.shape == (2, BINS) and got_hist.dtype == np.float32
        assert got_bad == int(bad.numpy())
    assert int(packed.step.numpy()) == int(plain.step.numpy()) == 8


def test_unpacking_keeps_large_counts_exact() -> None:
    hist = np.arange(2 * BINS, dtype=np.float64) * 1000
    vector = np.concatenate([[0.25, 2.0**40 + 1, 1.5], hist])
    loss, got_hist, bad, seconds = unpack_chunk(vector)
    assert (loss, bad, seconds) == (0.25, 2**40 + 1, 1.5)
    np.testing.assert_array_equal(got_hist, hist.reshape(2, BINS))


def test_long_blocks_only_for_long_chunks_of_a_long_job() -> None:
    def blocks(**training: object) -> int:
        return block_steps(trainer_config(job_spec(training={**BASE, **training})))

    assert blocks(stepsPerExecution=10) == UNROLL
    assert blocks(stepsPerExecution=4) == 4  # never more copies than a chunk runs
    # Long chunks: long blocks once the job runs long enough to repay their compile.
    assert blocks(stepsPerExecution=50, steps=400) == UNROLL
    assert blocks(stepsPerExecution=50, steps=LONG_UNROLL_MIN_STEPS) == LONG_UNROLL
    by_epochs = trainer_config(job_spec(training={**BASE, "stepsPerExecution": 50}))
    by_epochs.training.epochs = 1  # (files only: its length is not known in steps)
    assert block_steps(by_epochs) == LONG_UNROLL
    assert blocks(stepsPerExecution=20, steps=LONG_UNROLL_MIN_STEPS) == UNROLL
    # Left out under ParameterServer: its default (50).
    assert blocks(stepsPerExecution=None, steps=LONG_UNROLL_MIN_STEPS) == LONG_UNROLL


BASE = {"batchSizePerReplica": 256, "steps": 400, "optimizer": "adagrad", "learningRate": 0.1}
