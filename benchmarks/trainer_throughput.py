"""Training throughput of the etj trainer, side by side with its baselines, on one model.

Three runs of the same CTR model and synthetic data (Zipf ids, batch 1024 per worker):

- ``single``: one process, no strategy, the trainer's own raw-TF training function in
  calls of 50 steps;
- ``naive``: Keras 3 ``Embedding`` layers + ``fit`` (it reads whole tables every step);
- ``ps``: etj's ParameterServer trainer, chief + 2 workers + 2 ps as real processes on
  127.0.0.1 (``python -m etj_trainer``, bound to cores as ``etj run`` binds them), tables
  sharded per the operator's plan (``ETJ_BENCH_MAX_SHARD``, default 128Mi), the job's
  ``stepsPerExecution`` left out as a user would (chunks sized by time; ``--spe N`` sets it).

Prints examples/s of each, ``ps/single=<ratio> ps/naive=<ratio>`` and the CPU efficiency
(examples per CPU-second, ps over single): on a shared machine the wall-clock ratio moves
with the other load (one process gets less of a busy machine than five do), the CPU ratio
hardly does, so read the two together. Each run is its own process (a fresh TensorFlow,
both cores); ``--repeat`` alternates them and keeps the best.

    .venv/bin/python benchmarks/trainer_throughput.py [--quick] [--seconds S] [--repeat N]
    .venv/bin/python benchmarks/trainer_throughput.py --quick --sets 3   # issue #23's measure
    .venv/bin/python benchmarks/trainer_throughput.py --dynamic --repeat 3 --seconds 30
    .venv/bin/python benchmarks/trainer_throughput.py --large-table [--large-steps N]

``--quick`` keeps the whole run within ~10 minutes; ``--sets N`` runs N comparisons in a row
(``naive`` in the first only) and prints each ratio, their median and the load average.
``--dynamic`` runs the PS job with ``user_id`` and ``item_id`` as dynamic tables (1,000
fallback rows + the rest as pool) against hashed ones, alternating, and prints each median,
``dynamic/hashed`` and each task's CPU-seconds per million examples. ``--large-table``
instead trains and checkpoints a table over 2 GB (10M x 64 float32 with Adagrad, sharded over
4 ps; ``ETJ_BENCH_LARGE_MAX_SHARD``, default 512Mi).

Not a test: nothing is asserted. Results, dated: ``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# tests/trainer (harness, zoo) after the product: its etj_trainer/ holds the trainer's tests.
for _p in (ROOT / "tests" / "trainer", ROOT / "operator", ROOT / "trainer_image"):
    sys.path.insert(0, str(_p))

from harness import LocalJob, trainer_config, trainer_env, wait_for  # noqa: E402

from etj.api.progress import DYNAMIC_TABLES_KEY  # noqa: E402
from etj.api.spec import EmbeddingTrainingJobSpec  # noqa: E402

BATCH = 1024
LEARNING_RATE = 0.05


# ``--dynamic``: user_id and item_id as dynamic tables of as many rows (fallback + pool).
DYNAMIC_FALLBACK = 1000


def _id_table(name: str, rows: int, dynamic: bool, **extra: Any) -> dict[str, Any]:
    table = {"name": name, "vocabularySize": rows, "dimension": 32, **extra}
    if dynamic:
        table["vocabularySize"] = DYNAMIC_FALLBACK
        table["dynamic"] = {"capacity": rows - DYNAMIC_FALLBACK, "evictAfterSteps": 2000}
    return table


def model_doc(dynamic: bool = False) -> dict[str, Any]:
    return {
        "embeddings": [
            _id_table("user_id", 1_000_000, dynamic),
            _id_table("item_id", 200_000, dynamic, idsPerExample=2),
            {"name": "category", "vocabularySize": 1000, "dimension": 16},
        ],
        "denseFeatures": 13,
        "hiddenUnits": [128, 64],
    }


def ps_job_spec(
    model: dict[str, Any], batch: int, steps: int, spe: int | None = None, **extra: Any
) -> EmbeddingTrainingJobSpec:
    """The benchmarks' ParameterServer job (this file's and ``peers.py``'s): chief + 2
    workers + 2 ps, ``model`` on the synthetic stream (seed 3), Adagrad at 0.05, ``batch``
    per worker, ``steps`` in all; ``spe`` None leaves ``stepsPerExecution`` out (the
    product's default: under ParameterServer, chunks sized by time); ``extra``: more
    top-level fields of the spec (``sharding``)."""
    return EmbeddingTrainingJobSpec.model_validate(
        {
            "strategy": "ParameterServer",
            "replicas": {
                "chief": {"replicas": 1},
                "worker": {"replicas": 2},
                "ps": {"replicas": 2},
            },
            "model": model,
            "data": {"source": "synthetic", "synthetic": {"seed": 3}},
            "training": {
                "batchSizePerReplica": batch,
                "steps": steps,
                "optimizer": "adagrad",
                "learningRate": LEARNING_RATE,
                **({} if spe is None else {"stepsPerExecution": spe}),
            },
            **extra,
        }
    )


def job_spec(steps: int, spe: int | None, dynamic: bool = False) -> EmbeddingTrainingJobSpec:
    """This benchmark's job, its tables sharded per ``ETJ_BENCH_MAX_SHARD``."""
    sharding = {"maxShardBytes": os.environ.get("ETJ_BENCH_MAX_SHARD", "128Mi")}
    return ps_job_spec(model_doc(dynamic), BATCH, steps, spe, sharding=sharding)


# --- the runs, each in its own process ---------------------------------------------------


def run_single(seconds: float) -> tuple[float, float]:
    """The trainer's training function in one process (default strategy)."""
    import tensorflow as tf

    from etj_trainer.data.pipeline import make_dataset
    from etj_trainer.task.state import TrainingState

    config = trainer_config(job_spec(10**9, 50))
    state = TrainingState(config, tf.distribute.get_strategy())
    it = iter(make_dataset(config.model, config.data, BATCH))
    chunk = tf.constant(50, tf.int64)
    state.train_chunk(it, chunk)  # trace and warm up
    steps, start, cpu0 = 0, time.perf_counter(), _own_cpu()
    while time.perf_counter() - start < seconds:
        loss, *_ = state.train_chunk(it, chunk)
        steps += 50
    float(loss)
    examples = steps * BATCH
    return examples / (time.perf_counter() - start), examples / (_own_cpu() - cpu0)


def _own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _processes() -> Iterator[tuple[int, list[str]]]:
    """Every live process: its pid and the fields of /proc/<pid>/stat after its name
    ([1] parent pid, [2] process group, [11] and [12] user and system ticks)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        yield int(entry), fields


def _tree_cpu(pids: list[int]) -> float:
    """CPU seconds of processes and their children (a supervised trainer is two)."""
    tick = os.sysconf("SC_CLK_TCK")
    wanted, total = set(pids), 0.0
    for pid, fields in _processes():
        if pid in wanted or int(fields[1]) in wanted:
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


def run_naive(seconds: float) -> float:
    """Keras 3: one Embedding layer per table, Dense tower, ``fit`` on the same data."""
    import keras
    import tensorflow as tf

    from etj_trainer.data.pipeline import make_dataset

    config = trainer_config(job_spec(10**9, 50))
    spec = config.model
    inputs, pooled = {}, []
    for t in spec.embeddings:
        inputs[t.name] = keras.Input((t.ids_per_example,), dtype="int64", name=t.name)
        vectors = keras.layers.Embedding(t.vocabulary_size, t.dimension)(inputs[t.name])
        pooled.append(keras.ops.mean(vectors, axis=1))
    inputs["dense_input"] = keras.Input((spec.dense_features,), name="dense_input")
    x = keras.layers.Concatenate()([*pooled, inputs["dense_input"]])
    for units in spec.hidden_units:
        x = keras.layers.Dense(units, activation="relu")(x)
    model = keras.Model(inputs, keras.layers.Dense(1, name="logit")(x))
    model.compile(
        optimizer=keras.optimizers.Adagrad(0.05),
        loss=keras.losses.BinaryCrossentropy(from_logits=True),
    )
    names = {t.name: t.name for t in spec.embeddings} | {"dense": "dense_input"}
    ds = make_dataset(spec, config.data, BATCH).map(
        lambda b: ({names[k]: v for k, v in b.items() if k in names}, b["label"])
    )
    model.fit(ds, steps_per_epoch=5, epochs=1, verbose=0)  # trace and warm up
    steps_per_epoch = 20
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        model.fit(ds, steps_per_epoch=steps_per_epoch, epochs=1, verbose=0)
        steps += steps_per_epoch
    del tf
    return steps * BATCH / (time.perf_counter() - start)


def run_ps(seconds: float, spe: int | None, dynamic: bool = False) -> tuple[float, dict[str, Any]]:
    """etj's PS trainer on chief + 2 workers + 2 ps; examples/s of the steady state."""
    workdir = Path(tempfile.mkdtemp(prefix="etj-bench-ps-"))
    config = trainer_config(job_spec(10**9, spe, dynamic))
    job = LocalJob(config, workdir, workers=2, ps=2, env={"ETJ_PROGRESS_SECONDS": "2"})
    try:
        job.start_all()

        def stepping() -> bool:
            job.check_chief_alive()
            return job.step() > 0

        wait_for(stepping, 300, "the PS job's first step", every=0.5)
        pids = [p.pid for p in job.procs.values()]
        roles = {k: [p.pid] for k, p in job.procs.items()}
        first = (time.monotonic(), job.step(), _tree_cpu(pids))
        role_cpu = {k: _tree_cpu(v) for k, v in roles.items()}
        time.sleep(seconds)  # the job runs; the measurement is its own step counter
        job.check_chief_alive()
        last = (time.monotonic(), job.step(), _tree_cpu(pids))
        role_cpu = {k: _tree_cpu(v) - role_cpu[k] for k, v in roles.items()}
        rates = [e["examplesPerSecond"] for e in job.events() if e["event"] == "progress"][2:]
        examples = (last[1] - first[1]) * BATCH
        eps = examples / (last[0] - first[0])
        return eps, {
            "reported_median": statistics.median(rates) if rates else None,
            "per_cpu_second": examples / (last[2] - first[2]),
            "plan": [(t.name, t.shards, t.ps_of_shard) for t in config.shard_plan.tables],
            "load": os.getloadavg()[0],
            # CPU-seconds per million examples, by task: where the time goes.
            "cpu_per_million": {
                f"{role}{index}": round(cpu * 1e6 / examples, 1)
                for (role, index), cpu in sorted(role_cpu.items())
            },
            "dynamic": (job.last("progress") or {}).get(DYNAMIC_TABLES_KEY),
        }
    finally:
        job.close()
        shutil.rmtree(workdir, ignore_errors=True)


def group_memory(pgid: int, field: str = "VmRSS") -> list[int]:
    """``field`` of /proc/<pid>/status (VmRSS, VmHWM...) in bytes, for each process of a
    task's process group (a supervised trainer is two)."""
    out = []
    for pid, fields in _processes():
        if int(fields[2]) != pgid:
            continue
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        out += [int(x.split()[1]) * 1024 for x in status.splitlines() if x.startswith(field + ":")]
    return out


def _peak_rss_bytes(pgid: int) -> int:
    """The largest peak resident set (VmHWM) in a task's process group (trainer + child)."""
    return max(group_memory(pgid, "VmHWM"), default=0)


def _first_last(events: list[dict[str, Any]], key: str) -> tuple[Any, Any] | None:
    return (events[0].get(key), events[-1].get(key)) if events else None


def run_large_table(steps: int) -> dict[str, Any]:
    """A >2 GB table (10M x 64 float32 + Adagrad slot) over 4 ps: train and checkpoint,
    then resume after a chief kill and after a ps kill; the ps's peak memory each time."""
    workdir = Path(tempfile.mkdtemp(prefix="etj-bench-large-"))
    spec = EmbeddingTrainingJobSpec.model_validate(
        {
            "strategy": "ParameterServer",
            "replicas": {
                "chief": {"replicas": 1},
                "worker": {"replicas": 2},
                "ps": {"replicas": 4},
            },
            "model": {
                "embeddings": [{"name": "user_id", "vocabularySize": 10_000_000, "dimension": 64}],
                "denseFeatures": 13,
                "hiddenUnits": [64],
            },
            "training": {
                "batchSizePerReplica": 1024,
                "steps": steps,
                "optimizer": "adagrad",
                "learningRate": 0.05,
                "stepsPerExecution": 50,
            },
            "sharding": {
                "maxShardBytes": os.environ.get("ETJ_BENCH_LARGE_MAX_SHARD", "512Mi"),
                "defaultPsMemory": "4Gi",
            },
        }
    )
    config = trainer_config(
        spec, checkpoint_dir=workdir / "ckpt", every_steps=steps, keep=2, watchdog_seconds=900
    )
    table = config.shard_plan.tables[0]
    job = LocalJob(config, workdir, workers=2, ps=4, env={"ETJ_PROGRESS_SECONDS": "5"})
    started = time.monotonic()
    try:
        job.start_all()
        done = job.wait_done(timeout=3600)
        trained = time.monotonic() - started
        ckpt_bytes = sum(p.stat().st_size for p in (workdir / "ckpt").glob("ckpt-*"))
        progress = [e for e in job.events() if e["event"] == "progress"]
        peaks_trained = [_peak_rss_bytes(job.procs[("ps", i)].pid) for i in range(4)]
        gib = lambda b: round(b / 2**30, 2)  # noqa: E731
        result: dict[str, Any] = {
            "table_bytes_with_slots": table.bytes,
            "shards": table.shards,
            "ps_of_shard": table.ps_of_shard,
            "steps": done["step"],
            "train_and_checkpoint_seconds": round(trained, 1),
            "checkpoint_bytes": ckpt_bytes,
            "loss_first_last": _first_last(progress, "loss"),
            "examples_per_second_last": progress[-1].get("examplesPerSecond") if progress else None,
            "ps_held_gib": gib(table.bytes / 4),
            "ps_memory_request_gib": [gib(p.memory_request_bytes) for p in config.shard_plan.ps],
            "ps_peak_rss_gib_trained": [gib(b) for b in peaks_trained],
        }
        # Two resumes, each to ``steps`` more: a chief kill (a new chief restores into the
        # running ps), then a ps kill (every ps and the chief restart; restore into new ps).
        for phase, restart in (("chief_kill", ["chief"]), ("ps_kill", ["ps", "chief"])):
            job.set_steps(done["step"] + steps)
            began = time.monotonic()
            if "ps" in restart:
                for i in range(4):
                    job.kill("ps", i)
                    job.start("ps", i)
            job.start("chief", 0)
            done = job.wait_done(timeout=3600)
            restored = job.last("restored") or {}
            after = [e for e in job.events() if e["event"] == "progress"]
            result[phase] = {
                "restored_step": restored.get("step"),
                "restore_seconds": restored.get("seconds"),
                "finished_step": done["step"],
                "loss_first_last": _first_last(after, "loss"),
                "seconds": round(time.monotonic() - began, 1),
                "ps_peak_rss_gib": [
                    gib(_peak_rss_bytes(job.procs[("ps", i)].pid)) for i in range(4)
                ],
            }
        return result
    finally:
        job.close()
        shutil.rmtree(workdir, ignore_errors=True)


# --- the driver -------------------------------------------------------------------------


def _in_subprocess(mode: str, seconds: float, extra: list[str], env: dict[str, str]) -> Any:
    out = subprocess.run(
        [sys.executable, __file__, "--run", mode, "--seconds", str(seconds), *extra],
        env=trainer_env(env),
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if out.returncode != 0:
        raise RuntimeError(f"{mode} run failed:\n{out.stdout[-3000:]}\n{out.stderr[-20000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _spe_args(spe: int | None) -> list[str]:
    return [] if spe is None else ["--spe", str(spe)]


def dynamic_vs_hashed(seconds: float, spe: int | None, repeat: int) -> int:
    """The PS run with hashed tables and with dynamic ones, alternating, ``repeat`` times:
    the median examples/s of each and their ratio (goal: dynamic / hashed >= 0.7)."""
    rates: dict[str, list[float]] = {"hashed": [], "dynamic": []}
    for _ in range(repeat):
        for kind in rates:
            extra = _spe_args(spe) + (["--dynamic"] if kind == "dynamic" else [])
            eps, info = _in_subprocess("ps", seconds, extra, {})
            rates[kind].append(eps)
            print(
                f"etj PS {kind:<8}: {eps:10,.0f} examples/s "
                f"({info['per_cpu_second']:,.0f} per CPU-second), load {info['load']:.1f}, "
                f"CPU-s per 1M examples {info['cpu_per_million']}"
                + (f", tables {info['dynamic']}" if info["dynamic"] else ""),
                flush=True,
            )
    hashed, dynamic = (statistics.median(rates[k]) for k in ("hashed", "dynamic"))
    print(
        f"median of {repeat}: hashed {hashed:,.0f} dynamic {dynamic:,.0f} examples/s; "
        f"dynamic/hashed={dynamic / hashed:.2f} (load average {os.getloadavg()[0]:.1f})"
    )
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--quick", action="store_true", help="shorter measurements (~10 min in all)"
    )
    parser.add_argument("--seconds", type=float, default=None, help="measurement time per run")
    parser.add_argument(
        "--spe", type=int, default=None, help="stepsPerExecution of the PS run (default: left out)"
    )
    parser.add_argument(
        "--repeat", type=int, default=2, help="alternating single/ps runs (best kept)"
    )
    parser.add_argument(
        "--sets",
        type=int,
        default=1,
        help="whole comparisons in a row; prints each ps/single, their median and the load",
    )
    parser.add_argument("--large-table", action="store_true", help="the >2 GB table run instead")
    parser.add_argument("--large-steps", type=int, default=2000)
    parser.add_argument(
        "--dynamic",
        action="store_true",
        help="the PS run with dynamic user_id/item_id tables vs hashed ones (median of --repeat)",
    )
    parser.add_argument("--run", choices=["single", "naive", "ps"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    seconds = args.seconds or (30.0 if args.quick else 90.0)
    if args.run == "single":
        print(json.dumps(run_single(seconds)))
        return 0
    if args.run == "naive":
        print(json.dumps(run_naive(seconds)))
        return 0
    if args.run == "ps":
        print(json.dumps(run_ps(seconds, args.spe, args.dynamic)))
        return 0
    if args.dynamic:
        return dynamic_vs_hashed(seconds, args.spe, args.repeat)
    if args.large_table:
        print(json.dumps(run_large_table(args.large_steps), indent=1))
        return 0
    ratios = []
    for n in range(args.sets):
        if args.sets > 1:
            print(f"set {n + 1} of {args.sets}, load average {_load()}", flush=True)
        ratios.append(compare(seconds, args.spe, args.repeat, naive=n == 0))
    if args.sets > 1:
        print(
            f"sets: ps/single {', '.join(f'{r:.3f}' for r in ratios)}; "
            f"median {statistics.median(ratios):.3f}; load average {_load()}"
        )
    return 0


def _load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def compare(seconds: float, spe: int | None, repeat: int, naive: bool) -> float:
    """``single`` and ``ps`` alternating ``repeat`` times (and ``naive`` once): prints the
    best of each and returns ps/single."""
    # Best of ``repeat`` alternating runs: other load on the machine only ever slows a run.
    singles, pss, info = [], [], {}
    cpu_single, cpu_ps = [], []
    for _ in range(repeat):
        eps, per_cpu = _in_subprocess("single", seconds, [], {})
        singles.append(eps)
        cpu_single.append(per_cpu)
        print(
            f"single-process raw TF : {eps:12,.0f} examples/s ({per_cpu:,.0f} per CPU-second)",
            flush=True,
        )
        eps, info = _in_subprocess("ps", seconds, _spe_args(spe), {})
        pss.append(eps)
        cpu_ps.append(info["per_cpu_second"])
        print(
            f"etj PS chief+2w+2ps   : {eps:12,.0f} examples/s ({info['per_cpu_second']:,.0f} per CPU-second)",
            flush=True,
        )
    single, ps = max(singles), max(pss)
    print(f"best: single {single:,.0f}  ps {ps:,.0f} examples/s; plan {info['plan']}")
    # Examples per CPU-second hardly depend on other load on the machine: a cross-check.
    print(f"CPU efficiency ps/single={max(cpu_ps) / max(cpu_single):.2f}")
    if naive:
        # Keras 3 must be Keras 3 here: no legacy switch.
        slow = _in_subprocess("naive", seconds, [], {"TF_USE_LEGACY_KERAS": "0"})
        print(f"naive Keras 3 loop    : {slow:12,.0f} examples/s", flush=True)
        print(f"ps/single={ps / single:.2f} ps/naive={ps / slow:.2f}", flush=True)
    else:
        print(f"ps/single={ps / single:.2f}", flush=True)
    return ps / single


if __name__ == "__main__":
    sys.exit(main())
