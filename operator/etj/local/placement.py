"""Which cores each process of a local run is bound to (``etj run``, and the test harness's
``LocalJob``, which runs jobs the way ``etj run`` does).

On a node, the kubelet's static CPU manager gives each Guaranteed pod cores of its own. On
one machine ``etj run`` starts every replica as a process, and left to the scheduler five
TensorFlow processes on two cores keep migrating, and every message between a worker and a
ps wakes a thread on the other core (an inter-processor interrupt: in a VM, an exit to the
hypervisor). Bound, a process's own threads hand work to each other on one core, and the
two cores keep their caches. Measured (``benchmarks/trainer_throughput.py``, the PS job of
chief + 2 workers + 2 ps on 2 cores, three pairs): examples per CPU-second 6-35 %
higher, ~15 % by the medians (each run in ``benchmarks/RESULTS.md``).

The rule: with no more processes than cores, each gets a contiguous slice of its own (as
the CPU manager would give); with more, one core each, workers first, then ps, then the
rest, dealt out back and forth (0, 1, 1, 0, 0, 1, ...) so that the busiest roles spread
and the first ps does not land with the first worker.

A process bound to one core still gets two inter-op threads (``TF_NUM_INTEROP_THREADS``,
unless its environment names a number): TensorFlow sizes that pool by the cores a process
may use, and a server with one inter-op thread deadlocks (its ops wait on each other) —
a user's own program that starts ``tf.distribute.Server`` with TensorFlow's defaults
(examples/own-program) made no step once bound.

Pure: it sets no affinity (``launch.start`` does, in the child before it runs anything).
"""

from __future__ import annotations

from collections.abc import Sequence

from etj.api.roles import Role

# The order processes are dealt cores in: the ones that compute most first.
_DEAL_ORDER: dict[str, int] = {Role.WORKER: 0, Role.PS: 1, Role.CHIEF: 2, Role.EVALUATOR: 3}

Task = tuple[Role, int]

# TensorFlow's own variable for its inter-op pool (read when the pool is made).
TF_INTEROP_THREADS_ENV = "TF_NUM_INTEROP_THREADS"


def bound_env(cores: Sequence[int], env: dict[str, str]) -> dict[str, str]:
    """What a process bound to ``cores`` adds to its environment ``env``: at least two
    inter-op threads for TensorFlow (see the module docstring); nothing when unbound."""
    if not cores or env.get(TF_INTEROP_THREADS_ENV):
        return {}
    return {TF_INTEROP_THREADS_ENV: str(max(2, len(cores)))}


def core_sets(cores: Sequence[int], tasks: Sequence[Task]) -> dict[Task, tuple[int, ...]]:
    """The cores each of ``tasks`` ((role, index)) is bound to, out of ``cores`` (those
    this run may use). Empty when there is nothing to split: no cores, or one process."""
    cores = sorted(set(cores))
    if not cores or len(tasks) <= 1:
        return {}
    ordered = sorted(tasks, key=lambda t: (_DEAL_ORDER.get(t[0], len(_DEAL_ORDER)), t[1]))
    n = len(cores)
    if len(ordered) <= n:
        # Slices as even as they go: the first ``extra`` tasks get one core more.
        size, extra = divmod(n, len(ordered))
        out, first = {}, 0
        for k, task in enumerate(ordered):
            width = size + (1 if k < extra else 0)
            out[task] = tuple(cores[first : first + width])
            first += width
        return out
    out = {}
    for k, task in enumerate(ordered):
        rnd, pos = divmod(k, n)
        out[task] = (cores[pos if rnd % 2 == 0 else n - 1 - pos],)
    return out
