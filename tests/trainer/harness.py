"""Test harness: real trainer processes (``python -m etj_trainer``) on 127.0.0.1.

A ``LocalJob`` starts every task of a job with its own TF_CONFIG on free loopback ports,
captures each process's output in a log file, reads the chief's JSON event lines, and
kills every process it started when it is closed (tests use it as a context manager, so
that happens even when an assertion fails). Waiting is always polling a condition with a
deadline, never a bare sleep.

Used by the trainer tests and by ``benchmarks/trainer_throughput.py``. Importing it never
imports TensorFlow: only the checks that read a checkpoint offline do
(``assert_restored_as_saved``, ``saved_invariants``).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from etj.api.spec import EmbeddingTrainingJobSpec
from etj.api.trainer import TrainerCheckpoint, TrainerConfig, TrainerExport
from etj.core.planner import build_plan
from etj.local.launch import bind_to, machine_share
from etj_testcluster.waiting import wait_exit, wait_for

ROOT = Path(__file__).resolve().parents[2]
# The product, then tests/trainer: the scripts zoo runs with `python -P` (not their own
# folder first on the path) import each other from there.
PYTHONPATH = os.pathsep.join(
    [str(ROOT / "operator"), str(ROOT / "trainer_image"), str(ROOT / "tests" / "trainer")]
)


def free_ports(n: int) -> list[int]:
    """``n`` distinct free TCP ports on 127.0.0.1."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def adagrad_training(steps: int, batch: int) -> dict[str, Any]:
    """The ``training`` of the trainer's process tests: ``steps`` of Adagrad at 0.1, ten
    steps per execution (a ParameterServer chunk), ``batch`` examples per replica."""
    return {
        "batchSizePerReplica": batch,
        "steps": steps,
        "optimizer": "adagrad",
        "learningRate": 0.1,
        "stepsPerExecution": 10,
    }


def job_spec(**overrides: Any) -> EmbeddingTrainingJobSpec:
    """A small job spec (camelCase overrides merged at the top level)."""
    doc: dict[str, Any] = {
        "strategy": "ParameterServer",
        "replicas": {"chief": {"replicas": 1}, "worker": {"replicas": 2}, "ps": {"replicas": 2}},
        "model": {
            "embeddings": [
                {"name": "user_id", "vocabularySize": 5000, "dimension": 8},
                {"name": "item_id", "vocabularySize": 2000, "dimension": 8, "idsPerExample": 3},
            ],
            "denseFeatures": 4,
            "hiddenUnits": [16],
        },
        "data": {"source": "synthetic", "synthetic": {"seed": 1}},
        "training": {
            "batchSizePerReplica": 256,
            "steps": 400,
            "optimizer": "adagrad",
            "learningRate": 0.1,
            "stepsPerExecution": 10,
        },
        "sharding": {"maxShardBytes": "64Ki"},
    }
    doc.update(overrides)
    return EmbeddingTrainingJobSpec.model_validate(doc)


def trainer_config(
    spec: EmbeddingTrainingJobSpec,
    checkpoint_dir: Path | None = None,
    every_steps: int = 100,
    keep: int = 3,
    export_dir: Path | None = None,
    watchdog_seconds: int = 120,
    export: TrainerExport | None = None,
    tensorboard_dir: Path | None = None,
) -> TrainerConfig:
    plan = build_plan(spec)
    return TrainerConfig(
        job_name="test",
        strategy=plan.strategy,
        model=spec.model,
        data=spec.data,
        training=spec.training,
        checkpoint=(
            TrainerCheckpoint(directory=str(checkpoint_dir), every_steps=every_steps, keep=keep)
            if checkpoint_dir
            else None
        ),
        shard_plan=plan,
        metrics_port=9102,
        export_dir=str(export_dir) if export_dir else None,
        watchdog_seconds=watchdog_seconds,
        export=export,
        tensorboard_dir=str(tensorboard_dir) if tensorboard_dir else None,
    )


