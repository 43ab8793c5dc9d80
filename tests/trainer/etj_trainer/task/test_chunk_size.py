"""task/chunk_size: how many steps the next chunk runs — a given count always; left out
under ParameterServer, a count sized from the chunks' own seconds."""

from __future__ import annotations

import pytest

from etj.api.spec import MAX_STEPS_PER_EXECUTION as MAX_STEPS
from etj_trainer.task.chunk_size import MAX_GROWTH, WINDOW, ChunkSizer


def test_a_fixed_count_ignores_the_timings():
    sizer = ChunkSizer(50, multiple=25)
    for seconds in (0.01, 10.0, None):
        assert sizer.observe(50, seconds) == 50
    assert sizer.next() == 50


def test_fast_steps_grow_the_chunk_by_at_most_its_growth_factor_until_the_target():
    sizer = ChunkSizer(50, multiple=25, target_seconds=1.0)
    sizes = [sizer.observe(sizer.next(), sizer.next() * 0.004) for _ in range(4)]  # 4 ms/step
    assert sizes == [50 * MAX_GROWTH, 250, 250, 250]  # 1 s / 4 ms, a multiple of 25


def test_slow_steps_shrink_it_at_once_to_whole_blocks_and_below_a_block_to_single_steps():
    sizer = ChunkSizer(50, multiple=25, target_seconds=1.0)
    assert sizer.observe(50, 50 * 0.03) == 25  # 33 steps of 30 ms: one block
    sizer = ChunkSizer(50, multiple=25, target_seconds=1.0)
    assert sizer.observe(50, 50 * 0.2) == 5  # steps of 200 ms: fewer than a block
    sizer = ChunkSizer(50, multiple=25, target_seconds=1.0)
    assert sizer.observe(50, 50 * 3.0) == 1  # never none


def test_one_slow_chunk_among_steady_ones_does_not_move_the_size():
    sizer = ChunkSizer(100, multiple=10, target_seconds=1.0)
    for _ in range(WINDOW - 1):
        sizer.observe(100, 0.5)  # 5 ms a step: 200 steps a second
    assert sizer.next() == 200
    assert sizer.observe(200, 20.0) == 200  # one chunk 100x slower: the median holds


def test_the_size_never_passes_the_schemas_bound():
    sizer = ChunkSizer(MAX_STEPS, target_seconds=1.0)
    assert sizer.observe(MAX_STEPS, 1e-3) == MAX_STEPS


@pytest.mark.parametrize(("steps", "seconds"), [(0, 1.0), (50, 0.0), (50, None)])
def test_untimed_or_empty_chunks_change_nothing(steps, seconds):
    sizer = ChunkSizer(50, target_seconds=1.0)
    assert sizer.observe(steps, seconds) == 50
