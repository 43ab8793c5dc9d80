"""Quality and memory of low-precision tables and row-wise Adagrad, side by side in one run.

Variants of one model (``model_quality.py``'s generated click data and tables, the dnn
architecture), each trained by etj single-process (or, with ``--mode ps``, chief + 2 workers
+ 2 ps) with the same seeds, exported, and scored on the same held-out file:

- ``float32/adagrad``: the reference;
- ``bfloat16/adagrad``: bfloat16 tables, float32 Adagrad accumulators, float32 update math
  and stochastic rounding to bfloat16 (goal: AUC within 0.002 of the reference);
- ``float32/rowwiseAdagrad``: one accumulator per row (goal: within 0.003 of the reference,
  at half the table + slot memory);
- ``bfloat16/rowwiseAdagrad``: both (a quarter of the memory).

Each variant runs with ``--seeds`` seeds (the trainer's seed: initial values and the data
order; the data itself is fixed); differences are paired by seed. The memory columns are
the planner's bytes (``etj plan``): the tables in their dtype and the optimizer slots in
float32. Prints one table. Not a test: nothing is asserted.

Results, dated: ``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

# (model_quality puts the trainer and its test harness on the path, and imports from it.)
from model_quality import (
    DENSE,
    DIM,
    HIDDEN,
    LR,
    TABLES,
    WATCHDOG,
    LocalJob,
    auc,
    generate,
    job_spec,
    log_loss,
    score_export,
    train_alone,
    trainer_config,
    write_csv,
)

VARIANTS = [
    ("float32", "adagrad"),
    ("bfloat16", "adagrad"),
    ("float32", "rowwiseAdagrad"),
    ("bfloat16", "rowwiseAdagrad"),
]
REFERENCE = VARIANTS[0]
GOALS = {("bfloat16", "adagrad"): 0.002, ("float32", "rowwiseAdagrad"): 0.003}


def _spec(
    dtype: str, optimizer: str, seed: int, mode: str, steps: int, batch: int, files: str
) -> Any:
    replicas: dict[str, Any] = {"chief": {"replicas": 0}, "worker": {"replicas": 1}}
    strategy = "MultiWorkerMirrored"
    if mode == "ps":
        strategy = "ParameterServer"
        replicas = {"chief": {"replicas": 1}, "worker": {"replicas": 2}, "ps": {"replicas": 2}}
    return job_spec(
        strategy=strategy,
        replicas=replicas,
        model={
            "embeddings": [
                {"name": t, "vocabularySize": v, "dimension": DIM, "dtype": dtype}
                for t, v in TABLES.items()
            ],
            "denseFeatures": DENSE,
            "hiddenUnits": HIDDEN,
        },
        data={"source": "files", "files": {"pattern": files, "format": "csv"}},
        training={
            "batchSizePerReplica": batch,
            "steps": steps,
            "optimizer": optimizer,
            "learningRate": LR,
            "stepsPerExecution": 10,
            "seed": seed,
        },
        sharding={"maxShardBytes": "32Ki"},
    )


def run(spec: Any, mode: str, work: Path) -> Path:
    """Train ``spec``; the export directory."""
    export = work / "export"
    config = trainer_config(spec, export_dir=export, watchdog_seconds=WATCHDOG)
    if mode == "ps":
        with LocalJob(config, work, workers=2, ps=2) as job:
            job.start_all()
            job.wait_done(timeout=2400)
        return export
    train_alone(config, work, timeout=2400)
    return export


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer rows and steps")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--mode", choices=["single", "ps"], default="single")
    parser.add_argument("--steps", type=int, help="training steps (default: by --quick)")
    args = parser.parse_args()
    rows, steps, batch = (60_000, 400, 256) if args.quick else (400_000, 3000, 512)
    steps = args.steps or steps
    train, held = generate(rows, seed=1), generate(rows // 4, seed=2)
    work = Path(tempfile.mkdtemp(prefix="etj-low-precision-"))
    write_csv(train, work / "train.csv")
    files = str(work / "train.csv")
    results: dict[tuple[str, str], list[tuple[float, float, float]]] = {}
    memory: dict[tuple[str, str], tuple[int, int]] = {}
    for seed in range(args.seeds):
        for dtype, optimizer in VARIANTS:
            spec = _spec(dtype, optimizer, seed, args.mode, steps, batch, files)
            plan = trainer_config(spec).shard_plan
            memory[(dtype, optimizer)] = (
                sum(t.bytes for t in plan.tables),
                sum(t.slot_bytes for t in plan.tables),
            )
            start = time.monotonic()
            export = run(spec, args.mode, work / f"{dtype}-{optimizer}-{seed}")
            p = score_export(export, held)
            a, loss = auc(held["label"], p), log_loss(held["label"], p)
            results.setdefault((dtype, optimizer), []).append((a, loss, time.monotonic() - start))
            print(f"# seed {seed} {dtype}/{optimizer}: AUC {a:.4f} log-loss {loss:.4f}", flush=True)
    print(
        f"\n{args.mode}, {rows} training rows, {steps} x {batch} examples per run, held-out "
        f"{len(held['label'])}, seeds 0..{args.seeds - 1}"
    )
    header = (
        f"{'tables/optimizer':<26} {'AUC (per seed)':<24} {'mean':>7} {'vs f32 (paired)':>16} "
        f"{'goal':>6} {'log-loss':>9} {'bytes':>9} {'slots':>9} {'seconds':>8}"
    )
    print(header)
    ref = results[REFERENCE]
    for key in VARIANTS:
        runs = results[key]
        aucs = [r[0] for r in runs]
        deltas = [a - r[0] for a, r in zip(aucs, ref, strict=True)]
        delta = "" if key == REFERENCE else f"{statistics.mean(deltas):+.4f}"
        spread = "" if key == REFERENCE else f"±{max(abs(d) for d in deltas):.4f}"
        goal = f"{GOALS[key]:.3f}" if key in GOALS else ""
        total, slots = memory[key]
        print(
            f"{key[0] + '/' + key[1]:<26} {' '.join(f'{a:.4f}' for a in aucs):<24} "
            f"{statistics.mean(aucs):>7.4f} {delta + ' ' + spread:>16} {goal:>6} "
            f"{statistics.mean(r[1] for r in runs):>9.4f} {total:>9,} {slots:>9,} "
            f"{statistics.mean(r[2] for r in runs):>8.0f}"
        )
    print(
        "vs f32 (paired): mean over seeds of (AUC - float32/adagrad's AUC of the same seed) "
        "± the largest per-seed difference; bytes: tables with slots; slots: float32 "
        "optimizer state"
    )


if __name__ == "__main__":
    main()
