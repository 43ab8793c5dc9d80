"""The data generators of the dynamic-table benchmarks (``benchmarks/dynamic_quality.py``,
``benchmarks/dynamic_capacity.py``): what each benchmark's claim rests on about its data."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))

from dynamic_capacity import drifting_ids
from dynamic_quality import IdColumn, long_tail, long_tail_world

COLUMNS = (IdColumn("user_id", 50_000, 1.0, 1.0),)


def test_long_tail_has_many_more_distinct_ids_than_a_table_has_rows() -> None:
    world = long_tail_world(COLUMNS, seed=0)
    data = long_tail(20_000, seed=1, world=world)
    distinct = len(np.unique(data["user_id"]))
    # The benchmark's tables have a few thousand rows.
    assert distinct > 5_000
    # ...yet a head: the most frequent id recurs far more often than the average.
    _, counts = np.unique(data["user_id"], return_counts=True)
    assert counts.max() > 50 * counts.mean()


def test_long_tail_ids_carry_their_own_signal() -> None:
    world = long_tail_world(COLUMNS, seed=0)
    data = long_tail(40_000, seed=1, world=world)
    ids, _, effect = world["user_id"]
    by_id = dict(zip(ids.tolist(), effect.tolist(), strict=True))
    effects = np.array([by_id[i] for i in data["user_id"].tolist()])
    label = data["label"]
    assert label[effects > 0.5].mean() > label[effects < -0.5].mean() + 0.2


def test_long_tail_is_one_world_drawn_by_seed() -> None:
    world = long_tail_world(COLUMNS, seed=0)
    a, b = long_tail(1000, seed=1, world=world), long_tail(1000, seed=1, world=world)
    c = long_tail(1000, seed=2, world=world)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert not np.array_equal(a["user_id"], c["user_id"])
    assert set(c["user_id"].tolist()) <= set(world["user_id"][0].tolist())


def test_drifting_ids_cover_distinct_ids_in_a_moving_window() -> None:
    steps, batch, width, distinct = 50, 64, 100, 1000
    ids = drifting_ids(steps, batch, width, distinct)
    assert ids.shape == (steps * batch, 4)
    per_step = ids.reshape(steps, batch, 4)
    for t in (0, steps // 2, steps - 1):
        start = t * (distinct - width) // steps
        assert per_step[t].min() >= start and per_step[t].max() < start + width
    # The first and last steps share no id; most of the id range is seen.
    assert not set(per_step[0].ravel().tolist()) & set(per_step[-1].ravel().tolist())
    assert len(np.unique(ids)) > 0.8 * distinct
