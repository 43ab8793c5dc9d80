"""The disk table's kernels (``etj_trainer.kernels.disk_table``) against the same work on a
table in RAM, in one process: cache hit rate and rows per second for caches of 1 %, 5 %
and 20 % of the rows, on Zipf(1.05) ids.

One table of ``--rows`` rows of dimension ``--dim`` with Adagrad (record: weights +
accumulator, float32). Each step draws ``--batch`` ids from a Zipf(1.05) over the rows
(finite: inverse CDF over the ranks, ranks spread over the file by a permutation),
deduplicates them as the model does (``tf.unique``), looks the rows up and applies one
Adagrad step to them: the disk table's ``lookup`` + ``apply``, and for the baseline a
``tf.Variable`` pair's ``tf.gather`` + ``ResourceSparseApplyAdagradV2``. The first
``--warmup`` steps fill the cache and are not timed. Prints per cache size the hit rate
of the timed steps' lookups (a miss of a row never written reads no file) beside that of
a cache holding exactly the hottest rows, rows/s (looked up and updated) of both, their ratio, and the rows read
from and written to the file per step.

What it does not measure: the SSD. The file's pages sit in the OS page cache unless the
table is larger than the machine's free RAM, so a miss here costs a ``pread`` from the page
cache; with a table past RAM a miss is a device read. Nor the network of a
ParameterServer job (``trainer_throughput.py``).
``python benchmarks/disk_table.py [--rows N] [--dim D] [--batch B] [--steps S]``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "trainer_image"))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from etj_trainer.kernels import build  # noqa: E402
from etj_trainer.kernels.disk_table import DiskTable  # noqa: E402

ZIPF = 1.05
LR = 0.05
INITIAL = 0.1


def zipf_batches(rows: int, batch: int, steps: int, seed: int) -> tuple[list, np.ndarray]:
    """``steps`` batches of distinct ids, each from ``batch`` Zipf(1.05) draws, and each
    row's rank (0: the most frequent)."""
    rng = np.random.default_rng(seed)
    cdf = np.cumsum(1.0 / np.arange(1, rows + 1) ** ZIPF)
    cdf /= cdf[-1]
    place = rng.permutation(rows)
    rank = np.empty(rows, np.int64)
    rank[place] = np.arange(rows)
    batches = [
        np.unique(place[np.searchsorted(cdf, rng.random(batch))]).astype(np.int64)
        for _ in range(steps)
    ]
    return batches, rank


def run_disk(path: str, rows: int, dim: int, cache: int, batches: list, warmup: int) -> dict:
    table = DiskTable(path, rows, dim, "adagrad", cache_rows=cache, slot_init=INITIAL)
    grads = {len(b): tf.ones([len(b), dim]) * 0.01 for b in batches}

    def step(ids: np.ndarray) -> None:
        table.lookup(ids)
        table.apply(ids, grads[len(ids)], LR)

    for ids in batches[:warmup]:
        step(ids)
    before = table.stats()
    start = time.perf_counter()
    for ids in batches[warmup:]:
        step(ids)
    seconds = time.perf_counter() - start
    after = table.stats()
    table.close()
    timed = len(batches) - warmup
    d = {k: after[k] - before[k] for k in after}
    return {
        "seconds": seconds,
        # Of the rows looked up (each step's update then finds them cached).
        "hit_rate": 1 - d["misses"] / sum(len(b) for b in batches[warmup:]),
        "reads_per_step": d["disk_reads"] / timed,
        "writes_per_step": d["disk_writes"] / timed,
    }


def run_ram(rows: int, dim: int, batches: list, warmup: int) -> float:
    var = tf.Variable(tf.zeros([rows, dim]))
    accum = tf.Variable(tf.fill([rows, dim], INITIAL))
    grads = {len(b): tf.ones([len(b), dim]) * 0.01 for b in batches}

    def step(ids: np.ndarray) -> None:
        tf.gather(var, ids)
        tf.raw_ops.ResourceSparseApplyAdagradV2(
            var=var.handle,
            accum=accum.handle,
            lr=tf.constant(LR),
            epsilon=tf.constant(1e-7),
            grad=grads[len(ids)],
            indices=ids,
        )

    for ids in batches[:warmup]:
        step(ids)
    start = time.perf_counter()
    for ids in batches[warmup:]:
        step(ids)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=4_000_000)
    parser.add_argument("--dim", type=int, default=16)
    parser.add_argument("--batch", type=int, default=8192)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--caches", default="0.01,0.05,0.2")
    args = parser.parse_args()
    build.build()
    batches, rank = zipf_batches(args.rows, args.batch, args.steps, seed=0)
    timed = np.concatenate(batches[args.warmup :])
    timed_rows = sum(len(b) for b in batches[args.warmup :])
    print(
        f"{args.rows:,} rows x {args.dim} (Adagrad: {args.rows * args.dim * 8 / 2**20:.0f} MiB "
        f"of rows + slots), {args.batch} Zipf({ZIPF}) ids a step, "
        f"{timed_rows / (args.steps - args.warmup):.0f} distinct; load "
        f"{os.getloadavg()[0]:.1f}"
    )
    ram = run_ram(args.rows, args.dim, batches, args.warmup)
    print(f"in RAM: {timed_rows / ram:,.0f} rows/s")
    with tempfile.TemporaryDirectory() as tmp:
        for fraction in map(float, args.caches.split(",")):
            cache = max(1, int(args.rows * fraction))
            r = run_disk(
                str(Path(tmp) / "t.rows"), args.rows, args.dim, cache, batches, args.warmup
            )
            # The yardstick: a cache that held exactly the hottest rows all along.
            oracle = float(np.mean(rank[timed] < cache))
            print(
                f"disk, cache {fraction:.0%} ({cache:,} rows): hit rate {r['hit_rate']:.3f} "
                f"(the hottest {cache:,} rows: {oracle:.3f}), "
                f"{timed_rows / r['seconds']:,.0f} rows/s, disk/RAM {ram / r['seconds']:.2f}, "
                f"{r['reads_per_step']:.0f} rows read and {r['writes_per_step']:.0f} written a step"
            )
    print(f"load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
