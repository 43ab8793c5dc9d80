"""AUC from a prediction histogram."""

from __future__ import annotations

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
