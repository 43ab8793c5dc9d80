"""task/loop: the pause the dynamic tables' one writer needs under ParameterServer. Every
``pause_every`` scheduled steps the loop drains every chunk in flight and waits for them
all before ``pause`` runs, and no chunk runs across a pause."""

from __future__ import annotations

from typing import Any

import numpy as np

from etj_trainer.task.loop import LoopParts, _run_round


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

    def result(n: int) -> tuple[float, np.ndarray, int]:
        in_flight.remove(n)
        state.step.value += n
        return 0.5, np.zeros([2, 1]), 0

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
    end = _run_round(state, parts, quiet, quiet, 0, 60, 10, False)  # type: ignore[arg-type]
    assert end == 60
    assert log == [
        ("chunk", 10), ("chunk", 10), ("chunk", 5), ("pause", 25),
        ("chunk", 10), ("chunk", 10), ("chunk", 5), ("pause", 50),
        ("chunk", 10),
    ]  # fmt: skip
