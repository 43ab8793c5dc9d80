"""A dynamic table's memory under a stream of ids ten times its capacity, under ParameterServer.

One ParameterServer job (chief + 1 worker + 2 ps, real processes on 127.0.0.1, as
``trainer_throughput.py`` runs them) trains a model whose one table ``item`` is dynamic
(``capacity`` pool rows, admission at the first sighting, eviction of rows unseen for 400
steps, a pass every 10 steps)
on a generated CSV whose ids drift: the ids of step ``t`` are drawn from a window that moves
on by ``capacity x 10 / steps`` ids a step, so the run sees 10 x ``capacity`` distinct ids
and every id goes stale soon after it appears (the pool fills, then lives by eviction).

Every ``--every`` seconds it samples the chief's progress record (rows used, admitted,
evicted, fallback lookups: ``etj.api.progress.DYNAMIC_GAUGES``) and the resident memory of
each ps process (its process group's VmRSS), prints the series, and reports whether rows
used stayed <= capacity and whether each ps's RSS plateaued (its growth over the run's last
half). Not a test: nothing is asserted.

Results, dated: ``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

# (dynamic_quality, through model_quality, puts the trainer and its harness on the path.)
from dynamic_quality import write_columns
from etj.api.progress import DYNAMIC_TABLES_KEY
from model_quality import LocalJob, job_spec, trainer_config
from trainer_throughput import group_memory

IDS_PER_EXAMPLE = 4
BATCH = 1024
# Ids live ~15 steps in the window; rows unseen for 400 steps go: about 400 x 10 x
# capacity / steps ids hold or want a row at once, more than the pool has (it fills).
EVICT_AFTER = 400
ADMIT_AFTER = 1
MAINTAIN_EVERY = 10


def drifting_ids(steps: int, batch: int, width: int, distinct: int, seed: int = 0) -> np.ndarray:
    """``[steps * batch, IDS_PER_EXAMPLE]`` ids: step ``t``'s uniform in a window of
    ``width`` ids starting at ``t * (distinct - width) // steps``: ``distinct`` ids in all
    (those the windows cover), each seen only while the window passes it."""
    rng = np.random.default_rng(seed)
    step = np.repeat(np.arange(steps, dtype=np.int64), batch)
    start = step * (distinct - width) // steps
    return start[:, None] + rng.integers(0, width, (steps * batch, IDS_PER_EXAMPLE))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--capacity", type=int, default=100_000)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--every", type=float, default=3.0, help="seconds between samples")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="etj-dynamic-capacity-"))
    distinct = 10 * args.capacity
    width = distinct // 100
    ids = drifting_ids(args.steps, BATCH, width, distinct)
    rng = np.random.default_rng(1)
    columns = {f"item_{k}": ids[:, k] for k in range(IDS_PER_EXAMPLE)}
    write_columns(
        {
            "label": (rng.random(len(ids)) < 0.3).astype(np.int64),
            "dense_0": rng.normal(size=len(ids)),
            **columns,
        },
        work / "train.csv",
    )
    spec = job_spec(
        replicas={"chief": {"replicas": 1}, "worker": {"replicas": 1}, "ps": {"replicas": 2}},
        model={
            "embeddings": [
                {
                    "name": "item",
                    "vocabularySize": 1000,
                    "dimension": 16,
                    "idsPerExample": IDS_PER_EXAMPLE,
                    "dynamic": {
                        "capacity": args.capacity,
                        "admitAfter": ADMIT_AFTER,
                        "evictAfterSteps": EVICT_AFTER,
                        "maintainEverySteps": MAINTAIN_EVERY,
                    },
                }
            ],
            "denseFeatures": 1,
            "hiddenUnits": [16],
        },
        data={"source": "files", "files": {"pattern": str(work / "train.csv"), "format": "csv"}},
        training={
            "batchSizePerReplica": BATCH,
            "steps": args.steps,
            "optimizer": "adagrad",
            "learningRate": 0.05,
            "stepsPerExecution": 10,
        },
        sharding={"maxShardBytes": "16Mi"},
    )
    config = trainer_config(spec, watchdog_seconds=900)
    table = config.shard_plan.tables[0]
    print(
        f"capacity {args.capacity:,}, {distinct:,} distinct ids over {args.steps} steps x "
        f"{BATCH} x {IDS_PER_EXAMPLE}; plan: {table.shards} shards on ps {table.ps_of_shard}, "
        f"{table.bytes / 2**20:.1f} MiB with slots and index",
        flush=True,
    )
    samples: list[tuple[float, int, dict, list[int], float]] = []
    with LocalJob(config, work, workers=1, ps=2, env={"ETJ_PROGRESS_SECONDS": "2"}) as job:
        job.start_all()
        began = time.monotonic()
        while job.last("done") is None:
            job.check_chief_alive()
            progress = job.last("progress") or {}
            stats = (progress.get(DYNAMIC_TABLES_KEY) or {}).get("item", {})
            rss = [sum(group_memory(job.procs[("ps", i)].pid)) for i in range(2)]
            samples.append(
                (time.monotonic() - began, progress.get("step", 0), stats, rss, os.getloadavg()[0])
            )
            time.sleep(args.every)
        final = (job.last("progress") or {}).get(DYNAMIC_TABLES_KEY, {}).get("item", {})
    shutil.rmtree(work, ignore_errors=True)
    print("seconds  step  rowsUsed  admitted  evicted  fallbackLookups  ps0 MiB  ps1 MiB  load")
    for t, step, s, rss, load in samples:
        print(
            f"{t:7.0f} {step:5} {s.get('rowsUsed', 0):9,} {s.get('admitted', 0):9,} "
            f"{s.get('evicted', 0):8,} {s.get('fallbackLookups', 0):16,} "
            f"{rss[0] / 2**20:8.0f} {rss[1] / 2**20:8.0f} {load:5.1f}"
        )
    used = max([s.get("rowsUsed", 0) for _, _, s, _, _ in samples] + [final.get("rowsUsed", 0)])
    print(f"final: {final}")
    print(f"rows used at most {used:,} of capacity {args.capacity:,}: {used <= args.capacity}")
    # Growth over the last half of the training (the samples with steps, by time).
    training = [x for x in samples if x[1] > 0]
    half = training[len(training) // 2 :]
    for i in range(2):
        first, last = half[0][3][i], half[-1][3][i]
        peak = max(x[3][i] for x in training)
        print(
            f"ps{i} RSS: {first / 2**20:.0f} MiB at the middle, {last / 2**20:.0f} MiB at the "
            f"end ({(last - first) / first:+.1%} over the last half), peak {peak / 2**20:.0f} MiB"
        )


if __name__ == "__main__":
    main()
