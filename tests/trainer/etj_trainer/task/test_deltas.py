"""Deltas between two states of a model (``etj_trainer.task.deltas``), without TensorFlow
training: the rows whose bits changed and only those, the dense weights whole, a dynamic
index's evicted and admitted keys; applied to the first state they give the second bit
for bit, also through their files; a delta that does not fit is refused."""

from __future__ import annotations

import json
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from etj.api.export import DELTA_MANIFEST
from etj_trainer.task import deltas
from etj_trainer.task.deltas import Delta, DeltaError, Snapshot


def _state(seed: int = 0) -> Snapshot:
    rng = np.random.default_rng(seed)
    return Snapshot(
        tables={
            0: [
                rng.normal(size=(30, 4)).astype(np.float32),
                rng.normal(size=(20, 4)).astype(np.float32),
            ],
            1: [rng.normal(size=(16, 2)).astype(ml_dtypes.bfloat16)],
        },
        dense={"tower/params/.ATTRIBUTES/VARIABLE_VALUE": rng.normal(size=7).astype(np.float32)},
        indexes={"user_id": (np.array([3, 9, 40, 77], np.int64), np.array([5, 6, 7, 8], np.int64))},
    )


def _moved(before: Snapshot) -> Snapshot:
    """``before`` after some training: rows 2, 31 (second shard), 49 of table 0 and row 0 of
    table 1 changed; row 5 of table 0 written with its own value; 9 evicted, 40 moved to
    another row, 100 admitted."""
    t0 = [s.copy() for s in before.tables[0]]
    t0[0][2] += 1
    t0[1][1] -= 1  # row 31
    t0[1][19, 0] = np.nan  # row 49
    t0[0][5] = before.tables[0][0][5].copy()  # the same bits: not a change
    t1 = [before.tables[1][0].copy()]
    t1[0][0, 1] = ml_dtypes.bfloat16(0.5) if t1[0][0, 1] != 0.5 else ml_dtypes.bfloat16(1.5)
    dense = {k: v * 2 for k, v in before.dense.items()}
    index = (np.array([3, 40, 77, 100], np.int64), np.array([5, 9, 8, 6], np.int64))
    return Snapshot({0: t0, 1: t1}, dense, {"user_id": index})


def test_a_delta_holds_the_changed_rows_only_and_applied_gives_the_next_state_bitwise():
    before = _state()
    after = _moved(before)
    c = deltas.changes(before, after)
    assert c.tables[0].ids.tolist() == [2, 31, 49]
    assert c.tables[1].ids.tolist() == [0]
    assert c.rows == 4 and c.tables[1].values.dtype == ml_dtypes.bfloat16
    assert c.indexes["user_id"].evicted.tolist() == [9]
    assert c.indexes["user_id"].admitted.tolist() == [[40, 9], [100, 6]]
    assert c.evicted == 1
    assert set(c.dense) == set(after.dense)
    applied = deltas.apply(before, c)
    assert deltas.differences(applied, after) == []
    # The state applied to is left as it was.
    assert deltas.differences(before, _state()) == []
    assert deltas.differences(before, after) != []


def test_rows_are_compared_by_their_bits():
    before = _state()
    t = [s.copy() for s in before.tables[0]]
    t[0][0] = 0.0
    b = Snapshot({0: t, 1: before.tables[1]}, before.dense, before.indexes)
    t2 = [s.copy() for s in t]
    t2[0][0] = -0.0  # equal as numbers, not as bits: serving would hold other bits
    t2[0][1, 0] = np.nan
    nan_again = [s.copy() for s in t2]
    c = deltas.changes(b, Snapshot({0: t2, 1: before.tables[1]}, before.dense, before.indexes))
    assert c.tables[0].ids.tolist() == [0, 1]
    same = Snapshot({0: nan_again, 1: before.tables[1]}, before.dense, before.indexes)
    after = Snapshot({0: t2, 1: before.tables[1]}, before.dense, before.indexes)
    assert deltas.changes(after, same).rows == 0  # the same NaN bits: no change


def test_a_delta_through_its_files_is_the_same_delta(tmp_path: Path):
    before = _state()
    after = _moved(before)
    delta = Delta(
        1_800_000_000,
        3,
        120,
        1_800_000_030.5,
        deltas.changes(before, after),
        next_version=1_800_000_060,
        names={0: "user_id", 1: "item_id"},
    )
    parent = tmp_path / "deltas" / "1800000000"
    path = deltas.write(parent, delta)
    assert path.name == "00000003"
    assert sorted(p.name for p in parent.iterdir()) == ["00000003"]  # nothing staged left
    doc = json.loads((path / DELTA_MANIFEST).read_text())
    assert (doc["base"], doc["sequence"], doc["nextVersion"], doc["rows"]) == (
        1_800_000_000,
        3,
        1_800_000_060,
        4,
    )
    assert [t["name"] for t in doc["tables"]] == ["user_id", "item_id"]
    back = deltas.read(str(path))
    assert (back.base, back.sequence, back.step, back.next_version) == (
        1_800_000_000,
        3,
        120,
        1_800_000_060,
    )
    assert deltas.differences(deltas.apply(before, back.changes), after) == []
    with pytest.raises(OSError):
        deltas.write(parent, delta)  # a sequence is written once


def test_a_delta_that_does_not_fit_is_refused():
    before = _state()
    other = Snapshot({0: before.tables[0]}, before.dense, before.indexes)
    with pytest.raises(DeltaError, match="the tables differ"):
        deltas.changes(before, other)
    reshaped = Snapshot({0: [before.table(0)], 1: before.tables[1]}, before.dense, before.indexes)
    with pytest.raises(DeltaError, match="table 0: shards"):
        deltas.changes(before, reshaped)
    c = deltas.changes(before, _moved(before))
    with pytest.raises(DeltaError, match="the delta has tables"):
        deltas.apply(other, c)
    small = Snapshot(
        {0: [s[:10] for s in before.tables[0]], 1: before.tables[1]}, before.dense, before.indexes
    )
    with pytest.raises(DeltaError, match="rows up to 49"):
        deltas.apply(small, c)
