"""How many steps the next scheduled chunk runs: fixed, or sized by time as training goes.

A job that sets ``stepsPerExecution`` gets that many steps a chunk. A ParameterServer job
that leaves it out (``TrainerConfig.sized_by_time``) gets chunks sized so each takes about
``TARGET_SECONDS`` on its worker: every scheduled function costs the worker a dispatch to
the ps and the chief a round trip (~25 ms, ``benchmarks/RESULTS.md``), worth
amortising over a second of steps, while a chunk much longer than that delays a stop on
SIGTERM (the chief drains every chunk in flight first) and a worker's lost chunk is re-run
whole. A fixed count cannot be right for every model: 50 steps are ~0.3 s of that
benchmark's small CTR model here and can be minutes of a wide one. Keras's
``steps_per_execution="auto"`` tunes its count by probing throughput; here the chunk's own
seconds, timed on its worker (``TrainingState.train_chunk_packed``), say it directly.

Pure: it is told each chunk's steps and seconds and never reads a clock, so the same
observations always give the same sizes. It does not schedule or know about boundaries
(checkpoints, pauses): the loop cuts a chunk at those.
"""

from __future__ import annotations

import statistics
from collections import deque

from etj.api.spec import MAX_STEPS_PER_EXECUTION

# What a chunk sized by time aims at on its worker.
TARGET_SECONDS = 1.0
# A chunk grows at most this much over the one before: the first timings (a cold input
# pipeline, a worker still starting) must not throw the size far off.
MAX_GROWTH = 4
# The median of this many recent chunks' seconds per step: one slow chunk (a checkpoint
# beside it, a busy node) does not halve the next.
WINDOW = 5


class ChunkSizer:
    """The steps of the next chunk (``next``) from the chunks done so far (``observe``)."""

    def __init__(self, initial: int, multiple: int = 1, target_seconds: float | None = None):
        """``initial`` steps until a timing arrives (and always, without ``target_seconds``);
        sizes of at least ``multiple`` steps are whole multiples of it (a chunk's steps run
        in blocks of that many, and a remainder runs one step per loop iteration)."""
        self._size = initial
        self.multiple = max(1, multiple)
        self.target_seconds = target_seconds
        self._per_step: deque[float] = deque(maxlen=WINDOW)

    def next(self) -> int:
        return self._size

    def observe(self, steps: int, seconds: float | None) -> int:
        """A chunk of ``steps`` took ``seconds`` on its worker (None: not timed); the size
        of the next chunk."""
        if self.target_seconds is None or seconds is None or steps <= 0 or seconds <= 0:
            return self._size
        self._per_step.append(seconds / steps)
        wanted = int(self.target_seconds / statistics.median(self._per_step))
        wanted = min(wanted, self._size * MAX_GROWTH, MAX_STEPS_PER_EXECUTION)
        if wanted >= self.multiple:
            wanted -= wanted % self.multiple
        self._size = max(1, wanted)
        return self._size
