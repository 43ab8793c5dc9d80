"""AUC from prediction histograms: the chief's streaming estimate of ranking quality.

Workers return, per chunk of steps, counts of negatives and positives in ``BINS`` equal
prediction buckets; the chief sums recent chunks and computes the area under the ROC
curve, counting pairs in the same bucket as ties (half). Pure numpy; no TensorFlow.
"""

from __future__ import annotations

import numpy as np

BINS = 200


def auc_from_histogram(hist: np.ndarray) -> float | None:
    """AUC of ``hist[0]`` (negatives) vs ``hist[1]`` (positives) per bucket; None if undefined."""
    neg = np.asarray(hist[0], dtype=np.float64)
    pos = np.asarray(hist[1], dtype=np.float64)
    total_pos, total_neg = pos.sum(), neg.sum()
    if total_pos <= 0 or total_neg <= 0:
        return None
    # Negatives strictly below each bucket, plus half of the ties in it.
    neg_below = np.cumsum(neg) - neg
    wins = (pos * (neg_below + 0.5 * neg)).sum()
    return float(wins / (total_pos * total_neg))


def histogram_of(predictions: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """``[2, BINS]`` counts of negatives / positives per prediction bucket, as the
    trainer's step counts them (``etj_trainer.task.step.histogram``: float32, truncated)."""
    p = np.asarray(predictions, dtype=np.float32).reshape(-1)
    y = np.asarray(labels, dtype=np.float64).reshape(-1)
    bucket = np.clip((p * np.float32(BINS)).astype(np.int32), 0, BINS - 1)
    positives = np.bincount(bucket, weights=y, minlength=BINS)
    negatives = np.bincount(bucket, weights=1.0 - y, minlength=BINS)
    return np.stack([negatives, positives])
