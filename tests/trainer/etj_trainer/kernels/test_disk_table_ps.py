"""A disk table under ParameterServerStrategy: created on ``/job:ps``, it lives in the ps
process (which holds its file open), and a coordinator's scheduled steps look up and
update it there through a worker, exactly as the NumPy reference does. The ps must load
the kernels before its server starts: one that did not refuses the op by name
(TensorFlow's error, naming the op and the ps)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from harness import PYTHONPATH, free_ports, wait_for

from .reference import Reference

pytestmark = pytest.mark.trainer

SERVER = """
import json, sys
import tensorflow as tf
cluster, job, load = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3] == "load"
if load:
    from etj_trainer.kernels import library
    library.load()
server = tf.distribute.Server(
    tf.train.ClusterSpec(cluster), job_name=job, task_index=0, protocol="grpc", start=True
)
print("serving", flush=True)
server.join()
"""

CLIENT = """
import json, sys
import numpy as np
import tensorflow as tf
from etj_trainer.kernels.disk_table import DiskTable
cluster, path, steps = json.loads(sys.argv[1]), sys.argv[2], json.load(open(sys.argv[3]))
resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
    tf.train.ClusterSpec(cluster), task_type="chief", task_id=0, rpc_layer="grpc"
)
strategy = tf.distribute.experimental.ParameterServerStrategy(resolver)
coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
with tf.device("/job:ps/task:0"):
    table = DiskTable(path, rows=60, dim=4, optimizer="adagrad", cache_rows=3, slot_init=0.1)

@tf.function
def step(ids, grads):
    before = table.lookup(ids)
    with tf.control_dependencies([before]):
        applied = table.apply(ids, grads, 0.1)
    with tf.control_dependencies([applied]):
        return before, table.lookup(ids)

seen = []
for ids, grads in steps:
    result = coordinator.schedule(
        step, args=(tf.constant(ids, tf.int64), tf.constant(grads, tf.float32))
    )
    coordinator.join()
    seen.append([r.tolist() for r in result.fetch()])
weights, slots = table.export(0, 60)
print(json.dumps({
    "device": table.handle.device,
    "seen": seen,
    "weights": weights.numpy().tolist(),
    "slots": slots.numpy().tolist(),
    "stats": table.stats(),
}), flush=True)
"""


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": PYTHONPATH, "TF_CPP_MIN_LOG_LEVEL": "2"}


def _start(tmp_path: Path, name: str, script: str, *args: str) -> subprocess.Popen:
    (tmp_path / f"{name}.py").write_text(script)
    log = open(tmp_path / f"{name}.log", "w")  # noqa: SIM115 - the process writes it
    return subprocess.Popen(
        [sys.executable, str(tmp_path / f"{name}.py"), *args],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=_env(),
    )


def _job(tmp_path: Path, ps_loads: bool) -> tuple[dict, list[subprocess.Popen]]:
    chief, worker, ps = free_ports(3)
    cluster = {
        "chief": [f"127.0.0.1:{chief}"],
        "worker": [f"127.0.0.1:{worker}"],
        "ps": [f"127.0.0.1:{ps}"],
    }
    procs = [
        _start(tmp_path, job, SERVER, json.dumps(cluster), job, load)
        for job, load in (("worker", "load"), ("ps", "load" if ps_loads else "no"))
    ]
    for name, proc in zip(("worker", "ps"), procs, strict=True):
        wait_for(
            lambda name=name, proc=proc: (
                proc.poll() is None and "serving" in (tmp_path / f"{name}.log").read_text()
            ),
            300,
            f"the {name} to serve",
        )
    return cluster, procs


def _run_client(tmp_path: Path, cluster: dict, steps: list) -> subprocess.CompletedProcess:
    (tmp_path / "steps.json").write_text(json.dumps(steps))
    (tmp_path / "client.py").write_text(CLIENT)
    return subprocess.run(
        [
            sys.executable,
            str(tmp_path / "client.py"),
            json.dumps(cluster),
            str(tmp_path / "shard.rows"),
            str(tmp_path / "steps.json"),
        ],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=600,
    )


def _stop(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        proc.kill()
        proc.wait(timeout=120)


def test_a_table_on_the_ps_trains_there_as_the_reference(kernels: Path, tmp_path: Path):
    rng = np.random.default_rng(2)
    steps = [
        (rng.integers(0, 60, size=8).tolist(), rng.normal(size=(8, 4)).astype(np.float32).tolist())
        for _ in range(6)
    ]
    cluster, procs = _job(tmp_path, ps_loads=True)
    try:
        done = _run_client(tmp_path, cluster, steps)
        assert done.returncode == 0, done.stderr[-4000:]
        out = json.loads(done.stdout.strip().splitlines()[-1])
        ps = procs[1]
        # The ps process, not the client, holds the shard's file.
        fds = Path(f"/proc/{ps.pid}/fd")
        held = {os.readlink(fd) for fd in fds.iterdir() if fd.is_symlink()}
        assert str(tmp_path / "shard.rows") in held
    finally:
        _stop(procs)
    assert out["device"].startswith("/job:ps/replica:0/task:0/device:CPU:0"), out["device"]
    ref = Reference(60, 4, "adagrad")
    for (ids, grads), (before, after) in zip(steps, out["seen"], strict=True):
        idx = np.array(ids)
        np.testing.assert_array_equal(np.array(before, np.float32), ref.w[idx])
        ref.apply(idx, np.array(grads, np.float32), 0.1)
        np.testing.assert_array_equal(np.array(after, np.float32), ref.w[idx])
    np.testing.assert_array_equal(np.array(out["weights"], np.float32), ref.w)
    np.testing.assert_array_equal(np.array(out["slots"], np.float32), ref.s)
    assert out["stats"]["evictions"] > 0, out["stats"]


def test_a_ps_without_the_kernels_refuses_the_op_by_name(kernels: Path, tmp_path: Path):
    cluster, procs = _job(tmp_path, ps_loads=False)
    try:
        done = _run_client(tmp_path, cluster, [([1], [[0.0] * 4])])
    finally:
        _stop(procs)
    assert done.returncode != 0
    said = done.stderr[done.stderr.find("Error:") :]
    assert "'EtjDiskTableHandle' is neither a type of a primitive operation" in said, said[-3000:]
    assert "registered in binary" in said and "/job:ps/replica:0/task:0" in said, said[-3000:]
