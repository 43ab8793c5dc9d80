"""Synthetic ids: Zipf-distributed, every id in range, and the popular ones spread over a
table's rows as hashed ids are (a table's shards each hold a contiguous range of rows, so
popular ids packed at the low rows would all land on its first shard and its ps)."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from etj_trainer.data.pipeline import scatter_multiplier, zipf_ids

# Round sizes (as people write them) and awkward ones.
VOCABS = [1000, 200_000, 1_000_000, 1_000_003, 999_983, 2**20, 7]


@pytest.mark.parametrize("vocab", VOCABS)
def test_ranks_map_to_distinct_ids(vocab: int) -> None:
    """rank -> id is a bijection of [0, vocab): the Zipf law over ids is kept whole."""
    m = scatter_multiplier(vocab)
    assert np.gcd(m, vocab) == 1
    n = min(vocab, 100_000)
    ids = (np.arange(n, dtype=np.int64) * m) % vocab
    assert len(np.unique(ids)) == n


@pytest.mark.parametrize("vocab", [1000, 200_000, 1_000_000])
@pytest.mark.parametrize("shards", [2, 4])
def test_popular_ids_spread_over_shards(vocab: int, shards: int) -> None:
    """The occurrences of drawn ids split about evenly over a table's row ranges (the
    planner's "div" shards), for sizes whose multiplier was 3 modulo the size."""
    ids = zipf_ids([200_000], vocab, 1.1, tf.constant([3, 0], tf.int64), 0).numpy()
    assert ids.min() >= 0 and ids.max() < vocab
    # A shard of ``vocab // shards`` rows (TF gives leftovers to the first shards).
    per_shard = np.bincount(np.minimum(ids // -(-vocab // shards), shards - 1), minlength=shards)
    share = per_shard / per_shard.sum()
    assert share.max() < 1.5 / shards, share


def test_zipf_law_kept() -> None:
    """The most popular id of the draw is drawn about as often as rank 0's probability."""
    vocab, exponent, n = 1_000_000, 1.1, 400_000
    ids = zipf_ids([n], vocab, exponent, tf.constant([1, 2], tf.int64), 0).numpy()
    counts = np.sort(np.bincount(ids, minlength=vocab))[::-1]
    # P(rank 0) = 1 - 2^(1-s) normalised over (vocab+1)^(1-s) - 1 (the inverse CDF's law).
    top = (vocab + 1.0) ** (1 - exponent)
    p0 = (2.0 ** (1 - exponent) - 1.0) / (top - 1.0)
    assert abs(counts[0] / n - p0) < 0.1 * p0
