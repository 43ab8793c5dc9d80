"""etj_trainer.task.checkpoint in-process: save, restore the newest into a fresh state, the
resumes counted beside the checkpoints, a scratch directory for a worker that is not the
chief, and nothing at all without a checkpoint spec; a checkpoint that does not read whole
skipped, and a save killed midway (a process of its own) leaving the one before the newest.
A full volume: test_storage_full."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from harness import job_spec, trainer_config, trainer_env, wait_for

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


def _save_steps(tf: Any, directory: Path, steps: tuple[int, ...]) -> TrainingState:
    """Checkpoints at ``steps``, the first table holding the step's number in each."""
    state = _fresh(tf)
    checkpoints = Checkpoints(state, _spec(directory, keep=len(steps)))
    table = state.model.tables[0]
    for step in steps:
        state.step.assign(step)
        table.assign(tf.fill(table.shape, float(step)))
        checkpoints.save()
    return state


def _restored(tf: Any, directory: Path) -> tuple[int | None, float]:
    state = _fresh(tf)
    step = Checkpoints(state, _spec(directory)).restore()
    return step, float(state.model.tables[0].numpy().mean())


def test_a_newest_checkpoint_that_does_not_read_whole_is_skipped_naming_it(tf, tmp_path, caplog):
    """The state file names it, but a file was truncated, lost or broken after the save:
    the one before is restored, and the log says which was skipped and why."""
    _save_steps(tf, tmp_path, (1, 2, 3, 4))
    data = lambda step: tmp_path / f"ckpt-{step}.data-00000-of-00001"  # noqa: E731
    os.truncate(data(4), data(4).stat().st_size // 2)  # truncated
    (tmp_path / "ckpt-3.index").write_bytes(b"not an index")  # broken
    data(2).unlink()  # lost
    with caplog.at_level(logging.WARNING):
        assert _restored(tf, tmp_path) == (1, 1.0)
    skipped = [r.getMessage() for r in caplog.records if "incomplete" in r.getMessage()]
    assert len(skipped) == 3, skipped
    assert f"{tmp_path}/ckpt-4 is incomplete (OutOfRangeError" in skipped[0]
    assert f"{tmp_path}/ckpt-3 is incomplete" in skipped[1]
    assert f"{tmp_path}/ckpt-2 is incomplete (NotFoundError" in skipped[2]
    # With none left whole there is nothing to restore (and no warm start).
    (tmp_path / "ckpt-1.index").unlink()
    assert _restored(tf, tmp_path)[0] is None


# A save long enough to be cut: a 64 MiB table with its Adagrad slot, saved at step 1, 2, ...
# until killed; each complete save prints its step.
_SAVER = """
import sys
import tensorflow as tf
from harness import job_spec, trainer_config
from etj.api.trainer import TrainerCheckpoint
from etj_trainer.task.checkpoint import Checkpoints
from etj_trainer.task.state import TrainingState

spec = job_spec(
    model={"embeddings": [{"name": "user_id", "vocabularySize": 1_000_000, "dimension": 16}],
           "denseFeatures": 4, "hiddenUnits": [16]},
    sharding={"maxShardBytes": "512Mi"},
)
state = TrainingState(trainer_config(spec), tf.distribute.get_strategy())
checkpoints = Checkpoints(state, TrainerCheckpoint(directory=sys.argv[1], every_steps=1, keep=2))
step = 0
while True:
    step += 1
    state.step.assign(step)
    checkpoints.save()
    print(f"saved {step}", flush=True)
"""


def test_a_save_killed_midway_leaves_the_one_before_the_newest(tf, tmp_path):
    """SIGKILL while the save's data is being written (its temporary prefix is there): the
    state file still names the checkpoint before, which restores whole."""
    directory = tmp_path / "ckpt"
    for attempt in range(3):
        out = tmp_path / f"saver.{attempt}.log"
        with out.open("wb") as sink:
            saver = subprocess.Popen(
                [sys.executable, "-c", _SAVER, str(directory)],
                env=trainer_env(), stdout=sink, stderr=subprocess.STDOUT, cwd=tmp_path,
            )  # fmt: skip
        try:
            wait_for(lambda out=out: "saved 1\n" in out.read_text(), 300, "a first checkpoint")

            def cutting(saver: subprocess.Popen[bytes] = saver, out: Path = out) -> bool:
                # A hang net for a saver that died, polled often: a save lasts ~a second.
                assert saver.poll() is None, out.read_text()[-3000:]
                return bool(list(directory.glob("ckpt-*_temp*")))

            wait_for(cutting, 300, "a save under way", every=0.001)
            saver.send_signal(signal.SIGKILL)
        finally:
            saver.kill()
            saver.wait(timeout=120)
        left = list(directory.glob("ckpt-*_temp*"))
        if left:
            break
    else:
        pytest.fail("each kill came after its save had ended")
    cut = int(left[0].name.split("-")[1].split("_")[0])
    newest = tf.train.latest_checkpoint(str(directory))
    assert newest == f"{directory}/ckpt-{cut - 1}", (newest, cut)
    # The saver's model is not this module's: its checkpoint is read offline.
    reader = tf.train.load_checkpoint(newest)
    assert int(reader.get_tensor("step/.ATTRIBUTES/VARIABLE_VALUE")) == cut - 1
