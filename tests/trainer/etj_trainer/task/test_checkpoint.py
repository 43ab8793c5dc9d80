"""etj_trainer.task.checkpoint in-process: save, restore the newest into a fresh state, the
resumes counted beside the checkpoints, a scratch directory for a worker that is not the
chief, and nothing at all without a checkpoint spec."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from harness import job_spec, trainer_config

from etj.api.trainer import TrainerCheckpoint
from etj.api.warmstart import CHECKPOINT_MANIFEST_FILE
from etj_trainer.data.pipeline import make_dataset
from etj_trainer.task.checkpoint import RESTARTS_FILE, Checkpoints
from etj_trainer.task.state import TrainingState

CONFIG = trainer_config(job_spec())


@pytest.fixture(scope="module")
def trained(tf: Any) -> TrainingState:
    """A state trained 3 steps (traced once for the module)."""
    state = TrainingState(CONFIG, tf.distribute.get_strategy())
    state.train_chunk(iter(make_dataset(CONFIG.model, CONFIG.data, 32)), tf.constant(3, tf.int64))
    return state


def _fresh(tf: Any) -> TrainingState:
    return TrainingState(CONFIG, tf.distribute.get_strategy())


def _spec(directory: Path, keep: int = 3) -> TrainerCheckpoint:
    return TrainerCheckpoint(directory=str(directory), every_steps=100, keep=keep)


def test_without_a_spec_nothing_is_saved_or_restored(tf):
    checkpoints = Checkpoints(_fresh(tf), None)
    assert not checkpoints.enabled
    assert checkpoints.latest() is None and checkpoints.restore() is None


def test_a_saved_state_restores_into_a_fresh_one_with_its_step(tf, trained, tmp_path):
    saver = Checkpoints(trained, _spec(tmp_path))
    assert saver.restore() is None  # nothing yet, and no warm start
    assert saver.save() == 3
    assert (tmp_path / CHECKPOINT_MANIFEST_FILE).exists()  # what a warm start reads
    fresh = _fresh(tf)
    loader = Checkpoints(fresh, _spec(tmp_path))
    assert loader.latest() == saver.latest()
    assert loader.restore() == 3 and loader.restored_path == saver.latest()
    assert loader.restore_seconds is not None
    for a, b in zip(trained.model.tables, fresh.model.tables, strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_each_resume_is_counted_beside_the_checkpoints_by_the_chief_alone(tf, trained, tmp_path):
    Checkpoints(trained, _spec(tmp_path)).save()
    counts = []
    for _ in range(2):
        chief = Checkpoints(_fresh(tf), _spec(tmp_path))
        chief.restore()
        counts.append(chief.restarts)
    assert counts == [1, 2]
    assert (tmp_path / RESTARTS_FILE).read_text() == "2"
    worker = Checkpoints(_fresh(tf), _spec(tmp_path), count_restarts=False)
    assert worker.restore() == 3 and worker.restarts == 0
    assert (tmp_path / RESTARTS_FILE).read_text() == "2"


def test_only_the_newest_keep_are_kept(tf, tmp_path):
    state = _fresh(tf)
    checkpoints = Checkpoints(state, _spec(tmp_path, keep=2))
    for step in (1, 2, 3):
        state.step.assign(step)
        assert checkpoints.save() == step
    indexes = sorted(p.name for p in tmp_path.glob("ckpt-*.index"))
    assert indexes == ["ckpt-2.index", "ckpt-3.index"]


def test_a_scratch_save_leaves_no_copy_and_no_manifest(trained, tmp_path):
    scratch = tmp_path / "scratch"
    Checkpoints(trained, _spec(tmp_path / "ckpt"), scratch=str(scratch)).save()
    assert scratch.is_dir() and list(scratch.iterdir()) == []
    assert not (tmp_path / "ckpt").exists() or not any((tmp_path / "ckpt").iterdir())
