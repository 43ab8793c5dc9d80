"""A replica's threads: from its CPU budget (``etj run``'s share, a container's quota)
to TensorFlow's intra-op and inter-op pools.

Called once per process before TensorFlow runs an op; it decides nothing else.
"""

from __future__ import annotations

import contextlib
import math
import os
from dataclasses import dataclass
from pathlib import Path

import tensorflow as tf

from etj.api.constants import CPUS_ENV


@dataclass(frozen=True)
class Threads:
    """How this process's TensorFlow runs its ops: intra-op and inter-op threads (None:
    TensorFlow's default, every core of the node) and whether idle threads spin."""

    intra: int | None
    inter: int | None
    spin: bool


def cpu_budget(cgroup: Path = Path("/sys/fs/cgroup")) -> float | None:
    """The CPUs this process may use: ``ETJ_CPUS`` (``etj run``'s share of the machine),
    else the container's CPU limit (cgroup v2 ``cpu.max``, v1 ``cpu.cfs_quota_us``), else
    None (no limit known)."""
    try:
        value = float(os.environ.get(CPUS_ENV, ""))
    except ValueError:
        value = 0.0
    if value > 0:
        return value
    return cgroup_cpus(cgroup)


def cgroup_cpus(cgroup: Path = Path("/sys/fs/cgroup")) -> float | None:
    """CPUs allowed by the cgroup's quota (v2, else v1); None when unlimited or unknown."""
    quota_period: list[str] = []
    with contextlib.suppress(OSError, ValueError):
        quota_period = (cgroup / "cpu.max").read_text().split()[:2]
    if not quota_period:
        for v1 in (cgroup / "cpu", cgroup / "cpu,cpuacct"):
            with contextlib.suppress(OSError):
                quota_period = [
                    (v1 / "cpu.cfs_quota_us").read_text().strip(),
                    (v1 / "cpu.cfs_period_us").read_text().strip(),
                ]
                break
    try:
        quota, period = int(quota_period[0]), int(quota_period[1])
    except (IndexError, ValueError):  # "max" (v2) or nothing readable
        return None
    # v1 says -1 for no limit.
    return quota / period if quota > 0 and period > 0 else None


def thread_counts(cores: int | None = None, budget: float | None = None) -> Threads:
    """This process's threads: ``ETJ_INTRA_OP_THREADS`` / ``ETJ_INTER_OP_THREADS``, else
    its CPU budget rounded up, else TensorFlow's default; spinning only without a budget
    below the node's cores.

    TensorFlow sizes its pools by the node's cores, not the pod's CPU limit: a pod limited
    to 2 CPUs on a 64-core node would otherwise run 64 threads per pool and be throttled.
    And its idle threads spin a while before they sleep, which pays on cores a process has
    to itself; where processes share the cores (``etj run``, five on a 2-core machine) or
    a quota throttles the container, the spinning takes the cores the others need
    (``benchmarks/trainer_throughput.py``: the PS job's examples per CPU-second, in
    ``benchmarks/RESULTS.md``).
    """

    def env(name: str) -> int | None:
        value = os.environ.get(name, "")
        return int(value) if value.isdigit() and int(value) > 0 else None

    cores = cores or os.cpu_count() or 1
    limit = max(1, math.ceil(budget - 1e-9)) if budget else None
    intra = env("ETJ_INTRA_OP_THREADS") or limit
    inter = env("ETJ_INTER_OP_THREADS") or limit
    # One inter-op thread deadlocks a server whose ops wait on each other (send/recv).
    return Threads(intra, max(2, inter) if inter else None, spin=not budget or budget >= cores)


def configure_threads() -> None:
    threads = thread_counts(budget=cpu_budget())
    if threads.intra:
        tf.config.threading.set_intra_op_parallelism_threads(threads.intra)
    if threads.inter:
        tf.config.threading.set_inter_op_parallelism_threads(threads.inter)
