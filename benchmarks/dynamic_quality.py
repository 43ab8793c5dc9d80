"""Quality of dynamic (collisionless) tables vs hashed tables, side by side in one run.

Three datasets, each written here (never downloaded), each with a per-id signal:

- ``long-tail``: a click log whose ``user_id`` and ``ad_id`` are drawn from Zipf laws over
  many more distinct ids than any table here has rows (random 40-bit integers, so
  ``id mod rows`` scatters them as hashing does); every id has its own effect on the click
  probability, plus two dense columns; tables of 1,000 + 8,000 user and 500 + 4,000 ad rows;
- ``long-tail-small``: the same click log, pools of a quarter the rows, half the fallback
  rows (500 + 2,000 and 250 + 1,000): the ids seen often enough to be learned outnumber
  the rows, so hashed ones share rows with each other (collisions heavy), not only with
  rarely seen ones;
- ``movielens``: the MovieLens layout of ``etj_trainer.data.clicklogs`` (ratings joined with
  genres; 2,000 users, 1,500 movies; rating >= 4 is a click), tables of as many rows.

For each, three ways to hold the id tables (the other tables and the tower unchanged):

- ``dynamic``: ``vocabularySize`` fallback rows + ``capacity`` pool rows, ids admitted after
  ``admitAfter`` sightings and freed after ``evictAfterSteps`` unseen;
- ``hashed, equal rows``: ``vocabularySize + capacity`` rows, ids hashed (``id mod rows``);
- ``hashed, equal memory``: as many hashed rows as the planner's bytes of the dynamic table
  (its pool, optimizer slots, index, row state and candidates: ``etj plan``) buy.

Each variant is trained by etj single-process with ``--seeds`` seeds (the trainer's seed:
initial values and data order), checkpointed at the end, restored here into the trainer's
model and scored on the held-out file (exact AUC); differences are paired by seed. Goal:
dynamic >= hashed + 0.005 AUC where collisions are heavy. Prints a markdown table.
Not a test: nothing is asserted.

Results, dated: ``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

# (model_quality puts the trainer and its test harness on the path, and imports from it.)
from model_quality import WATCHDOG, auc, job_spec, log_loss, train_alone, trainer_config

BATCH = 256
LR = 0.05
HIDDEN = [32, 16]


# --- the long-tail click log -------------------------------------------------------------


@dataclass(frozen=True)
class IdColumn:
    """``distinct`` ids drawn with probability ~ rank^-exponent, each with an effect."""

    name: str
    distinct: int
    exponent: float
    effect: float


LONG_TAIL = (IdColumn("user_id", 400_000, 1.0, 1.0), IdColumn("ad_id", 100_000, 1.0, 0.8))


def long_tail_world(columns: tuple[IdColumn, ...] = LONG_TAIL, seed: int = 0) -> dict[str, Any]:
    """The hidden truth: per column its ids (by popularity rank), draw probabilities and
    per-id effects; and the dense weights."""
    rng = np.random.default_rng(seed)
    world: dict[str, Any] = {"dense": rng.normal(0, 0.5, 2)}
    for c in columns:
        p = np.arange(1, c.distinct + 1, dtype=np.float64) ** -c.exponent
        world[c.name] = (
            rng.choice(1 << 40, size=c.distinct, replace=False).astype(np.int64),
            p / p.sum(),
            rng.normal(0, c.effect, c.distinct),
        )
    return world


def long_tail(rows: int, seed: int, world: dict[str, Any]) -> dict[str, np.ndarray]:
    """``rows`` examples of ``world``: ``label``, ``d0``, ``d1`` and one id column each."""
    rng = np.random.default_rng(seed)
    dense = rng.normal(size=(rows, 2))
    logit = -0.5 + dense @ world["dense"]
    out: dict[str, np.ndarray] = {"d0": dense[:, 0], "d1": dense[:, 1]}
    for name, value in world.items():
        if name == "dense":
            continue
        ids, p, effect = value
        rank = rng.choice(len(ids), size=rows, p=p)
        out[name] = ids[rank]
        logit += effect[rank]
    out["label"] = (rng.random(rows) < 1 / (1 + np.exp(-logit))).astype(np.int64)
    return out


def write_columns(data: dict[str, np.ndarray], path: Path) -> Path:
    """A CSV with a header, one column per key (integers as integers)."""
    names = list(data)
    fmt = ["%d" if data[n].dtype.kind in "iu" else "%.5f" for n in names]
    table = np.empty((len(data[names[0]]), len(names)), dtype=object)
    for i, n in enumerate(names):
        table[:, i] = data[n]
    np.savetxt(path, table, fmt=fmt, delimiter=",", header=",".join(names), comments="")
    return path


# --- the datasets as etj models ----------------------------------------------------------


@dataclass(frozen=True)
class Varied:
    """A table whose kind the variants change: fallback rows, pool rows, its settings."""

    name: str
    fallback: int
    capacity: int
    dimension: int


@dataclass(frozen=True)
class Dataset:
    name: str
    varied: tuple[Varied, ...]
    fixed: tuple[dict[str, Any], ...]  # tables every variant has as they are
    features: tuple[dict[str, Any], ...]
    admit_after: int
    evict_after_steps: int


DATASETS = {
    "long-tail": Dataset(
        "long-tail",
        (Varied("user", 1000, 8000, 16), Varied("ad", 500, 4000, 16)),
        (),
        (
            {"name": "label", "kind": "label"},
            {"name": "d0", "kind": "dense"},
            {"name": "d1", "kind": "dense"},
            {"name": "user_id", "kind": "categorical", "table": "user", "valueType": "int"},
            {"name": "ad_id", "kind": "categorical", "table": "ad", "valueType": "int"},
        ),
        admit_after=2,
        evict_after_steps=300,
    ),
    "movielens": Dataset(
        "movielens",
        # Pools as large as the ids (collisionless), hashed tables of as many rows collide.
        (Varied("user", 1, 2000, 16), Varied("movie", 1, 1500, 16)),
        ({"name": "genre", "vocabularySize": 64, "dimension": 8, "combiner": "mean"},),
        (
            {"name": "rating", "kind": "label", "threshold": 4},
            {"name": "userId", "kind": "categorical", "table": "user", "valueType": "int"},
            {"name": "movieId", "kind": "categorical", "table": "movie", "valueType": "int"},
            {
                "name": "genres",
                "kind": "categorical",
                "table": "genre",
                "delimiter": "|",
                "maxLength": 4,
            },
        ),
        admit_after=2,
        evict_after_steps=300,
    ),
}
# The same click log, pools of a quarter the rows: the ids worth learning (seen often
# enough) outnumber the rows, so hashed ones share rows with each other.
DATASETS["long-tail-small"] = replace(
    DATASETS["long-tail"],
    name="long-tail-small",
    varied=(Varied("user", 500, 2000, 16), Varied("ad", 250, 1000, 16)),
)
VARIANTS = ("dynamic", "hashed, equal rows", "hashed, equal memory")
MAINTAIN_EVERY = 10


def _table(v: Varied, variant: str, d: Dataset, rows: dict[str, int]) -> dict[str, Any]:
    if variant == "dynamic":
        return {
            "name": v.name,
            "vocabularySize": v.fallback,
            "dimension": v.dimension,
            "dynamic": {
                "capacity": v.capacity,
                "admitAfter": d.admit_after,
                "evictAfterSteps": d.evict_after_steps,
                "maintainEverySteps": MAINTAIN_EVERY,
            },
        }
    n = v.fallback + v.capacity if variant == "hashed, equal rows" else rows[v.name]
    return {"name": v.name, "vocabularySize": n, "dimension": v.dimension}


def spec_of(
    d: Dataset, variant: str, seed: int, steps: int, files: str, valid: str, rows: dict[str, int]
) -> Any:
    """The single-process job of ``variant`` (``rows``: the equal-memory hashed rows)."""
    return job_spec(
        strategy="MultiWorkerMirrored",
        replicas={"chief": {"replicas": 0}, "worker": {"replicas": 1}},
        model={
            "embeddings": [*(_table(v, variant, d, rows) for v in d.varied), *d.fixed],
            "features": list(d.features),
            "hiddenUnits": HIDDEN,
        },
        data={
            "source": "files",
            "files": {"pattern": files, "format": "csv", "header": True},
            "validation": {"pattern": valid, "maxExamples": 10**9},
        },
        training={
            "batchSizePerReplica": BATCH,
            "steps": steps,
            "optimizer": "adagrad",
            "learningRate": LR,
            "stepsPerExecution": MAINTAIN_EVERY,
            "seed": seed,
        },
        sharding={"maxShardBytes": "64Mi"},
    )


def planned_bytes(spec: Any) -> dict[str, int]:
    """The planner's bytes of each table (rows with slots, and a dynamic table's index)."""
    return {t.name: t.bytes for t in trainer_config(spec).shard_plan.tables}


def equal_memory_rows(d: Dataset, files: str, valid: str) -> dict[str, int]:
    """Rows of a hashed table that the planner gives the dynamic table's bytes."""
    dynamic = planned_bytes(spec_of(d, "dynamic", 0, 1, files, valid, {}))
    one = {v.name: 1 for v in d.varied}
    per_row = planned_bytes(spec_of(d, "hashed, equal memory", 0, 1, files, valid, one))
    return {v.name: dynamic[v.name] // per_row[v.name] for v in d.varied}


def scored(config: Any, checkpoints: Path) -> tuple[np.ndarray, np.ndarray]:
    """Labels and predicted click probabilities of the held-out file, from the last
    checkpoint restored into the trainer's model (as the evaluator role does)."""
    import tensorflow as tf

    from etj_trainer.data.batch import LABEL_KEY
    from etj_trainer.data.pipeline import validation_dataset
    from etj_trainer.models.ctr import CtrModel

    model = CtrModel(config)
    tf.train.Checkpoint(model=model).restore(
        tf.train.latest_checkpoint(str(checkpoints))
    ).expect_partial()
    predict = tf.function(lambda batch: tf.sigmoid(model(batch)), reduce_retracing=True)
    labels, scores = [], []
    for batch in validation_dataset(config.model, config.data, 4096):
        labels.append(batch[LABEL_KEY].numpy())
        scores.append(predict(batch).numpy())
    return np.concatenate(labels), np.concatenate(scores)


def write_data(name: str, rows: int, work: Path) -> tuple[str, str]:
    """Training and held-out files of dataset ``name``: their paths."""
    out = work / name
    out.mkdir(parents=True)
    if name.startswith("long-tail"):
        world = long_tail_world()
        write_columns(long_tail(rows, 1, world), out / "train.csv")
        write_columns(long_tail(rows // 4, 2, world), out / "valid.csv")
        return str(out / "train.csv"), str(out / "valid.csv")
    from etj_trainer.data.clicklogs import write

    state: dict = {}
    write("movielens", out, 1, rows, seed=1, prefix="train", state=state)
    write("movielens", out, 1, rows // 4, seed=2, prefix="valid", state=state)
    return str(out / "train-*.csv"), str(out / "valid-*.csv")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer rows and steps")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--datasets", default=",".join(DATASETS))
    args = parser.parse_args()
    rows, steps = (100_000, 400) if args.quick else (400_000, 1500)
    work = Path(tempfile.mkdtemp(prefix="etj-dynamic-quality-"))
    results: dict[tuple[str, str], list[tuple[float, float, float]]] = {}
    shape: dict[tuple[str, str], str] = {}
    for name in args.datasets.split(","):
        d = DATASETS[name]
        files, valid = write_data(name, rows, work)
        memory_rows = equal_memory_rows(d, files, valid)
        for seed in range(args.seeds):
            for variant in VARIANTS:
                spec = spec_of(d, variant, seed, steps, files, valid, memory_rows)
                run = work / f"{name}-{variant.replace(', ', '-').replace(' ', '_')}-{seed}"
                config = trainer_config(
                    spec, checkpoint_dir=run / "ckpt", every_steps=steps, watchdog_seconds=WATCHDOG
                )
                start = time.monotonic()
                train_alone(config, run, timeout=2400)
                labels, p = scored(config, run / "ckpt")
                a, loss = auc(labels, p), log_loss(labels, p)
                results.setdefault((name, variant), []).append((a, loss, time.monotonic() - start))
                tables = {t["name"]: t for t in spec.model.model_dump(by_alias=True)["embeddings"]}
                planned = planned_bytes(spec)
                shape[(name, variant)] = ", ".join(
                    f"{v.name} {_rows_text(tables[v.name])} {planned[v.name] / 2**20:.2f} MiB"
                    for v in d.varied
                )
                print(
                    f"# {name} seed {seed} {variant}: AUC {a:.4f} log-loss {loss:.4f} "
                    f"load {os.getloadavg()[0]:.1f}",
                    flush=True,
                )
    print(
        f"\n{rows:,} training rows per dataset, {steps} steps x {BATCH}, held-out {rows // 4:,}, "
        f"seeds 0..{args.seeds - 1}, single process, load average {os.getloadavg()[0]:.1f}\n"
    )
    print(
        "| data | tables | rows (planned bytes) | AUC per seed | mean AUC | dynamic - this "
        "(paired) | log-loss |"
    )
    print("|---|---|---|---|---|---|---|")
    for (name, variant), runs in results.items():
        aucs = [r[0] for r in runs]
        dynamic = [r[0] for r in results[(name, "dynamic")]]
        diffs = [x - y for x, y in zip(dynamic, aucs, strict=True)]
        diff = (
            ""
            if variant == "dynamic"
            else f"{statistics.mean(diffs):+.4f} ({min(diffs):+.4f}..{max(diffs):+.4f})"
        )
        print(
            f"| {name} | {variant} | {shape[(name, variant)]} | "
            f"{' '.join(f'{a:.4f}' for a in aucs)} | {statistics.mean(aucs):.4f} | {diff} | "
            f"{statistics.mean(r[1] for r in runs):.4f} |"
        )


def _rows_text(table: dict[str, Any]) -> str:
    dynamic = table.get("dynamic")
    if dynamic:
        return f"{table['vocabularySize']:,}+{dynamic['capacity']:,} rows"
    return f"{table['vocabularySize']:,} rows"


if __name__ == "__main__":
    main()
