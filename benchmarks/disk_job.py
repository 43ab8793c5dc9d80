"""A ParameterServer job with its big table on the ps' disks (``storage.disk``, a RAM cache
of 1 %, 5 % and 20 % of the rows) against the same job with the table in RAM, side by side
in one run, alternating: examples/s of each and their ratio (goal: disk / RAM >= 0.5 at
5 %), the disk table's cache hit rate, and the held-out AUC of both (goal: within 0.001).

The job: chief + 2 workers + 2 ps as real processes on 127.0.0.1 (``python -m
etj_trainer``, bound to cores as ``etj run`` binds them), the trainer's chunks sized by time
(``stepsPerExecution`` left out, as a user would). Data, written here: a click log whose
``user_id`` is drawn from Zipf(1.05) over the table's ``--rows`` rows (ranks spread over the
rows by a permutation), each id with its own effect on the click probability, an ``ad_id``
of 10,000 rows (Zipf(1.05) too, in RAM in both runs) and two dense columns. ``user_id`` is
``--rows`` x 16 with Adagrad (record: weights + accumulator, float32), over both ps.

Each run trains ``--steps`` steps of ``--batch`` examples (one worker's batch a step) over
``--examples`` training rows (read repeatedly) and checkpoints at the end; the rate is the
job's own step counter over the steps after the first ``--warmup`` (from the driver's
clock), the hit rate the lookups' over the same steps (the trainer's progress lines,
``diskTables``: its kernels' counters summed over the shards). The held-out file is scored
from the final checkpoint restored into the in-RAM model (a disk table checkpoints under the
keys of a table in RAM). Each ps' peak resident set (VmHWM) and the ps' CPU-seconds per
1,000 examples are printed beside.

``--large``: one disk run of a table >= 4x ``--ps-memory`` per ps (4.2x unless ``--rows``),
at the first of ``--caches``, checkpointing half-way (keeping one) and at the end; ps 0 is
SIGKILLed after the first checkpoint and the job resumes from it (the operator's rule: the
chief exits retryable, the workers restart), the restored tables' digests checked against
the checkpoint: each ps' peak RSS (the restarted ps' covers the restore, the other's the
saves) against the limit. The limit is not enforced here (no cgroup): the peak is measured
and compared.

What it does not measure: the SSD. The shard files sit in the OS page cache (the table is
far smaller than the machine's RAM), so a miss costs a ``pread`` from the page cache.
``--repeat`` rounds, RAM then each cache, then the reverse, ...: prints each run, the
medians, each round's ratio and the ratio of examples per CPU-second of the job's processes
(which the other load of a shared machine hardly moves). Not a test: nothing is asserted.
Results, dated: ``benchmarks/RESULTS.md``.

    .venv/bin/python benchmarks/disk_job.py [--rows N] [--steps S] [--repeat R] [--caches 0.01,0.05,0.2]
    .venv/bin/python benchmarks/disk_job.py --large [--ps-memory 1280Mi] [--steps 3000]
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

# (model_quality puts the trainer and its test harness on the path, and imports from it.)
from dynamic_quality import scored, write_columns
from model_quality import WATCHDOG, auc, log_loss
from trainer_throughput import _peak_rss_bytes, _processes

from etj.api.quantity import parse_quantity  # isort: skip
from etj_trainer.task.restore import slice_spec  # isort: skip
from harness import LocalJob, job_spec, trainer_config, wait_for  # isort: skip

ZIPF = 1.05
ADS = 10_000
DIM = 16
LR = 0.05
WORKERS, PS = 2, 2


def world(rows: int, seed: int = 0) -> dict[str, Any]:
    """The hidden truth: per id column its Zipf CDF over ranks, the id of each rank and each
    id's effect; the dense weights."""
    rng = np.random.default_rng(seed)
    out: dict[str, Any] = {"dense": rng.normal(0, 0.5, 2)}
    for name, n, effect in (("user_id", rows, 1.0), ("ad_id", ADS, 0.8)):
        cdf = np.cumsum(1.0 / np.arange(1, n + 1) ** ZIPF)
        out[name] = (cdf / cdf[-1], rng.permutation(n), rng.normal(0, effect, n))
    return out


