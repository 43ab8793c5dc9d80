"""A chunk of training steps as the loop sees it: how many steps a chunk writes out per
loop iteration (``block_steps``), its prediction histogram (what the chief turns into
AUC) and its results (``ChunkResult``, ``unpack_chunk``).

Strategy-neutral; it trains nothing itself (``etj_trainer.task.state`` does).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import tensorflow as tf

from etj.api.trainer import TrainerConfig
from etj_trainer.task.auc import BINS

# Steps written out per loop iteration of ``train_chunk``: UNROLL, or LONG_UNROLL for a
# job whose chunks are at least that long (``stepsPerExecution``) and that trains long
# enough (LONG_UNROLL_MIN_STEPS, or by epochs) to repay compiling more copies once.
UNROLL = 10
LONG_UNROLL = 25
LONG_UNROLL_MIN_STEPS = 5000


def block_steps(config: TrainerConfig) -> int:
    """Steps written out per loop iteration of a chunk: never more than a chunk runs."""
    spe = config.steps_per_execution
    training = config.training
    steps = config.steps
    long_job = training.epochs is not None or (steps is not None and steps >= LONG_UNROLL_MIN_STEPS)
    return LONG_UNROLL if spe >= LONG_UNROLL and long_job else min(UNROLL, spe)


def histogram(predictions: tf.Tensor, labels: tf.Tensor) -> tf.Tensor:
    """``[2, BINS]`` counts of negatives / positives per prediction bucket."""
    bucket = tf.clip_by_value(tf.cast(predictions * BINS, tf.int32), 0, BINS - 1)
    positives = tf.math.unsorted_segment_sum(labels, bucket, BINS)
    negatives = tf.math.unsorted_segment_sum(1.0 - labels, bucket, BINS)
    return tf.stack([negatives, positives])


class ChunkResult(NamedTuple):
    """A chunk's results as the training loop reads them."""

    loss: float  # the mean over its steps
    hist: np.ndarray  # [2, BINS] predictions by label
    bad: int  # records the input skipped
    seconds: float | None = None  # its time on its worker (``train_chunk_packed`` only)


def unpack_chunk(packed: Any) -> ChunkResult:
    """``train_chunk_packed``'s vector as a ``ChunkResult``."""
    values = np.asarray(packed, dtype=np.float64)
    return ChunkResult(
        float(values[0]),
        values[3:].reshape(2, BINS).astype(np.float32),
        int(values[1]),
        float(values[2]),
    )


def unpack_file(packed: Any) -> tuple[int, ChunkResult]:
    """``TrainingState.train_batches``' vector: the steps one followed file took, and its
    results as a chunk's."""
    values = np.asarray(packed, dtype=np.float64)
    result = ChunkResult(
        float(values[0]),
        values[4:].reshape(2, BINS).astype(np.float32),
        int(values[1]),
        float(values[2]),
    )
    return int(values[3]), result
