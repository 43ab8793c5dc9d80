"""Synthetic ids: Zipf-distributed, every id in range, and the popular ones spread over a
table's rows as hashed ids are (a table's shards each hold a contiguous range of rows, so
popular ids packed at the low rows would all land on its first shard and its ps)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tensorflow as tf
from harness import job_spec

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


def _model_spec(**kw: Any) -> Any:
    return job_spec(**kw)


def test_synthetic_data_is_skewed_and_learnable(tf: Any) -> None:
    from etj_trainer.data.pipeline import make_dataset

    spec = _model_spec()
    batch = next(iter(make_dataset(spec.model, spec.data, 4096)))
    ids = batch["user_id"].numpy()
    assert ids.shape == (4096, 1) and batch["item_id"].shape == (4096, 3)
    assert ids.min() >= 0 and ids.max() < 5000
    counts = np.sort(np.bincount(ids.ravel(), minlength=5000))[::-1]
    assert counts[:10].sum() > 0.1 * ids.size, "Zipf: the top ids are a large share"
    assert 0.2 < batch["label"].numpy().mean() < 0.8
    assert batch["dense"].shape == (4096, 4)
    other = next(iter(make_dataset(spec.model, spec.data, 4096, num_shards=2, shard_index=1)))
    assert not np.array_equal(other["user_id"].numpy(), ids), "shards draw different streams"


@pytest.mark.parametrize("fmt", ["tfrecord", "csv"])
def test_files_roundtrip_and_sharding(tf: Any, tmp_path: Path, fmt: str) -> None:
    from etj_trainer.data.datagen import write_files
    from etj_trainer.data.pipeline import make_dataset, synthetic_batch_fn

    spec = _model_spec(
        data={"source": "files", "files": {"pattern": str(tmp_path / "part-*"), "format": fmt}}
    )
    write_files(spec.model, spec.data, tmp_path, fmt, files=4, examples_per_file=64)
    make_batch = synthetic_batch_fn(spec.model, spec.data, 64, stream=0)
    written = {}
    for n in range(4):  # what write_files wrote into file n
        b = make_batch(tf.constant(n, tf.int64))
        written[n] = {
            tuple(r) for r in np.concatenate([b["user_id"].numpy(), b["item_id"].numpy()], axis=1)
        }
    # Worker 1 of 2 reads files 1 and 3 only.
    batch = next(iter(make_dataset(spec.model, spec.data, 32, num_shards=2, shard_index=1, seed=0)))
    assert batch["item_id"].shape == (32, 3) and batch["dense"].dtype == tf.float32
    assert batch["label"].dtype == tf.float32
    rows = {
        tuple(r)
        for r in np.concatenate([batch["user_id"].numpy(), batch["item_id"].numpy()], axis=1)
    }
    assert rows <= written[1] | written[3]
    assert not rows <= written[0] | written[2]


def test_missing_files_are_a_clear_error(tf: Any, tmp_path: Path) -> None:
    from etj_trainer.data.pipeline import DataError, make_dataset

    spec = _model_spec(data={"source": "files", "files": {"pattern": str(tmp_path / "nothing-*")}})
    with pytest.raises(DataError, match="matches no file"):
        make_dataset(spec.model, spec.data, 8)
