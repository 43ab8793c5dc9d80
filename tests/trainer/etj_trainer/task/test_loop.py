"""task/loop: the pause the dynamic tables' one writer needs under ParameterServer. Every
``pause_every`` scheduled steps the loop drains every chunk in flight and waits for them
all before ``pause`` runs, and no chunk runs across a pause. Chunks sized by time take
their sizes from the chunks done, and a boundary still cuts them."""

from __future__ import annotations

import signal
from typing import Any

import numpy as np
from harness import job_spec, trainer_config

from etj_trainer import exitcodes
from etj_trainer.task.chunk_size import ChunkSizer
from etj_trainer.task.cluster import parse_tf_config
from etj_trainer.task.loop import LoopParts, _run_round
from etj_trainer.task.step import ChunkResult


class _Step:
    def __init__(self) -> None:
        self.value = 0

    def numpy(self) -> int:
        return self.value


class _State:
    def __init__(self) -> None:
        self.step = _Step()


class _Quiet:
    def chunk_done(self, *args: Any) -> None:
        pass

    def step(self, step: int) -> None:
        pass

    def beat(self) -> None:
        pass


def test_chunks_never_cross_a_pause_and_none_is_in_flight_during_it():
    state = _State()
    in_flight: list[int] = []
    log: list[tuple[str, int]] = []

    def schedule(n: int) -> int:
        in_flight.append(n)
        log.append(("chunk", n))
        return n

    def result(n: int) -> ChunkResult:
        in_flight.remove(n)
        state.step.value += n
        return ChunkResult(0.5, np.zeros([2, 1]), 0)

    def pause(step: int) -> None:
        assert not in_flight
        log.append(("pause", step))

    parts = LoopParts(
        schedule=schedule,
        result=result,
        barrier=lambda: None,
        max_inflight=4,
        examples_per_step=1,
        warm_up=lambda: None,
        pause_every=25,
        pause=pause,
    )
    quiet = _Quiet()
    end = _run_round(state, parts, quiet, quiet, 0, 60, ChunkSizer(10), False)  # type: ignore[arg-type]
    assert end == 60
    assert log == [
        ("chunk", 10), ("chunk", 10), ("chunk", 5), ("pause", 25),
        ("chunk", 10), ("chunk", 10), ("chunk", 5), ("pause", 50),
        ("chunk", 10),
    ]  # fmt: skip


def test_chunks_sized_by_time_grow_from_the_results_and_stop_at_the_boundary():
    state = _State()
    sizes: list[int] = []

    def result(n: int) -> ChunkResult:
        state.step.value += n
        return ChunkResult(0.5, np.zeros([2, 1]), 0, seconds=n * 0.01)  # 10 ms a step

    parts = LoopParts(
        schedule=lambda n: sizes.append(n) or n,
        result=result,
        barrier=lambda: None,
        max_inflight=1,  # one chunk waits while the next is scheduled
        examples_per_step=1,
        warm_up=lambda: None,
    )
    quiet = _Quiet()
    sizer = ChunkSizer(10, multiple=5, target_seconds=1.0)
    end = _run_round(state, parts, quiet, quiet, 0, 500, sizer, False)  # type: ignore[arg-type]
    assert end == 500
    # 10 and 10 in flight before the first result; then x4 a result up to 1 s (100 steps).
    assert sizes == [10, 10, 40, 100, 100, 100, 100, 40]


def test_the_watchdog_counts_steps_not_the_tracing_of_the_step(monkeypatch) -> None:
    """The first chunk of a run pays once for tracing up to ``UNROLL`` + 1 copies of the step
    and compiling that graph: minutes on a busy machine (measured: 187 s under 2-worker
    MultiWorkerMirrored at load 14, then a chunk every 0.4 s), which a watchdog armed
    before it took for a hung peer. The loop traces and compiles the chunk (a zero-step
    call) before it arms the watchdog; nothing is traced while the watchdog is armed."""
    from etj_trainer.task import loop, roles
    from etj_trainer.task.state import TrainingState
    from etj_trainer.task.step import UNROLL

    traces: list[int] = []  # _step runs in Python only while train_chunk is traced
    original = TrainingState._step

    def counting(self: TrainingState, *args: Any) -> Any:
        traces.append(1)
        return original(self, *args)

    seen: list[tuple[str, int]] = []

    class Recorder:
        def arm(self) -> None:
            seen.append(("arm", len(traces)))

        def beat(self) -> None:
            seen.append(("beat", len(traces)))

        def disarm(self) -> None:
            seen.append(("disarm", len(traces)))

    monkeypatch.setattr(TrainingState, "_step", counting)
    monkeypatch.setattr(loop.Heartbeat, "from_env", classmethod(lambda cls: Recorder()))
    monkeypatch.setattr(roles, "configure_threads", lambda: None)  # TF already runs here
    spec = job_spec(training={"batchSizePerReplica": 32, "steps": 12, "stepsPerExecution": 4})
    sigterm = signal.getsignal(signal.SIGTERM)
    try:
        code = roles.run_synchronous(trainer_config(spec), parse_tf_config(None), None)
    finally:
        signal.signal(signal.SIGTERM, sigterm)
    assert code == exitcodes.SUCCESS
    assert seen[0][0] == "arm" and seen[-1][0] == "disarm", seen
    assert [what for what, _ in seen].count("beat") == 3, seen  # one per chunk
    traced = seen[0][1]
    assert traced > 0, f"the watchdog was armed before the step was traced: {seen}"
    # No more copies of the step than a chunk runs: blocks of 4 and the rest loop.
    assert traced == 4 + 1 < UNROLL, seen
    assert all(n == traced for _, n in seen), f"traced while the watchdog was armed: {seen}"
