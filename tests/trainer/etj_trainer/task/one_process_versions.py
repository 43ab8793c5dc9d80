"""The one-process setup the serving-export tests share (test_delta_reader, test_chain_scorer,
test_versions): a MultiWorkerMirrored job of one worker driven chunk by chunk by the test,
with ``Versions`` writing full versions every 10 steps and deltas every 3, on a clock the
test moves. Not a test module: no test of its own."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness import job_spec, trainer_config

from etj.api.trainer import TrainerExport


class Clock:
    """A clock the test moves: every version in the same second unless it does."""

    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def one_process(
    tf: Any, tmp_path: Path, batch: int = 32, **spec: Any
) -> tuple[Any, Any, Callable[[int], None]]:
    """The state, its ``Versions`` (under ``tmp_path``/serving and /deltas) and a function
    that trains ``n`` steps; ``spec``: the job's camelCase overrides (model, data, ...)."""
    from etj_trainer.data.pipeline import make_dataset
    from etj_trainer.task.state import TrainingState
    from etj_trainer.task.versions import Versions

    job = job_spec(strategy="MultiWorkerMirrored", replicas={"worker": {"replicas": 1}}, **spec)
    export = TrainerExport(
        directory=str(tmp_path / "serving"),
        every_steps=10,
        keep=5,
        delta_directory=str(tmp_path / "deltas"),
        delta_steps=3,
    )
    config = trainer_config(job, export=export)
    state = TrainingState(config, tf.distribute.get_strategy())
    it = iter(make_dataset(config.model, config.data, batch))
    versions = Versions(state, export, clock=Clock())

    def chunk(n: int) -> None:
        state.train_chunk(it, tf.constant(n, tf.int64))

    return state, versions, chunk


def train_and_export(versions: Any, chunk: Callable[[int], None], *steps: int) -> None:
    """Train each of ``steps`` and export (a version or a delta is due each time)."""
    for n in steps:
        chunk(n)
        assert versions.tick(int(versions.state.step.numpy()))
        versions.wait()
