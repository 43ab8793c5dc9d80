"""Over 10 GB of embedding tables + optimizer state on this machine: trained, checkpointed,
and restored after a ps is killed (issue #23, point 4).

One ParameterServer job of the bundled trainer (chief + 1 worker + 2 ps, real processes on
127.0.0.1 through ``tests/trainer/harness.py``, as ``trainer_throughput.py`` runs them):
two tables of ``--rows`` rows x ``--dim`` float32 with Adagrad (an accumulator the size of
each table), sharded over the ps by the operator's plan (``maxShardBytes`` 512Mi: no
variable near protobuf's 2 GB). Generated click data (``data.source: synthetic``, Zipf ids
scattered over every row of each table). The run:

1. waits until the machine has the memory and disk for it (polling ``MemAvailable``;
   other jobs share the box), then starts every task;
2. trains ``--steps`` steps, checkpointing at the last of them;
3. SIGKILLs ps 0 right after that checkpoint; the chief exits with the retryable code;
   restarts ps 0 and the chief, as the operator (and the harness's tests) do;
4. the chief restores the checkpoint (every shard and slot, one per ps at a time) and
   trains ``--after`` more steps, then checkpoints again and finishes.

Printed: rows, state bytes per ps (from the plan's shapes, checked against the
checkpoint's variable shapes), each task's peak RSS (VmHWM of its process group) and the
peak total RSS of the job (sampled every second), examples/s before the kill and after the
restore (the chief's progress records), startup time (start → first step: building and
initialising the tables on the ps), each checkpoint's save time (its first file seen →
its index written, polled every 0.2 s) and size on disk, restore time (ps restarted → first
step after the restore; the trainer's own measure of the restore beside it), wall time.
It then checks that training went on from the checkpoint's step, that the restored
variables sum to what the checkpoint holds (the harness's ``assert_restored_as_saved``, read
by slices) and that the loss
is finite and did not go back to where it started; the exit code is 1 if not. The sampler
kills the job if the machine's available memory falls under ``--floor-gib`` (it does not
take the box down for the other jobs). The checkpoint directory is removed at the end
unless ``--keep``.

``nice -n 10 .venv/bin/python benchmarks/large_state.py`` (defaults: 10.5M rows x 64 per
table, 600 + 400 steps). Not a test.

Results, dated: ``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# tests/trainer (harness) after the product: its etj_trainer/ holds the trainer's tests.
for _p in (ROOT / "tests" / "trainer", ROOT / "operator", ROOT / "trainer_image"):
    sys.path.insert(0, str(_p))

from harness import LocalJob, trainer_config, wait_for  # noqa: E402

from etj.api.spec import EmbeddingTrainingJobSpec  # noqa: E402
from etj_trainer import exitcodes  # noqa: E402
from trainer_throughput import group_memory  # noqa: E402

GIB = 1 << 30
BATCH = 1024
PS = 2


def gib(n: float) -> float:
    return round(n / GIB, 2)


def own_peak() -> int:
    """This process's VmHWM in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def meminfo(field: str) -> int:
    """A /proc/meminfo field in bytes."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(field)


def job_spec(rows: int, dim: int, steps: int) -> EmbeddingTrainingJobSpec:
    table = {"vocabularySize": rows, "dimension": dim}
    return EmbeddingTrainingJobSpec.model_validate(
        {
            "strategy": "ParameterServer",
            "replicas": {
                "chief": {"replicas": 1},
                "worker": {"replicas": 1},
                "ps": {"replicas": PS},
            },
            "model": {
                "embeddings": [{"name": "user_id", **table}, {"name": "item_id", **table}],
                "denseFeatures": 13,
                "hiddenUnits": [64],
            },
            "data": {"source": "synthetic", "synthetic": {"seed": 5}},
            "training": {
                "batchSizePerReplica": BATCH,
                "steps": steps,
                "optimizer": "adagrad",
                "learningRate": 0.05,
                "stepsPerExecution": 50,
            },
            # Each ps holds half the state; its request (shards x headroom + runtime) must
            # fit the budget or the plan is refused.
            "sharding": {"maxShardBytes": "512Mi", "defaultPsMemory": "8Gi"},
        }
    )


class Sampler(threading.Thread):
    """Every second: the job's total VmRSS (its peak kept) and the machine's available
    memory; below ``floor`` bytes available it kills the job (the box is shared)."""

    def __init__(self, job: LocalJob, floor: int):
        super().__init__(daemon=True)
        self.job, self.floor = job, floor
        self.peak_total = 0
        # The largest VmHWM seen of each start of each task ("ps0", "ps0 restarted"...):
        # a killed or finished process has no /proc left to read it from.
        self.peaks: dict[str, int] = {}
        self.min_available = meminfo("MemAvailable")
        self.tripped = False
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(1.0):
            self.sample_peaks()
            total = sum(
                sum(group_memory(p.pid)) for p in list(self.job.procs.values()) if p.poll() is None
            )
            self.peak_total = max(self.peak_total, total)
            available = meminfo("MemAvailable")
            self.min_available = min(self.min_available, available)
            if available < self.floor and not self.tripped:
                self.tripped = True
                print(f"!! only {gib(available)} GiB available: killing the job", flush=True)
                self.job.close()

    def sample_peaks(self) -> None:
        for (role, index), proc in list(self.job.procs.items()):
            if proc.poll() is not None:
                continue
            name = f"{role}{index}" + (" restarted" if self.job.starts[(role, index)] else "")
            peak = max(group_memory(proc.pid, "VmHWM"), default=0)
            self.peaks[name] = max(self.peaks.get(name, 0), peak)


class SaveWatch(threading.Thread):
    """When each checkpoint's first file appears in the directory and when its index is
    written (``ckpt-N.index``: the save is complete): the save time of step N."""

    def __init__(self, directory: Path):
        super().__init__(daemon=True)
        self.directory = directory
        self.first_seen: dict[int, float] = {}
        self.indexed: dict[int, float] = {}
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.2):
            self.poll()

    def poll(self) -> None:
        now = time.monotonic()
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            return
        for name in names:
            if not name.startswith("ckpt-"):
                continue
            digits = name[5:].split(".", 1)[0].split("_", 1)[0]
            if not digits.isdigit():
                continue
            step = int(digits)
            self.first_seen.setdefault(step, now)
            if name == f"ckpt-{step}.index":
                self.indexed.setdefault(step, now)

    def seconds(self, step: int) -> float | None:
        self.poll()  # the chief's event may be seen before this thread's next look
        if step in self.first_seen and step in self.indexed:
            return round(self.indexed[step] - self.first_seen[step], 1)
        return None


class EventWatch(threading.Thread):
    """The chief's event lines (every start of it), each with when it was first seen
    (polled every 0.25 s; the lines carry no time of their own)."""

    def __init__(self, job: LocalJob, began: float):
        super().__init__(daemon=True)
        self.job, self.began = job, began
        self.seen: list[tuple[float, int, dict[str, Any]]] = []  # (seconds, start, event)
        self._count: dict[int, int] = {}
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.25):
            self.poll()

    def poll(self) -> None:
        start = self.job.starts.get(("chief", 0), 0)
        events = self.job.events(start=start)
        now = round(time.monotonic() - self.began, 1)
        for e in events[self._count.get(start, 0) :]:
            self.seen.append((now, start, e))
        self._count[start] = len(events)

    def first(self, start: int, event: str) -> float | None:
        return next((t for t, n, e in self.seen if n == start and e["event"] == event), None)

    def rate(self, start: int, until: int) -> dict[str, Any]:
        """Examples/s of the chief's ``start``, from its first progress record to its last
        one up to step ``until`` (before a checkpoint: its save time left out)."""
        records = [
            (t, e["step"])
            for t, n, e in self.seen
            if n == start and e["event"] == "progress" and e["step"] <= until
        ]
        if len(records) < 2 or records[-1][0] <= records[0][0]:
            return {"examples_per_second": None, "records": records}
        (t0, s0), (t1, s1) = records[0], records[-1]
        return {
            "examples_per_second": round((s1 - s0) * BATCH / (t1 - t0)),
            "steps": [s0, s1],
            "seconds": round(t1 - t0, 1),
        }


def checkpoint_bytes(directory: Path, step: int) -> int:
    return sum(p.stat().st_size for p in directory.glob(f"ckpt-{step}.*"))


def checkpoint_state_bytes(path: str) -> dict[str, int]:
    """Bytes of every saved variable, from the checkpoint's shapes and dtypes, summed into
    tables, optimizer slots and the rest."""
    import tensorflow as tf

    reader = tf.train.load_checkpoint(path)
    dtypes = reader.get_variable_to_dtype_map()
    out = {"tables": 0, "slots": 0, "other": 0}
    for key, shape in reader.get_variable_to_shape_map().items():
        if not key.endswith("/.ATTRIBUTES/VARIABLE_VALUE"):
            continue
        n = math.prod(shape) * dtypes[key].size
        kind = (
            "slots"
            if key.startswith("slots/tables/")
            else "tables"
            if "embedding" in key or key.startswith("model/tables")
            else "other"
        )
        out[kind] += n
    return out


def restored_as_saved(restored: dict[str, Any], rows: int = 1 << 20) -> None:
    """``harness.assert_restored_as_saved`` by slices of ``rows`` rows: every variable of
    the ``restored`` event's digest sums to what the checkpoint holds (reading a 2.7 GB
    table whole, as float64 too, took this process to 8.4 GiB)."""
    import numpy as np
    import tensorflow as tf
    from tensorflow.python.ops import io_ops

    from etj_trainer.task.restore import VALUE_SUFFIX, slice_spec

    path = restored["path"]
    reader = tf.train.load_checkpoint(path)
    shapes, dtypes = reader.get_variable_to_shape_map(), reader.get_variable_to_dtype_map()
    assert restored["step"] == int(reader.get_tensor("step" + VALUE_SUFFIX))
    assert any(k.startswith("slots/tables/") for k in restored["digest"])
    for key, value in restored["digest"].items():
        name = key + VALUE_SUFFIX
        full = list(shapes[name])
        saved = 0.0
        for offset in range(0, full[0] if full else 1, rows):
            n = min(rows, full[0] - offset) if full else 0
            spec = slice_spec(full, offset, n) if full else ""
            piece = io_ops.restore_v2(path, [name], [spec], [dtypes[name]])[0]
            saved += float(np.sum(piece.numpy(), dtype=np.float64))
        assert abs(value - saved) <= 1e-6 + 1e-6 * abs(saved), (key, value, saved)


def progress(job: LocalJob, start: int | None = None) -> list[dict[str, Any]]:
    return [e for e in job.events(start=start) if e["event"] == "progress"]


def wait_resources(need_mem: int, need_disk: int, workdir: Path, timeout: float) -> None:
    def enough() -> bool:
        mem, disk = meminfo("MemAvailable"), shutil.disk_usage(workdir).free
        ok = mem >= need_mem and disk >= need_disk
        if not ok:
            print(
                f".. waiting: {gib(mem)} GiB memory available (need {gib(need_mem)}), "
                f"{gib(disk)} GiB disk free (need {gib(need_disk)})",
                flush=True,
            )
        return ok

    wait_for(enough, timeout, "memory and disk for the job", every=30)


def run(args: argparse.Namespace) -> int:
    workdir = Path(tempfile.mkdtemp(prefix="etj-bench-state-", dir=args.dir))
    total = args.steps + args.after
    spec = job_spec(args.rows, args.dim, total)
    config = trainer_config(
        spec,
        checkpoint_dir=workdir / "ckpt",
        every_steps=args.steps,
        keep=2,  # the restored checkpoint is still there to check against at the end
        watchdog_seconds=1800,
    )
    plan = config.shard_plan
    state = sum(t.bytes for t in plan.tables)
    # Every ps holds its share; the runtimes and the workers' pipelines ~4 GiB more. The
    # second save writes a whole checkpoint before the first one is deleted.
    wait_resources(state + 4 * GIB, int(2.2 * state), workdir, args.wait_minutes * 60)

    out: dict[str, Any] = {
        "rows_per_table": args.rows,
        "dimension": args.dim,
        "tables": len(plan.tables),
        "state_bytes": state,
        "state_gib": gib(state),
        "shards_per_table": [t.shards for t in plan.tables],
        "ps_state_bytes": [p.bytes for p in plan.ps],
        "ps_memory_request_gib": [gib(p.memory_request_bytes) for p in plan.ps],
        "load_average_at_start": os.getloadavg(),
    }
    print(json.dumps(out), flush=True)
    env = {"ETJ_PROGRESS_SECONDS": "3"}
    job = LocalJob(config, workdir, workers=1, ps=PS, env=env)
    sampler = Sampler(job, int(args.floor_gib * GIB))
    saves = SaveWatch(workdir / "ckpt")
    began = time.monotonic()
    watch = EventWatch(job, began)
    failures: list[str] = []
    try:
        sampler.start()
        saves.start()
        job.start_all()
        watch.start()
        # 1. Start and train to the checkpoint.
        first = wait_for(
            lambda: job.check_chief_alive() or progress(job), args.timeout, "the first step"
        )
        out["startup_seconds"] = round(time.monotonic() - began, 1)
        out["first_step_seen"] = first[0]["step"]

        def checkpointed() -> int:
            job.check_chief_alive()
            steps = [e["step"] for e in job.events() if e["event"] == "checkpoint"]
            return max(steps, default=0)

        saved = int(wait_for(checkpointed, args.timeout, f"the checkpoint of step {args.steps}"))
        out["trained_to_checkpoint_seconds"] = round(time.monotonic() - began, 1)
        # 2. Kill ps 0 at once (its peak first: a killed process has no /proc).
        sampler.sample_peaks()
        out["peak_rss_gib_before_kill"] = {k: gib(v) for k, v in sampler.peaks.items()}
        before = progress(job)
        watch.poll()
        out["examples_per_second_before_kill"] = watch.rate(0, saved - 1)
        out["loss_first_last_before_kill"] = [before[0].get("loss"), before[-1].get("loss")]
        out["checkpoint"] = {
            "step": saved,
            "save_seconds": saves.seconds(saved),
            "bytes_on_disk": checkpoint_bytes(workdir / "ckpt", saved),
        }
        job.kill("ps", 0, signal.SIGKILL)
        killed_at = job.step()  # the last progress record's (they come every 3 s)
        code = job.wait_exit("chief", 0, timeout=300)
        out["chief_exit_after_ps_kill"] = code
        if code != exitcodes.RETRYABLE:
            failures.append(f"the chief exited {code} after the ps kill, not retryable")
        # 3. Restart ps 0 and the chief, as the operator does.
        restart = time.monotonic()
        job.start("ps", 0)
        job.start("chief", 0)
        restored = wait_for(lambda: job.last("restored"), args.timeout, "the chief to restore")
        restored_at = time.monotonic()
        after_restore = wait_for(
            lambda: (
                job.check_chief_alive()
                or [r for r in progress(job) if r["step"] > restored["step"]]
            ),
            args.timeout,
            "the first step after the restore",
        )
        out["restore"] = {
            "progress_step_at_kill": killed_at,
            "restored_step": restored["step"],
            "trainer_restore_seconds": restored.get("seconds"),
            "ps_restart_to_restored_event_seconds": round(restored_at - restart, 1),
            "ps_restart_to_first_step_seconds": round(time.monotonic() - restart, 1),
            "first_step_after": after_restore[0]["step"],
        }
        if restored["step"] < saved:
            failures.append(f"restored step {restored['step']} < checkpoint step {saved}")
        # 4. Train on to the end (a second checkpoint at the last step).
        done = job.wait_done(timeout=args.timeout)
        out["finished_step"] = done["step"]
        if done["step"] != total:
            failures.append(f"finished at step {done['step']}, not {total}")
        after = progress(job)
        watch.poll()
        out["examples_per_second_after_restore"] = watch.rate(1, total - 1)
        # When each chief first said what (seconds since the start; the restarted chief's
        # since the start too): tables built (placement), restored, first step, checkpoints.
        out["chief_timeline_seconds"] = {
            f"{name}{' (restarted)' if n else ''}": watch.first(n, name)
            for n in (0, 1)
            for name in ("connecting", "placement", "restored", "start", "progress", "checkpoint")
            if watch.first(n, name) is not None
        }
        out["ps_restarted_at_seconds"] = round(restart - began, 1)
        out["loss_first_last_after_restore"] = [after[0].get("loss"), after[-1].get("loss")]
        losses = [r["loss"] for r in before + after if r.get("loss") is not None]
        if not losses or not all(math.isfinite(x) for x in losses):
            failures.append(f"a loss is not finite: {losses}")
        elif after[-1]["loss"] > before[0]["loss"] + 0.02:
            failures.append(
                f"loss after the restore {after[-1]['loss']} above the first {before[0]['loss']}"
            )
        out["final_checkpoint"] = {
            "step": total,
            "save_seconds": saves.seconds(total),
            "bytes_on_disk": checkpoint_bytes(workdir / "ckpt", total),
        }
        sampler.sample_peaks()
        out["peak_rss_gib"] = {k: gib(v) for k, v in sampler.peaks.items()}
        out["peak_total_rss_gib"] = gib(sampler.peak_total)
        out["min_available_gib"] = gib(sampler.min_available)
        out["wall_seconds"] = round(time.monotonic() - began, 1)
        out["load_average_at_end"] = os.getloadavg()
        job.close()
        # The restored variables are what the checkpoint of the saved step holds.
        shapes = checkpoint_state_bytes(restored["path"])
        out["checkpoint_state_bytes"] = shapes
        if shapes["tables"] + shapes["slots"] != state:
            failures.append(f"checkpoint state {shapes} != the plan's {state} bytes")
        if args.verify:
            verify = time.monotonic()
            try:
                restored_as_saved(restored)
            except AssertionError as e:
                failures.append(f"restored != saved: {e}")
            out["verify_seconds"] = round(time.monotonic() - verify, 1)
            # (this process's peak: the job is gone; it reads a slice at a time)
            out["verify_peak_rss_gib"] = gib(own_peak())
    except AssertionError as e:
        failures.append(str(e)[:3000])
    finally:
        sampler.done.set()
        saves.done.set()
        watch.done.set()
        job.close()
        if sampler.tripped:
            failures.append("killed: the machine ran short of memory")
        print(json.dumps(out, indent=1), flush=True)
        if args.keep:
            print(f"kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    for f in failures:
        print(f"FAILED: {f}")
    print("OK" if not failures else "FAILED")
    return 1 if failures else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=10_500_000, help="rows of each of 2 tables")
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--steps", type=int, default=600, help="steps before the checkpoint")
    parser.add_argument("--after", type=int, default=400, help="steps after the restore")
    parser.add_argument("--dir", default=None, help="parent of the work directory (default /tmp)")
    parser.add_argument("--keep", action="store_true", help="keep the checkpoints and logs")
    parser.add_argument("--no-verify", dest="verify", action="store_false")
    parser.add_argument("--timeout", type=float, default=3600, help="per phase, seconds")
    parser.add_argument("--wait-minutes", type=float, default=30)
    parser.add_argument("--floor-gib", type=float, default=1.5)
    return run(parser.parse_args())


if __name__ == "__main__":
    sys.exit(main())
