"""``python -m etj_trainer.data.clicklogs``: write small click logs in public datasets' layouts,
with a signal a model can learn, for trying the examples and for tests (never a download).

Layouts (``LAYOUTS``):
- ``criteo``: the Criteo Kaggle display-ads layout: tab-separated, no header,
  ``label, I1..I13, C1..C26``; integer counts (a few negative), 8-hex-digit ids, many
  empty fields.
- ``avazu``: comma-separated with a header: ``id`` (20 digits, past int64), ``click``,
  ``hour`` (YYMMDDHH such as 14102100), ``C1``, ``banner_pos``, ``site_*``, ``app_*``,
  ``device_*``, ``C14..C21``.
- ``movielens``: ratings joined with their movie's genres, comma-separated with a header:
  ``userId, movieId, rating, timestamp, genres`` (``Comedy|Drama``); a rating >= 4 is a
  click.
- ``movielens-1m``: MovieLens-1M's ratings joined with its movies and users, as commonly
  shipped in one CSV: ``user_id, movie_id, rating, timestamp, title, genres, gender, age,
  occupation, zip``; about a quarter of the titles hold a comma (``"Bridges of Madison
  County, The (1995)"``) and some a quote, quoted as RFC 4180 says (Python's ``csv``).

Every id has a fixed hidden score (drawn once per column and id rank from ``seed``), ids
are Zipf-distributed, and the label is drawn from a logistic function of the scores (and
of a few numeric columns), so held-out AUC well above 0.5 is reachable. Pure NumPy: no
TensorFlow, writes files only.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import io
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from etj.api.spec import FileFormat

GENRES = [
    "Action",
    "Adventure",
    "Animation",
    "Children",
    "Comedy",
    "Crime",
    "Documentary",
    "Drama",
    "Fantasy",
    "Film-Noir",
    "Horror",
    "Musical",
    "Mystery",
    "Romance",
    "Sci-Fi",
    "Thriller",
    "War",
    "Western",
]


@dataclass
class Column:
    """A categorical column: ``vocab`` distinct ids with hidden scores."""

    name: str
    vocab: int
    weight: float
    empty: float  # share of empty fields


class Ids:
    """Zipf-ranked ids of one column, each with a hidden score in [-1, 1]."""

    def __init__(self, rng: np.random.Generator, column: Column, text: Callable[[int], str]):
        self.column = column
        self.scores = rng.uniform(-1.0, 1.0, column.vocab)
        ranks = np.arange(1, column.vocab + 1, dtype=np.float64)
        p = ranks**-1.05
        self.p = p / p.sum()
        self.text = [text(i) for i in range(column.vocab)]

    def draw(self, rng: np.random.Generator, n: int) -> tuple[list[str], np.ndarray]:
        """Id texts and their score contributions (0 for empty fields)."""
        idx = rng.choice(self.column.vocab, size=n, p=self.p)
        empty = rng.random(n) < self.column.empty
        texts = ["" if e else self.text[i] for i, e in zip(idx, empty, strict=True)]
        return texts, np.where(empty, 0.0, self.scores[idx] * self.column.weight)


def _hex8(rng: np.random.Generator) -> Callable[[int], str]:
    values = rng.integers(0, 2**32, size=1 << 16, dtype=np.uint64)
    return lambda i: f"{int(values[i % len(values)]) ^ (i * 2654435761 & 0xFFFFFFFF):08x}"


def _clicks(rng: np.random.Generator, logit: np.ndarray) -> np.ndarray:
    return (rng.random(len(logit)) < 1.0 / (1.0 + np.exp(-logit))).astype(int)


def criteo_rows(rng: np.random.Generator, n: int, state: dict) -> list[str]:
    if "ids" not in state:
        hexes = _hex8(rng)
        # Small vocabularies: each id recurs often enough in a small file to be learnt.
        vocab = [12, 40, 150, 80, 6, 4, 60, 25, 3, 100] * 3
        state["ids"] = [
            Ids(
                rng,
                Column(f"C{j + 1}", vocab[j], 1.2 if j < 8 else 0.3, 0.05 + 0.3 * (j % 4 == 3)),
                hexes,
            )
            for j in range(26)
        ]
    logit = np.full(n, -1.0)
    dense = []
    for k in range(13):
        counts = rng.poisson(3.0 + 4 * k, n) - (rng.random(n) < 0.02) * 3
        empty = rng.random(n) < (0.1 + 0.03 * k)
        if k < 3:
            logit += np.where(empty, 0.0, 0.4 * (np.log1p(np.maximum(counts, 0)) - 1.5))
        dense.append(["" if e else str(int(c)) for c, e in zip(counts, empty, strict=True)])
    cats = []
    for ids in state["ids"]:
        texts, score = ids.draw(rng, n)
        logit += score
        cats.append(texts)
    labels = _clicks(rng, logit)
    return [
        "\t".join([str(labels[r]), *(d[r] for d in dense), *(c[r] for c in cats)]) for r in range(n)
    ]


AVAZU_CATEGORICAL = [
    ("C1", 7, 0.3),
    ("banner_pos", 7, 0.5),
    ("site_id", 400, 1.0),
    ("site_domain", 300, 0.5),
    ("site_category", 20, 0.5),
    ("app_id", 300, 1.0),
    ("app_domain", 100, 0.3),
    ("app_category", 20, 0.3),
    ("device_id", 3000, 0.6),
    ("device_ip", 5000, 0.4),
    ("device_model", 800, 0.6),
    ("device_type", 5, 0.2),
    ("device_conn_type", 4, 0.2),
    *((f"C{k}", 200 if k < 18 else 40, 0.5) for k in range(14, 22)),
]
AVAZU_HEADER = ["id", "click", "hour", *(c for c, _, _ in AVAZU_CATEGORICAL)]


def avazu_rows(rng: np.random.Generator, n: int, state: dict) -> list[str]:
    if "ids" not in state:
        hexes = _hex8(rng)
        # Avazu's small codes (C1, banner_pos, device_type, C14..C21) are integers; the
        # site/app/device ids 8 hex digits.
        state["ids"] = [
            Ids(
                rng,
                Column(c, v, w, 0.0),
                hexes
                if "_" in c
                and c != "banner_pos"
                and not c.startswith("device_type")
                and not c.startswith("device_conn")
                else (lambda i: str(1000 + i)),
            )
            for c, v, w in AVAZU_CATEGORICAL
        ]
        state["hour_score"] = rng.uniform(-0.6, 0.6, 24)
        state["next"] = 10_000_000_000_000_000_000  # 20 digits, past int64
    logit = np.full(n, -1.2)
    day = rng.integers(21, 31, n)
    hh = rng.integers(0, 24, n)
    logit += state["hour_score"][hh]
    hour = [f"1410{d:02d}{h:02d}" for d, h in zip(day, hh, strict=True)]
    cols = []
    for ids in state["ids"]:
        texts, score = ids.draw(rng, n)
        logit += score
        cols.append(texts)
    labels = _clicks(rng, logit)
    first = state["next"]
    state["next"] += n * 7919
    return [
        ",".join([str(first + r * 7919), str(labels[r]), hour[r], *(c[r] for c in cols)])
        for r in range(n)
    ]


def movielens_rows(rng: np.random.Generator, n: int, state: dict) -> list[str]:
    if "users" not in state:
        state["users"] = rng.normal(0.0, 0.8, 2000)
        state["movies"] = rng.normal(0.0, 0.8, 1500)
        state["taste"] = rng.normal(0.0, 1.0, (2000, len(GENRES))) * 0.6
        state["movie_genres"] = [
            sorted(rng.choice(len(GENRES), size=rng.integers(1, 4), replace=False))
            for _ in range(1500)
        ]
    user = rng.choice(2000, size=n, p=_zipf(2000))
    movie = rng.choice(1500, size=n, p=_zipf(1500))
    out = []
    for u, m in zip(user, movie, strict=True):
        genres = state["movie_genres"][m]
        score = 3.4 + state["users"][u] + state["movies"][m] + state["taste"][u, genres].mean()
        rating = float(np.clip(np.round((score + rng.normal(0, 0.6)) * 2) / 2, 0.5, 5.0))
        ts = 964_982_703 + int(rng.integers(0, 10**8))
        names = "|".join(GENRES[g] for g in genres)
        out.append(f"{u + 1},{m + 1},{rating:g},{ts},{names}")
    return out


MOVIELENS_1M_HEADER = "user_id,movie_id,rating,timestamp,title,genres,gender,age,occupation,zip"
_WORDS = ["Heat", "Casino", "Sabrina", "Jumanji", "Balto", "Nixon", "Othello", "Clueless"]
_AGES = [1, 18, 25, 35, 45, 50, 56]


def _title(m: int) -> str:
    """A movie's title: some as MovieLens writes a leading article ("Bridges of Madison
    County, The (1995)"), some with a quote."""
    name = f"{_WORDS[m % len(_WORDS)]} {m // len(_WORDS) + 1}"
    year = 1920 + m % 81
    if m % 4 == 1:
        return f"{name}, The ({year})"
    if m % 29 == 3:
        return f'{name} "Part {m % 3 + 1}" ({year})'
    return f"{name} ({year})"