def clicks(truth: dict[str, Any], rows: int, seed: int) -> dict[str, np.ndarray]:
    """``rows`` examples: ``label``, ``d0``, ``d1``, ``user_id``, ``ad_id``."""
    rng = np.random.default_rng(seed)
    dense = rng.normal(size=(rows, 2))
    logit = -0.5 + dense @ truth["dense"]
    out: dict[str, np.ndarray] = {"d0": dense[:, 0], "d1": dense[:, 1]}
    for name in ("user_id", "ad_id"):
        cdf, ids, effect = truth[name]
        chosen = ids[np.searchsorted(cdf, rng.random(rows))]
        out[name] = chosen.astype(np.int64)
        logit += effect[chosen]
    out["label"] = (rng.random(rows) < 1 / (1 + np.exp(-logit))).astype(np.int64)
    return out


def spec_of(
    rows: int, cache: float | None, steps: int, batch: int, files: str, valid: str | None = None
) -> Any:
    """The job; ``cache`` None: ``user_id`` in RAM, else on disk with that share cached.
    ``valid``: the held-out files, for scoring (the job itself evaluates nothing)."""
    user: dict[str, Any] = {"name": "user", "vocabularySize": rows, "dimension": DIM}
    if cache is not None:
        user["storage"] = {"disk": {"cacheRows": max(1, int(rows * cache))}}
    return job_spec(
        replicas={
            "chief": {"replicas": 1},
            "worker": {"replicas": WORKERS},
            "ps": {"replicas": PS},
        },
        model={
            "embeddings": [user, {"name": "ad", "vocabularySize": ADS, "dimension": DIM}],
            "features": [
                {"name": "label", "kind": "label"},
                {"name": "d0", "kind": "dense"},
                {"name": "d1", "kind": "dense"},
                {"name": "user_id", "kind": "categorical", "table": "user", "valueType": "int"},
                {"name": "ad_id", "kind": "categorical", "table": "ad", "valueType": "int"},
            ],
            "hiddenUnits": [64, 32],
        },
        data={
            "source": "files",
            "files": {"pattern": files, "format": "csv", "header": True},
            **({"validation": {"pattern": valid, "maxExamples": 10**9}} if valid else {}),
        },
        training={
            "batchSizePerReplica": batch,
            "steps": steps,
            "optimizer": "adagrad",
            "learningRate": LR,
            "seed": 0,
        },
        # Both ps hold a shard of user_id, in RAM as on disk.
        sharding={"maxShardBytes": f"{max(1, rows * DIM * 8 // PS // 2**20 + 1)}Mi"},
    )


def _window_hit_rate(progress: list[dict[str, Any]], warmup: int) -> float | None:
    """The disk table's lookups' hit rate between the first progress line past ``warmup``
    and the last one (its kernels' cumulative counters)."""
    lines = [p for p in progress if p.get("diskTables") and p["step"] >= warmup]
    if len(lines) < 2:
        return None
    first, last = lines[0]["diskTables"]["user"], lines[-1]["diskTables"]["user"]
    lookups = last["lookups"] - first["lookups"]
    return 1 - (last["lookupMisses"] - first["lookupMisses"]) / lookups if lookups else None


class _Cpu:
    """CPU seconds of process groups, each process's last sample kept: a process that
    exits between samples (the chief's trainer at the end) keeps what it used."""

    def __init__(self, groups: list[int]) -> None:
        self.groups = set(groups)
        # pid: (its group, its user + system ticks when last seen)
        self.ticks: dict[int, tuple[int, int]] = {}

    def sample(self) -> float:
        """Sample every process of the groups; the seconds so far by group (``seconds``)."""
        for pid, fields in _processes():
            if int(fields[2]) in self.groups:
                self.ticks[pid] = (int(fields[2]), int(fields[11]) + int(fields[12]))
        return self.seconds()

    def seconds(self, groups: list[int] | None = None) -> float:
        wanted = set(groups) if groups is not None else self.groups
        tick = os.sysconf("SC_CLK_TCK")
        return sum(t for g, t in self.ticks.values() if g in wanted) / tick


