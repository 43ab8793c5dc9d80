"""etj run's placement of its processes on the machine's cores (``etj.local.placement``)."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from etj.local.placement import bound_env, core_sets

PS_JOB = [("chief", 0), ("worker", 0), ("worker", 1), ("ps", 0), ("ps", 1)]


def test_more_processes_than_cores_one_core_each_workers_apart_and_ps_apart() -> None:
    sets = core_sets([0, 1], PS_JOB)
    assert all(len(cores) == 1 for cores in sets.values())
    assert sets[("worker", 0)] != sets[("worker", 1)]
    assert sets[("ps", 0)] != sets[("ps", 1)]
    # The first ps is dealt back from the end: it does not share the first worker's core.
    assert sets[("ps", 0)] != sets[("worker", 0)]
    assert sorted(Counter(core for (core,) in sets.values()).values()) == [2, 3]


def test_no_more_processes_than_cores_each_gets_a_slice_of_its_own() -> None:
    sets = core_sets(range(8), [("chief", 0), ("worker", 0), ("ps", 0)])
    assert sets == {("worker", 0): (0, 1, 2), ("ps", 0): (3, 4, 5), ("chief", 0): (6, 7)}


def test_only_the_cores_this_run_may_use_are_dealt() -> None:
    sets = core_sets([4, 6], PS_JOB)
    assert {c for cores in sets.values() for c in cores} == {4, 6}


@pytest.mark.parametrize("tasks", [[], [("worker", 0)]])
def test_nothing_to_split_binds_nothing(tasks: list[tuple[str, int]]) -> None:
    assert core_sets([0, 1], tasks) == {}
    assert core_sets([], PS_JOB) == {}


@given(
    cores=st.lists(st.integers(0, 63), min_size=1, max_size=16, unique=True),
    workers=st.integers(0, 12),
    ps=st.integers(0, 6),
    chief=st.integers(0, 1),
)
def test_every_process_gets_cores_of_the_run_and_the_load_is_even(
    cores: list[int], workers: int, ps: int, chief: int
) -> None:
    tasks = [("worker", i) for i in range(workers)] + [("ps", i) for i in range(ps)]
    tasks += [("chief", 0)] * chief
    sets = core_sets(cores, tasks)
    if len(tasks) <= 1:
        assert sets == {}
        return
    assert set(sets) == set(tasks)
    assert all(cores_ and set(cores_) <= set(cores) for cores_ in sets.values())
    per_core = Counter(c for cores_ in sets.values() for c in cores_)
    if len(tasks) <= len(cores):
        # Disjoint slices covering every core, sizes within one of each other.
        assert sum(per_core.values()) == len(cores) and max(per_core.values()) == 1
        widths = [len(c) for c in sets.values()]
        assert max(widths) - min(widths) <= 1
    else:
        # Every core used, no core with more than one process above another.
        assert set(per_core) == set(cores)
        assert max(per_core.values()) - min(per_core.values()) <= 1
        # Workers spread first: no two on one core until every core has one.
        worker_cores = Counter(sets[("worker", i)][0] for i in range(workers))
        counts = [worker_cores.get(c, 0) for c in cores]
        assert max(counts) - min(counts) <= 1


def test_a_bound_process_gets_two_inter_op_threads_at_least_unless_its_env_says() -> None:
    # One inter-op thread deadlocks a TensorFlow server; TensorFlow would size the pool
    # by the one core the process may use.
    assert bound_env((1,), {}) == {"TF_NUM_INTEROP_THREADS": "2"}
    assert bound_env((0, 1, 2), {}) == {"TF_NUM_INTEROP_THREADS": "3"}
    assert bound_env((1,), {"TF_NUM_INTEROP_THREADS": "4"}) == {}
    assert bound_env((), {}) == {}