def trainer_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = PYTHONPATH + (
        os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else ""
    )
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env["TF_USE_LEGACY_KERAS"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    env["ETJ_PROGRESS_SECONDS"] = env.get("ETJ_PROGRESS_SECONDS", "1")
    env.update(extra or {})
    return env


def read_events(path: Path) -> list[dict[str, Any]]:
    """The JSON event lines a trainer wrote to its log."""
    events = []
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return []
    for line in text.splitlines():
        if line.startswith('{"') and '"event"' in line:
            with contextlib.suppress(json.JSONDecodeError):
                events.append(json.loads(line))
    return events


def assert_restored_as_saved(restored: dict[str, Any]) -> None:
    """Every variable of a ``restored`` event — tables, slots, dense — sums to what the
    checkpoint file holds (whatever the sharding at save and at restore)."""
    import numpy as np
    import tensorflow as tf

    reader = tf.train.load_checkpoint(restored["path"])
    assert restored["step"] == int(reader.get_tensor("step/.ATTRIBUTES/VARIABLE_VALUE"))
    digest = restored["digest"]
    assert any(k.startswith("slots/tables/") for k in digest)
    for key, value in digest.items():
        saved = reader.get_tensor(f"{key}/.ATTRIBUTES/VARIABLE_VALUE").astype(np.float64).sum()
        assert abs(value - saved) <= 1e-6 + 1e-6 * abs(saved), (key, value, saved)


def saved_invariants(path: str, shards: int) -> dict[str, int]:
    """Check a saved dynamic table offline, shard by shard (index against row state, every
    key in the shard its key routes to); its totals."""
    import numpy as np
    import tensorflow as tf

    reader = tf.train.load_checkpoint(path)
    total = {"used": 0, "admitted": 0, "evicted": 0, "capacity": 0}
    seen: set[int] = set()
    for i in range(shards):
        base = f"model/dynamic/user_id/shards/{i}"

        def get(name: str, base: str = base) -> Any:
            return reader.get_tensor(f"{base}/{name}")

        keys, slots = get("index/.ATTRIBUTES/table-keys"), get("index/.ATTRIBUTES/table-values")
        row_key = get("row_key/.ATTRIBUTES/VARIABLE_VALUE")
        last_seen = get("last_seen/.ATTRIBUTES/VARIABLE_VALUE")
        candidates = get("candidate_count/.ATTRIBUTES/table-keys")
        capacity = len(row_key)
        assert len(set(keys.tolist())) == len(keys), "a key twice in one index"
        assert len(set(slots.tolist())) == len(slots), "two keys share a row"
        assert len(keys) <= capacity and np.all((slots >= 0) & (slots < capacity))
        assert np.array_equal(row_key[slots], keys)
        assert set(np.nonzero(last_seen != -1)[0].tolist()) == set(slots.tolist())
        assert np.all(keys % shards == i) and np.all(candidates % shards == i)
        assert not set(candidates.tolist()) & set(keys.tolist())
        assert not seen & set(keys.tolist()), "a key in two shards"
        seen |= set(keys.tolist())
        admitted = int(get("admitted/.ATTRIBUTES/VARIABLE_VALUE"))
        evicted = int(get("evicted/.ATTRIBUTES/VARIABLE_VALUE"))
        assert admitted - evicted == len(keys)
        total["used"] += len(keys)
        total["admitted"] += admitted
        total["evicted"] += evicted
        total["capacity"] += capacity
    return total


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# A task seen with every thread asleep in this many samples in a row is at rest (a server
# between closures, not one starting: an import runs or waits on the disk, never sleeps
# that long); busy, with a thread running or runnable in this many in a row.
REST_SAMPLES = 5
BUSY_SAMPLES = 3
GROUP_SECONDS = 0.5


def _group_pids(pgid: int) -> list[int]:
    """The processes of process group ``pgid`` (a supervised trainer and its child)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
            if int(fields[2]) == pgid:  # after the state and the parent: the group
                pids.append(int(entry.name))
    return pids


def _thread_states(pids: list[int]) -> list[str]:
    """The scheduler state (R, S, D, ...) of every thread of ``pids`` this instant."""
    states = []
    for pid in pids:
        with contextlib.suppress(OSError):
            for task in Path(f"/proc/{pid}/task").iterdir():
                with contextlib.suppress(OSError):
                    states.append((task / "stat").read_text().rpartition(")")[2].split()[0])
    return states


def freeze_when_busy(
    pgid: int, timeout: float, what: str, alive: Callable[[], None] | None = None
) -> None:
    """Stop process group ``pgid`` (SIGSTOP) at an instant it executes something: once it
    was seen at rest (REST_SAMPLES) and then busy (BUSY_SAMPLES). A server of a
    ParameterServer job rests between closures and is busy in one, so frozen there its
    closure has started and cannot finish: a kill that follows lands inside it however
    loaded the machine is (load makes a closure longer, never shorter). ``alive`` raises
    when the task has gone (checked every sample); ``what`` names it. A ``LocalJob``'s
    task (``LocalJob.freeze_when_busy``) or a process node's pod (its process leads its
    group) alike."""
    # Samples in a row at rest and busy; armed once it has rested long enough.
    seen = {"rest": 0, "busy": 0, "armed": 0}
    # The group's processes, looked up again every GROUP_SECONDS (a scan of /proc costs
    # more than a sample); a new member (a supervisor's child starting) disarms.
    group: dict[str, Any] = {"pids": [], "at": -GROUP_SECONDS}

    def busy() -> bool:
        if alive is not None:
            alive()
        if time.monotonic() - group["at"] >= GROUP_SECONDS:
            pids = _group_pids(pgid)
            if pids != group["pids"]:
                seen.update(rest=0, busy=0, armed=0)
            group.update(pids=pids, at=time.monotonic())
        states = _thread_states(group["pids"])
        if states and all(s == "S" for s in states):
            seen["rest"], seen["busy"] = seen["rest"] + 1, 0
            seen["armed"] |= seen["rest"] >= REST_SAMPLES
        else:
            seen["rest"] = 0
            seen["busy"] = seen["busy"] + 1 if seen["armed"] and "R" in states else 0
        return seen["busy"] >= BUSY_SAMPLES

    wait_for(busy, timeout, f"{what} at rest, then busy", every=0.001)
    os.killpg(pgid, signal.SIGSTOP)
    wait_for(
        lambda: all(s in "Tt" for s in _thread_states(_group_pids(pgid))),
        120,
        f"{what} stopped",
        every=0.001,
    )


class LocalJob:
    """Every task of a job as a local process; ``close()`` kills them all."""

    def __init__(
        self,
        config: TrainerConfig,
        workdir: Path,
        workers: int,
        ps: int,
        chief: bool = True,
        env: dict[str, str] | None = None,
    ):
        self.config = config
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.config_path = workdir / "trainer.json"
        self._write_config()
        roles = {"chief": 1 if chief else 0, "worker": workers, "ps": ps}
        ports = iter(free_ports(sum(roles.values()) + 1))
        self.cluster = {
            role: [f"127.0.0.1:{next(ports)}" for _ in range(n)] for role, n in roles.items() if n
        }
        self.metrics_port = next(ports)
        self.env = trainer_env(env)
        self.procs: dict[tuple[str, int], subprocess.Popen[bytes]] = {}
        self.starts: dict[tuple[str, int], int] = {}

    def set_config(self, config: TrainerConfig) -> None:
        """A new trainer config for the tasks started from now on."""
        self.config = config
        self._write_config()

    def _write_config(self) -> None:
        # Whole or not at all (a temporary file renamed over it): a task starting now reads
        # the old config or the new one, never a file cut off mid-write.
        tmp = self.config_path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(self.config.to_wire()))
        os.replace(tmp, self.config_path)

    def set_steps(self, total: int) -> None:
        """A new step total for the tasks started from now on (the rest unchanged)."""
        training = self.config.training.model_copy(update={"steps": total})
        self.set_config(self.config.model_copy(update={"training": training}))

    # --- processes --------------------------------------------------------------------

    def tf_config(self, role: str, index: int) -> str:
        return json.dumps({"cluster": self.cluster, "task": {"type": role, "index": index}})

    def log_path(self, role: str, index: int, start: int | None = None) -> Path:
        n = self.starts.get((role, index), 0) if start is None else start
        return self.workdir / f"{role}-{index}.{n}.log"

    def start(
        self, role: str, index: int, wrapper: tuple[str, ...] = ()
    ) -> subprocess.Popen[bytes]:
        """Start a task (under ``wrapper``, a command that runs the rest, if given)."""
        key = (role, index)
        old = self.procs.get(key)
        if old is not None and old.poll() is None:
            raise RuntimeError(f"{role}/{index} is still running")
        self.starts[key] = self.starts.get(key, -1) + 1
        env = dict(self.env)
        if role in ("ps", "worker") and self.config.strategy == "ParameterServer":
            # Servers keep TensorFlow's warnings: they are the only record of a hung peer.
            env["TF_CPP_MIN_LOG_LEVEL"] = "1"
        env["TF_CONFIG"] = self.tf_config(role, index)
        env["ETJ_TRAINER_CONFIG"] = str(self.config_path)
        env["ETJ_METRICS_PORT"] = str(
            self.metrics_port
            if role == "chief" or (role == "worker" and index == 0 and "chief" not in self.cluster)
            else 0
        )
        # As ``etj run``: every task's share of this machine's cores, and its own cores
        # (what a test's environment already says stays).
        tasks = [(r, i) for r, hosts in self.cluster.items() for i in range(len(hosts))]
        extra, bound = machine_share((role, index), tasks, env)
        env = {**extra, **env}
        log = self.log_path(role, index).open("wb")
        proc = subprocess.Popen(
            [*wrapper, sys.executable, "-m", "etj_trainer"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self.workdir,
            start_new_session=True,
            preexec_fn=lambda: bind_to(bound),
        )
        log.close()
        self.procs[key] = proc
        return proc

    def start_all(self) -> LocalJob:
        # Servers first: the chief connects to them.
        for role in ("ps", "worker", "chief"):
            for i in range(len(self.cluster.get(role, []))):
                self.start(role, i)
        return self

    def kill(self, role: str, index: int, sig: int = signal.SIGKILL) -> None:
        """Signal a task. SIGTERM goes to its main process (a supervised trainer forwards
        it); other signals to its whole process group, as a container runtime would."""
        proc = self.procs.get((role, index))
        if proc is None or proc.poll() is not None:
            return
        if sig == signal.SIGTERM:
            proc.send_signal(sig)
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        if sig == signal.SIGKILL:
            proc.wait(timeout=120)
            wait_for(lambda: not _group_alive(proc.pid), 120, f"{role}/{index} to be gone")

    def freeze_when_busy(self, role: str, index: int, timeout: float) -> None:
        """Stop a task at an instant it executes something (``freeze_when_busy``)."""
        proc = self.procs[(role, index)]

        def alive() -> None:
            if proc.poll() is not None:
                raise AssertionError(f"{role}/{index} exited ({proc.returncode})")

        freeze_when_busy(proc.pid, timeout, f"{role}/{index}", alive)

    def restart_workers(self) -> None:
        """Kill every worker and start them again: what the operator does with the
        workers of a ParameterServer job whose chief restarts."""
        for i in range(len(self.cluster.get("worker", []))):
            self.kill("worker", i, signal.SIGKILL)
            self.start("worker", i)

    def restart_all(self) -> None:
        """Kill every task and start them all again: what the operator does when the
        chief's watchdog stopped it (some worker or ps is hung)."""
        for role, index in list(self.procs):
            self.kill(role, index, signal.SIGKILL)
        self.start_all()

    def wait_exit(self, role: str, index: int, timeout: float) -> int:
        return wait_exit(self.procs[(role, index)], timeout, f"{role} {index} to exit")

    def close(self) -> None:
        # The whole group: a supervised trainer's child goes too, whatever happened before.
        for proc in self.procs.values():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
        for proc in self.procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=120)

    def __enter__(self) -> LocalJob:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- observing ----------------------------------------------------------------------

    @property
    def chief_key(self) -> tuple[str, int]:
        return ("chief", 0) if "chief" in self.cluster else ("worker", 0)

    def events(
        self, role: str | None = None, index: int = 0, start: int | None = None
    ) -> list[dict[str, Any]]:
        if role is None:
            role, index = self.chief_key
        return read_events(self.log_path(role, index, start))

    def all_events(self, role: str | None = None, index: int = 0) -> list[dict[str, Any]]:
        """Events of every start of a task, in order."""
        if role is None:
            role, index = self.chief_key
        out: list[dict[str, Any]] = []
        for n in range(self.starts.get((role, index), 0) + 1):
            out += read_events(self.log_path(role, index, n))
        return out

    def last(self, event: str, role: str | None = None, index: int = 0) -> dict[str, Any] | None:
        found = [e for e in self.events(role, index) if e["event"] == event]
        return found[-1] if found else None

    def step(self) -> int:
        progress = self.last("progress")
        return int(progress["step"]) if progress else 0

    def wait_step(self, step: int, timeout: float) -> int:
        def reached() -> int:
            self.check_chief_alive()
            s = self.step()
            return s if s >= step else 0

        return int(wait_for(reached, timeout, f"step {step} (at {self.step()})"))

    def check_chief_alive(self) -> None:
        proc = self.procs[self.chief_key]
        code = proc.poll()
        if code is not None and self.last("done") is None:
            tail = self.log_path(*self.chief_key).read_text(errors="replace")[-3000:]
            raise AssertionError(
                f"chief exited with {code} before finishing:\n{tail}\n{self.peer_tails()}"
            )

    def check_running(self, role: str) -> None:
        """Every started task of ``role`` still runs: a wait that needs them fails at once
        when one has exited (a ps that could not start), not at its deadline."""
        for (r, index), proc in sorted(self.procs.items()):
            code = proc.poll()
            if r == role and code is not None:
                raise AssertionError(f"{r}/{index} exited with {code}:\n{self.peer_tails()}")

    def peer_tails(self, chars: int = 1500) -> str:
        """The end of every other task's current log: where a hang shows up."""
        out = []
        for role, index in sorted(self.procs):
            if (role, index) == self.chief_key:
                continue
            code = self.procs[(role, index)].poll()
            state = "running" if code is None else f"exited {code}"
            out.append(f"--- {role}/{index} ({state}):\n{self.log_tail(role, index, chars)}")
        return "\n".join(out)

    def wait_done(self, timeout: float) -> dict[str, Any]:
        """The leader's ``done`` event, within ``timeout``; then its exit 0 within a minute
        (a leader that has written ``done`` leaves at once: etj_trainer.ending)."""

        def done() -> dict[str, Any] | None:
            self.check_chief_alive()
            return self.last("done")

        result = wait_for(done, timeout, "the chief to finish")
        code = self.wait_exit(*self.chief_key, timeout=60)
        assert code == 0, f"chief exited with {code}"
        return dict(result)

    def log_tail(self, role: str, index: int, chars: int = 3000) -> str:
        return self.log_path(role, index).read_text(errors="replace")[-chars:]