def run(spec: Any, work: Path, warmup: int) -> dict[str, Any]:
    """Train ``spec`` to its end: examples/s past ``warmup``, hit rate, ps peak RSS and the
    ps' CPU-seconds per 1,000 examples."""
    config = trainer_config(
        spec,
        checkpoint_dir=work / "ckpt",
        every_steps=spec.training.steps,
        watchdog_seconds=WATCHDOG,
    )
    (work / "disk").mkdir(parents=True)
    env = {"ETJ_DISK_TABLES": str(work / "disk"), "ETJ_PROGRESS_SECONDS": "2"}
    with LocalJob(config, work, workers=WORKERS, ps=PS, env=env) as job:
        job.start_all()

        def warm() -> int:
            job.check_chief_alive()
            return job.step() >= warmup

        wait_for(warm, 7200, f"step {warmup}", every=0.5)
        # (Each task is its own process group: a supervised trainer is two processes.)
        meter = _Cpu([p.pid for p in job.procs.values()])
        ps_groups = [job.procs[("ps", i)].pid for i in range(PS)]
        t0, s0 = time.monotonic(), job.step()
        cpu0, ps_cpu0 = meter.sample(), meter.seconds(ps_groups)

        def last() -> bool:
            meter.sample()
            return job.step() >= spec.training.steps

        # (The chief's last step and its final checkpoint: the CPU read just before.)
        wait_for(last, 7200, "the last step", every=0.5)
        seconds, cpu = time.monotonic() - t0, meter.sample() - cpu0
        ps_cpu = meter.seconds(ps_groups) - ps_cpu0
        done = job.wait_done(timeout=3600)
        progress = [e for e in job.events() if e["event"] == "progress"]
        peaks = [_peak_rss_bytes(job.procs[("ps", i)].pid) / 2**20 for i in range(PS)]
    rates = [p["examplesPerSecond"] for p in progress if p["step"] > s0]
    examples = (done["step"] - s0) * spec.training.batch_size_per_replica
    return {
        "examples_per_second": examples / seconds,
        # Examples per CPU-second of the job's processes: what other load on the machine
        # hardly moves (it slows the clock, not the work per example).
        "per_cpu_second": examples / cpu if cpu else 0.0,
        "ps_cpu_ms_per_1k": 1e6 * ps_cpu / examples if examples else 0.0,
        # The trainer's own figure (each report's interval), for comparison.
        "reported_median": statistics.median(rates) if rates else None,
        "hit_rate": _window_hit_rate(progress, warmup),
        "ps_peak_mib": [round(p) for p in peaks],
        "config": config,
    }


def _aucs(runs: list[dict[str, Any]]) -> str:
    return " ".join(f"{r['auc']:.4f}" for r in runs)


def _line(label: str, r: dict[str, Any]) -> str:
    hit = f", hit rate {r['hit_rate']:.3f}" if r["hit_rate"] is not None else ""
    quality = f", AUC {r['auc']:.4f} log-loss {r['logloss']:.4f}" if "auc" in r else ""
    return (
        f"# {label}: {r['examples_per_second']:,.0f} examples/s (reported median "
        f"{r['reported_median'] or 0:,.0f}; {r['per_cpu_second']:,.0f} per CPU-second; ps "
        f"{r['ps_cpu_ms_per_1k']:.0f} CPU-ms per 1,000 examples){hit}{quality}, ps peak RSS "
        f"{r['ps_peak_mib']} MiB, load {os.getloadavg()[0]:.1f}"
    )


def _remove_orphans(folder: Path, pgid: int) -> None:
    """Delete the shard files no process of the live ps (group ``pgid``) has open: the
    killed ps' (a SIGKILLed process never unlinks its scratch files; in a pod its emptyDir
    goes with it). They would take another copy of its shards on this machine's disk."""
    held = set()
    for pid in (p.name for p in Path("/proc").iterdir() if p.name.isdigit()):
        try:
            if os.getpgid(int(pid)) != pgid:
                continue
            held |= {os.readlink(f) for f in Path(f"/proc/{pid}/fd").iterdir()}
        except OSError:
            continue
    for f in folder.glob("*.rows"):
        if str(f) not in held:
            f.unlink()


def _check_restored(restored: dict[str, Any], piece_rows: int = 1 << 21) -> None:
    """Every variable of the ``restored`` event sums to what the checkpoint holds, the
    checkpoint read a slice at a time (a table larger than this process' share of RAM)."""
    import tensorflow as tf

    path = restored["path"]
    reader = tf.train.load_checkpoint(path)
    shapes, dtypes = reader.get_variable_to_shape_map(), reader.get_variable_to_dtype_map()
    for key, value in restored["digest"].items():
        name = f"{key}/.ATTRIBUTES/VARIABLE_VALUE"
        full, total = shapes[name], 0.0
        for first in range(0, full[0] if full else 1, piece_rows):
            n = min(piece_rows, full[0] - first) if full else 0
            spec = slice_spec(full, first, n) if full else ""
            piece = tf.raw_ops.RestoreV2(
                prefix=path, tensor_names=[name], shape_and_slices=[spec], dtypes=[dtypes[name]]
            )[0]
            total += float(tf.reduce_sum(tf.cast(piece, tf.float64)))
        assert abs(value - total) <= 1e-6 + 1e-6 * abs(total), (key, value, total)