def movielens_1m_rows(rng: np.random.Generator, n: int, state: dict) -> list[str]:
    lines = movielens_rows(rng, n, state)
    if "people" not in state:
        people = np.random.default_rng(7)
        state["people"] = [
            (
                "F" if people.random() < 0.28 else "M",
                int(people.choice(_AGES)),
                int(people.integers(0, 21)),
                f"{int(people.integers(1000, 99999)):05d}",
            )
            for _ in range(2000)
        ]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    for line in lines:
        user, movie, rating, ts, genres = line.split(",")
        gender, age, occupation, zipcode = state["people"][int(user) - 1]
        title = _title(int(movie) - 1)
        writer.writerow([user, movie, rating, ts, title, genres, gender, age, occupation, zipcode])
    return out.getvalue().splitlines()


def _zipf(n: int) -> np.ndarray:
    p = np.arange(1, n + 1, dtype=np.float64) ** -0.9
    return p / p.sum()


@dataclass(frozen=True)
class Layout:
    rows: Callable[[np.random.Generator, int, dict], list[str]]
    header: str | None
    suffix: str


LAYOUTS = {
    "criteo": Layout(criteo_rows, None, "txt"),
    "avazu": Layout(avazu_rows, ",".join(AVAZU_HEADER), "csv"),
    "movielens": Layout(movielens_rows, "userId,movieId,rating,timestamp,genres", "csv"),
    "movielens-1m": Layout(movielens_1m_rows, MOVIELENS_1M_HEADER, "csv"),
}


