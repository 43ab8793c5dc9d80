"""etj_trainer.task.position in-process: a following job's position (the last file trained
whole, the records trained) is saved in the checkpoint with the tables and comes back with
them; one file trains every record once, counted where the steps run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness import job_spec, trainer_config

from etj.api.trainer import TrainerCheckpoint
from etj_trainer.data.datagen import write_files
from etj_trainer.task.checkpoint import Checkpoints
from etj_trainer.task.follow import file_function
from etj_trainer.task.state import TrainingState
from etj_trainer.task.step import unpack_file


def _config(tmp_path: Path) -> Any:
    data = {"source": "files", "files": {"pattern": f"{tmp_path}/part-*", "follow": {}}}
    return trainer_config(job_spec(data=data, training={"batchSizePerReplica": 32}))


def test_a_job_that_does_not_follow_has_no_position(tf):
    state = TrainingState(trainer_config(job_spec()), tf.distribute.get_strategy())
    assert state.position is None


def test_the_position_is_saved_and_restored_with_the_tables(tf, tmp_path: Path):
    config = _config(tmp_path)
    (path,) = write_files(config.model, config.data, tmp_path, "tfrecord", 1, 100)
    state = TrainingState(config, tf.distribute.get_strategy())
    steps, result = unpack_file(file_function(config, state, None)(tf.constant(str(path))))
    assert steps == 4 and int(state.step.numpy()) == 4  # 32 + 32 + 32 + 4
    assert result.hist.sum() == 100 and result.loss > 0
    assert state.position is not None and state.position.trained() == 100
    state.position.last_file.assign(str(path))
    spec = TrainerCheckpoint(directory=str(tmp_path / "ckpt"), every_steps=10, keep=2)
    Checkpoints(state, spec).save()
    fresh = TrainingState(config, tf.distribute.get_strategy())
    assert fresh.position is not None and fresh.position.last() == ""
    assert Checkpoints(fresh, spec).restore() == 4
    assert (fresh.position.last(), fresh.position.trained()) == (str(path), 100)
    table = state.model.table_components(0)[0]
    assert (fresh.model.table_components(0)[0].numpy() == table.numpy()).all()