def large_run(spec: Any, work: Path) -> dict[str, Any]:
    """Train ``spec`` with a checkpoint half-way and at the end, SIGKILL ps 0 after the
    first and resume from it: seconds of each stage, the restore's check, each ps' peak
    RSS (VmHWM) and the checkpoint's size."""
    every = spec.training.steps // 2
    config = trainer_config(
        spec, checkpoint_dir=work / "ckpt", every_steps=every, keep=1, watchdog_seconds=WATCHDOG
    )
    (work / "disk").mkdir(parents=True)
    env = {"ETJ_DISK_TABLES": str(work / "disk"), "ETJ_PROGRESS_SECONDS": "2"}
    with LocalJob(config, work, workers=WORKERS, ps=PS, env=env) as job:
        t0 = time.monotonic()
        job.start_all()

        def saved() -> bool:
            job.check_chief_alive()
            return any(e["event"] == "checkpoint" and e["step"] > 0 for e in job.events())

        wait_for(saved, 7200, "the first checkpoint", every=1)
        first = time.monotonic() - t0
        killed_peak = _peak_rss_bytes(job.procs[("ps", 0)].pid) / 2**20
        size = sum(f.stat().st_size for f in (work / "ckpt").glob("*.data-*"))
        job.kill("ps", 0, signal.SIGKILL)
        job.wait_exit("chief", 0, timeout=3600)
        _remove_orphans(work / "disk", job.procs[("ps", 1)].pid)
        t1 = time.monotonic()
        job.start("ps", 0)
        job.restart_workers()
        job.start("chief", 0)
        restored = dict(wait_for(lambda: job.last("restored"), 7200, "the restore", every=1))
        resumed = time.monotonic() - t1
        # The shard files after the restore (2 ps x the tables' shards when none leaked).
        files = list((work / "disk").glob("*.rows"))
        _check_restored(restored)
        done = job.wait_done(timeout=7200)
        peaks = [_peak_rss_bytes(job.procs[("ps", i)].pid) / 2**20 for i in range(PS)]
    return {
        "first_checkpoint_s": first,
        "restored_step": restored["step"],
        "restore_s": resumed,
        "step": done["step"],
        "seconds": time.monotonic() - t0,
        "ps_peak_mib": [round(killed_peak), *[round(p) for p in peaks]],
        "checkpoint_gib": size / 2**30,
        "files_after_restore": len(files),
        "files_gib": sum(f.stat().st_blocks * 512 for f in files if f.exists()) / 2**30,
    }