def write(
    layout: str,
    out: Path,
    files: int,
    rows_per_file: int,
    seed: int = 0,
    prefix: str = "part",
    compress: bool = False,
    state: dict | None = None,
) -> list[Path]:
    """Write ``files`` files of ``rows_per_file`` rows; their paths.

    Pass the same ``state`` to write training and held-out files of one world (the same
    ids and hidden scores) with different seeds.
    """
    spec = LAYOUTS[layout]
    world = {} if state is None else state
    rng = np.random.default_rng(seed)
    if not world:
        spec.rows(np.random.default_rng(12345), 1, world)  # the hidden world, from a fixed seed
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for k in range(files):
        lines = spec.rows(rng, rows_per_file, world)
        text = "\n".join(([spec.header] if spec.header else []) + lines) + "\n"
        path = out / f"{prefix}-{k:05d}.{spec.suffix}{'.gz' if compress else ''}"
        if compress:
            path.write_bytes(gzip.compress(text.encode()))
        else:
            path.write_text(text)
        paths.append(path)
    return paths


def write_train_and_validation(
    layout: str, out: Path, files: int = 2, rows_per_file: int = 4000, validation_rows: int = 4000
) -> tuple[list[Path], list[Path]]:
    """Training files ``train-*`` and one held-out file ``valid-*`` of the same world."""
    state: dict = {}
    train = write(layout, out, files, rows_per_file, seed=1, prefix="train", state=state)
    valid = write(layout, out, 1, validation_rows, seed=2, prefix="valid", state=state)
    return train, valid


def to_parquet(path: Path, delimiter: str, lists: dict[str, str]) -> Path:
    """The text file ``path`` (with a header) rewritten as Parquet beside it (the text
    removed): numbers typed, ids as read, each column of ``lists`` a list column split on
    its separator (how Spark would write MovieLens' genres)."""
    import pyarrow.compute as pc
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    table = pacsv.read_csv(path, parse_options=pacsv.ParseOptions(delimiter=delimiter))
    for name, separator in lists.items():
        i = table.schema.get_field_index(name)
        table = table.set_column(i, name, pc.split_pattern(table[name], separator))
    target = path.with_suffix(".parquet")
    pq.write_table(table, target)
    path.unlink()
    return target


# Layouts also written as Parquet (--format parquet): the list columns.
PARQUET_LISTS = {"movielens": {"genres": "|"}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m etj_trainer.data.clicklogs", description=__doc__
    )
    parser.add_argument("layout", choices=sorted(LAYOUTS))
    parser.add_argument("--out", required=True, type=Path, help="output directory")
    parser.add_argument("--files", type=int, default=2, help="training files")
    parser.add_argument("--rows", type=int, default=20_000, help="rows per training file")
    parser.add_argument("--validation-rows", type=int, default=10_000)
    parser.add_argument(
        "--format",
        choices=["text", FileFormat.PARQUET],
        default="text",
        help="parquet: the same rows as Parquet (movielens; needs pyarrow)",
    )
    args = parser.parse_args(argv)
    if args.format == FileFormat.PARQUET and args.layout not in PARQUET_LISTS:
        parser.error(f"--format parquet is for {', '.join(sorted(PARQUET_LISTS))}")
    train, valid = write_train_and_validation(
        args.layout, args.out, args.files, args.rows, args.validation_rows
    )
    if args.format == FileFormat.PARQUET:
        lists = PARQUET_LISTS[args.layout]
        train = [to_parquet(p, ",", lists) for p in train]
        valid = [to_parquet(p, ",", lists) for p in valid]
    print(f"wrote {len(train)} training files and {len(valid)} held-out file to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
