"""``python -m etj_trainer.data.daily``: click logs of several days of one world, for a daily
training chain (``examples/daily``, the chain's tests): what a model learnt on one day still
holds the next. Generated, never downloaded. Pure NumPy: no TensorFlow, writes files only.

The world, drawn from ``seed`` (what carries over from day to day):

- every user and every item has a latent vector (``DIMENSION`` numbers) and a bias; day 1
  has ``users`` users and ``items`` items, and each later day keeps them all and adds
  ``new_share`` of that many new ones (with latents and biases of their own: ids a model
  warm-started from yesterday has not seen either);
- a click's logit is ``BASE + user bias + item bias + affinity * <user vector, item
  vector> + position effect`` (``position``: where the item was shown, 1..``POSITIONS``,
  the first slots clicked more), and its label is drawn from the logistic function of it;
- the drift: on each day after the first every bias moves by a step drawn from
  ``N(0, drift)`` (tastes change a little); latents and position effects stay.

Each day's rows draw users and items uniformly from that day's population. So a model
trained on day 1 knows most of day 2's ids (latents unchanged, biases close), while one
trained on day 2 alone must learn them from that day's rows (with the defaults, 20,000
training rows a day: some 18 per user): on day 2's held-out rows the first is ahead.

Layout: ``OUT/day-<d>/train-<k>.csv`` (``files`` files of ``rows`` rows each) and
``OUT/day-<d>/valid-00000.csv`` (``validation_rows`` held-out rows of the same day), CSV with
the header ``click,user_id,item_id,position``; ids are integers (``valueType: int``).
Each (day, file) has its own seed, so a day's files are the same whoever writes them.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

HEADER = "click,user_id,item_id,position"
DIMENSION = 4
POSITIONS = 5
BASE = -0.8
# The position effect: the first slots are clicked more (known to every day).
POSITION_EFFECT = np.linspace(0.6, -0.6, POSITIONS)
# The seed of a day's held-out rows (a training file's is its number).
HELD_OUT_SEED = 1_000_000


@dataclass(frozen=True)
class World:
    """The settings of a world (see the module docstring)."""

    users: int = 1000
    items: int = 300
    new_share: float = 0.1
    affinity: float = 0.3
    bias: float = 1.0  # std of the user and item biases
    drift: float = 0.1
    seed: int = 0

    def population(self, day: int) -> tuple[int, int]:
        """The users and items that exist on ``day`` (1-based)."""
        grow = 1.0 + self.new_share * (day - 1)
        return round(self.users * grow), round(self.items * grow)


class Days:
    """A world's latents and each day's biases, drawn day after day from one stream: day
    ``d`` depends on days 1..d only, so a day is the same however many days are drawn."""

    def __init__(self, world: World, days: int):
        if days < 1:
            raise ValueError("days must be at least 1")
        self.world = world
        rng = np.random.default_rng(world.seed)
        self.user_vec = np.empty((0, DIMENSION))
        self.item_vec = np.empty((0, DIMENSION))
        self.user_bias: list[np.ndarray] = []
        self.item_bias: list[np.ndarray] = []
        user_bias, item_bias = np.empty(0), np.empty(0)
        for day in range(1, days + 1):
            if day > 1:  # the drift of the ids that were there
                user_bias = user_bias + rng.normal(0.0, world.drift, len(user_bias))
                item_bias = item_bias + rng.normal(0.0, world.drift, len(item_bias))
            users, items = world.population(day)
            new_users, new_items = users - len(user_bias), items - len(item_bias)
            self.user_vec = np.vstack([self.user_vec, rng.normal(0.0, 1.0, (new_users, DIMENSION))])
            self.item_vec = np.vstack([self.item_vec, rng.normal(0.0, 1.0, (new_items, DIMENSION))])
            user_bias = np.concatenate([user_bias, rng.normal(0.0, world.bias, new_users)])
            item_bias = np.concatenate([item_bias, rng.normal(0.0, world.bias, new_items)])
            self.user_bias.append(user_bias)
            self.item_bias.append(item_bias)

    def logits(self, day: int, user: np.ndarray, item: np.ndarray, position: np.ndarray):
        """The click logit of each (user, item, position) on ``day``."""
        w = self.world
        affinity = np.einsum("ij,ij->i", self.user_vec[user], self.item_vec[item])
        return (
            BASE
            + self.user_bias[day - 1][user]
            + self.item_bias[day - 1][item]
            + w.affinity * affinity
            + POSITION_EFFECT[position - 1]
        )

    def rows(self, day: int, n: int, seed: int) -> list[str]:
        """``n`` rows of ``day``: users and items uniform over that day's population."""
        rng = np.random.default_rng([self.world.seed, day, seed])
        users, items = self.world.population(day)
        user = rng.integers(0, users, n)
        item = rng.integers(0, items, n)
        position = rng.integers(1, POSITIONS + 1, n)
        p = 1.0 / (1.0 + np.exp(-self.logits(day, user, item, position)))
        click = (rng.random(n) < p).astype(int)
        return [
            f"{c},{u + 1},{i + 1},{s}"
            for c, u, i, s in zip(click, user, item, position, strict=True)
        ]


def day_dir(out: Path, day: int) -> Path:
    return out / f"day-{day}"


def write_days(
    out: Path,
    days: int,
    files: int = 4,
    rows: int = 5000,
    validation_rows: int = 10_000,
    world: World | None = None,
) -> dict[int, tuple[list[Path], Path]]:
    """Write every day's training files and held-out file; per day, their paths."""
    d = Days(world or World(), days)
    written: dict[int, tuple[list[Path], Path]] = {}
    for day in range(1, days + 1):
        target = day_dir(out, day)
        target.mkdir(parents=True, exist_ok=True)
        train = []
        for k in range(files):
            path = target / f"train-{k:05d}.csv"
            path.write_text("\n".join([HEADER, *d.rows(day, rows, k)]) + "\n")
            train.append(path)
        valid = target / "valid-00000.csv"
        # A seed no training file has: held-out rows drawn apart from theirs.
        lines = d.rows(day, validation_rows, HELD_OUT_SEED)
        valid.write_text("\n".join([HEADER, *lines]) + "\n")
        written[day] = (train, valid)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m etj_trainer.data.daily", description=__doc__)
    parser.add_argument("--out", required=True, type=Path, help="output directory")
    parser.add_argument("--days", type=int, default=2)
    parser.add_argument("--files", type=int, default=4, help="training files per day")
    parser.add_argument("--rows", type=int, default=5000, help="rows per training file")
    parser.add_argument("--validation-rows", type=int, default=10_000)
    parser.add_argument("--users", type=int, default=World.users, help="users on day 1")
    parser.add_argument("--items", type=int, default=World.items, help="items on day 1")
    parser.add_argument("--seed", type=int, default=0, help="the world's seed")
    args = parser.parse_args(argv)
    if args.days < 1:
        parser.error("--days must be at least 1")
    world = World(users=args.users, items=args.items, seed=args.seed)
    written = write_days(args.out, args.days, args.files, args.rows, args.validation_rows, world)
    for day, (train, _) in written.items():
        print(
            f"day {day}: {len(train)} training files and 1 held-out file in {day_dir(args.out, day)}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