def large(args: argparse.Namespace, work: Path) -> None:
    """One disk run of a table >= 4x the ps memory limit (``--ps-memory``), checkpointed,
    a ps killed and restored: peak RSS of each ps against the limit."""
    limit = int(parse_quantity(args.ps_memory))
    rows = args.rows or int(4.2 * limit * PS / (DIM * 8)) + 1
    per_ps = rows * DIM * 8 / PS
    truth = world(rows)
    for i in range(WORKERS):
        write_columns(clicks(truth, args.examples // WORKERS, seed=1 + i), work / f"train-{i}.csv")
    del truth
    print(
        f"--large: user_id {rows:,} x {DIM} Adagrad, {per_ps / 2**20:,.0f} MiB of rows + slots "
        f"per ps ({per_ps / limit:.1f}x the {args.ps_memory} limit), cache {args.caches[0]:.0%}; "
        f"{args.steps} steps x {args.batch}, checkpoints at {args.steps // 2} and the end, ps 0 "
        f"killed after the first; load {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    spec = spec_of(rows, args.caches[0], args.steps, args.batch, str(work / "train-*.csv"))
    r = large_run(spec, work / "large")
    peak = max(r["ps_peak_mib"])
    print(
        f"# Succeeded at step {r['step']} in {r['seconds']:,.0f} s (first checkpoint after "
        f"{r['first_checkpoint_s']:,.0f} s, {r['checkpoint_gib']:.1f} GiB; ps 0 killed, restored "
        f"step {r['restored_step']} and resumed in {r['restore_s']:,.0f} s, digests as saved; "
        f"{r['files_after_restore']} shard files, {r['files_gib']:.1f} GiB, after it); "
        f"ps peak RSS {r['ps_peak_mib']} MiB (ps 0 before the kill, ps 0 restarted, ps 1), "
        f"load {os.getloadavg()[0]:.1f}"
    )
    print(
        f"peak ps RSS {peak} MiB of the {limit / 2**20:.0f} MiB limit "
        f"({'under' if peak * 2**20 < limit else 'OVER'}); table {per_ps / 2**20:,.0f} MiB per ps"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=None, help="default 1M (--large: 4.2x)")
    parser.add_argument("--steps", type=int, default=6000)
    parser.add_argument("--warmup", type=int, default=1000)
    parser.add_argument(
        "--examples", type=int, default=1_000_000, help="training rows written (read repeatedly)"
    )
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument(
        "--caches",
        type=lambda s: [float(x) for x in s.split(",")],
        default=[0.01, 0.05, 0.2],
        help="cache shares of the rows, comma-separated (--large: the first)",
    )
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--large", action="store_true", help="a table >= 4x --ps-memory a ps")
    parser.add_argument("--ps-memory", default="1280Mi", help="the ps memory limit (--large)")
    args = parser.parse_args()
    from etj_trainer.kernels import build

    build.build()
    work = Path(tempfile.mkdtemp(prefix="etj-disk-job-"))
    if args.large:
        try:
            large(args, work)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        return
    rows = args.rows or 1_000_000
    truth = world(rows)
    for i in range(WORKERS):
        write_columns(clicks(truth, args.examples // WORKERS, seed=1 + i), work / f"train-{i}.csv")
    write_columns(clicks(truth, 100_000, seed=9), work / "valid.csv")
    files, valid = str(work / "train-*.csv"), str(work / "valid.csv")
    print(
        f"user_id {rows:,} x {DIM} Adagrad ({rows * DIM * 8 / 2**20:.0f} MiB of rows + "
        f"slots) over {PS} ps, disk caches {', '.join(f'{c:.0%}' for c in args.caches)}; "
        f"{args.steps} steps x {args.batch} (rate past step {args.warmup}), {WORKERS} workers, "
        f"{args.examples:,} training rows; held-out 100,000; load {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    kinds: list[float | None] = [None, *args.caches]
    results: dict[float | None, list[dict[str, Any]]] = {k: [] for k in kinds}
    label = {k: "RAM" if k is None else f"disk {k:.0%}" for k in kinds}
    for n in range(args.repeat):
        # RAM, disks, then disks, RAM: a drift of the machine's load falls on both alike.
        for cache in kinds if n % 2 == 0 else kinds[::-1]:
            spec = spec_of(rows, cache, args.steps, args.batch, files)
            name = f"{label[cache].replace(' ', '-').replace('%', '')}-{n}"
            r = run(spec, work / name, args.warmup)
            ram_config = trainer_config(spec_of(rows, None, args.steps, args.batch, files, valid))
            labels, p = scored(ram_config, work / name / "ckpt")
            r["auc"], r["logloss"] = auc(labels, p), log_loss(labels, p)
            results[cache].append(r)
            print(_line(f"{n} {label[cache]}", r), flush=True)
            shutil.rmtree(work / name, ignore_errors=True)

    def median(kind: float | None, key: str) -> float:
        return statistics.median(r[key] for r in results[kind])

    ram = median(None, "examples_per_second") or float("nan")
    print(
        f"RAM: median {ram:,.0f} examples/s, {median(None, 'per_cpu_second'):,.0f} per "
        f"CPU-second, ps {median(None, 'ps_cpu_ms_per_1k'):.0f} CPU-ms per 1,000 examples, "
        f"AUC {_aucs(results[None])}"
    )
    for cache in args.caches:
        # Each pair's ratio (the runs of a pair are near each other in time).
        pairs = [
            d["examples_per_second"] / m["examples_per_second"]
            for d, m in zip(results[cache], results[None], strict=True)
            if m["examples_per_second"]
        ]
        hits = [r["hit_rate"] for r in results[cache] if r["hit_rate"] is not None]
        print(
            f"{label[cache]}: median {median(cache, 'examples_per_second'):,.0f} examples/s, "
            f"disk/RAM {median(cache, 'examples_per_second') / ram:.2f} (pairs "
            f"{' '.join(f'{x:.2f}' for x in pairs)}); per CPU-second disk/RAM "
            f"{median(cache, 'per_cpu_second') / (median(None, 'per_cpu_second') or float('nan')):.2f}; ps "
            f"{median(cache, 'ps_cpu_ms_per_1k'):.0f} CPU-ms per 1,000 examples; hit rate "
            f"{' '.join(f'{h:.3f}' for h in hits)}; AUC "
            f"{_aucs(results[cache])}"
        )
    print(f"load {os.getloadavg()[0]:.1f}")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
