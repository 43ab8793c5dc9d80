"""AUC from a prediction histogram; predictions counted into one as the step counts them."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from etj_trainer.task.auc import auc_from_histogram


def test_auc_from_histogram_matches_pairwise_auc() -> None:
    rng = np.random.default_rng(0)
    labels = rng.random(5000) < 0.3
    scores = np.clip(rng.normal(0.4 + 0.2 * labels, 0.15), 0, 0.999)
    bins = (scores * 200).astype(int)
    hist = np.stack(
        [np.bincount(bins[~labels], minlength=200), np.bincount(bins[labels], minlength=200)]
    )
    # Exact AUC on the bucketed scores (ties count half).
    pos, neg = bins[labels], bins[~labels]
    exact = ((pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()) / (
        len(pos) * len(neg)
    )
    assert auc_from_histogram(hist) == pytest.approx(exact, rel=1e-9)
    assert auc_from_histogram(np.stack([hist[0], np.zeros(200)])) is None


def test_histogram_of_counts_as_the_trainers_step_does(tf: Any) -> None:
    from etj_trainer.task.auc import histogram_of
    from etj_trainer.task.step import histogram

    rng = np.random.default_rng(3)
    # Edges included: 0, 1 and a bucket's own boundary.
    p = np.concatenate([rng.random(5000), [0.0, 1.0, 0.005, 0.995]]).astype(np.float32)
    y = (rng.random(p.shape[0]) < p).astype(np.float32)
    ours = histogram_of(p, y)
    theirs = histogram(tf.constant(p), tf.constant(y)).numpy()
    assert ours.shape == (2, 200) and np.array_equal(ours, theirs)
    assert ours.sum() == p.shape[0]
