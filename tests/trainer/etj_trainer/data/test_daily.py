"""The daily click logs (etj_trainer.data.daily): one world over several days, whose signal
carries over from day to day; each day's files the same whoever writes them."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from etj_trainer.data.daily import HEADER, Days, World, main, write_days


def auc(labels: np.ndarray, scores: np.ndarray) -> float:
    """The rank AUC (Mann-Whitney), ties of no concern for continuous scores."""
    ranks = np.empty(len(scores))
    ranks[np.argsort(scores)] = np.arange(1, len(scores) + 1)
    pos = labels == 1
    n1, n0 = int(pos.sum()), int((~pos).sum())
    return float((ranks[pos].sum() - n1 * (n1 + 1) / 2) / (n1 * n0))


def read(path: Path) -> np.ndarray:
    lines = path.read_text().splitlines()
    assert lines[0] == HEADER
    return np.array([[int(x) for x in line.split(",")] for line in lines[1:]])


def test_day_two_keeps_day_one_ids_and_adds_new_ones(tmp_path: Path):
    written = write_days(tmp_path, 2, files=2, rows=3000, validation_rows=1000)
    day = {d: np.concatenate([read(p) for p in written[d][0]]) for d in (1, 2)}
    users_1, users_2 = World().population(1)[0], World().population(2)[0]
    assert users_2 > users_1
    assert day[1][:, 1].max() <= users_1 < day[2][:, 1].max() <= users_2
    # Most of day 2's rows are of ids day 1 had.
    assert np.mean(day[2][:, 1] <= users_1) > 0.85
    assert set(np.unique(day[1][:, 3])) == {1, 2, 3, 4, 5}
    assert set(np.unique(day[1][:, 0])) == {0, 1}
    assert (tmp_path / "day-2" / "valid-00000.csv").is_file()
    assert sorted(p.name for p in (tmp_path / "day-1").iterdir()) == [
        "train-00000.csv",
        "train-00001.csv",
        "valid-00000.csv",
    ]


def test_the_same_day_is_the_same_files_however_many_days_are_written(tmp_path: Path):
    write_days(tmp_path / "a", 2, files=1, rows=500, validation_rows=100)
    write_days(tmp_path / "b", 3, files=1, rows=500, validation_rows=100)
    for name in ("day-1/train-00000.csv", "day-2/train-00000.csv", "day-2/valid-00000.csv"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    assert (tmp_path / "a" / "day-1" / "train-00000.csv").read_bytes() != (
        tmp_path / "a" / "day-2" / "train-00000.csv"
    ).read_bytes()


def test_what_holds_on_day_one_still_holds_on_day_two():
    """The day-1 world scores day 2's clicks almost as well as day 2's own (the drift is
    small), far above chance; a world of another seed does not."""
    days = Days(World(), 2)
    other = Days(World(seed=1), 2)
    rng = np.random.default_rng(3)
    users, items = World().population(1)  # ids both days have
    n = 20_000
    user, item = rng.integers(0, users, n), rng.integers(0, items, n)
    position = rng.integers(1, 6, n)
    truth = days.logits(2, user, item, position)
    clicks = (rng.random(n) < 1 / (1 + np.exp(-truth))).astype(int)
    best = auc(clicks, truth)
    yesterday = auc(clicks, days.logits(1, user, item, position))
    stranger = auc(clicks, other.logits(1, user, item, position))
    assert best > 0.75
    assert best - 0.01 < yesterday <= best + 0.005
    assert stranger < 0.65


def test_the_command_writes_each_day(tmp_path: Path, capsys):
    assert main(["--out", str(tmp_path), "--days", "3", "--files", "1", "--rows", "50"]) == 0
    assert "day 3: 1 training files" in capsys.readouterr().out
    assert len(read(tmp_path / "day-3" / "train-00000.csv")) == 50
    assert len(read(tmp_path / "day-3" / "valid-00000.csv")) == 10_000
