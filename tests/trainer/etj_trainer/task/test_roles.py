"""etj_trainer.task.roles: what a role sets up before the loop (epochs as steps, the
placement it reports). In-process; the roles themselves run as processes in test_main.py,
test_ps_training.py and test_mwms.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from harness import job_spec, trainer_config

from etj_trainer.data.datagen import write_files
from etj_trainer.task.roles import _numpy, log_placement, resolve_epochs
from etj_trainer.task.state import TrainingState


def _epochs_config(tmp_path: Path, epochs: int | None):
    base = trainer_config(job_spec())
    write_files(base.model, base.data, tmp_path, "csv", 2, 300)
    training: dict[str, Any] = {
        "batchSizePerReplica": 256,
        "optimizer": "adagrad",
        "learningRate": 0.1,
        "stepsPerExecution": 10,
    }
    training.update({"epochs": epochs} if epochs else {"steps": 77})
    data = {"source": "files", "files": {"pattern": str(tmp_path / "*.csv"), "format": "csv"}}
    return trainer_config(job_spec(training=training, data=data))


@pytest.mark.parametrize(("replicas", "steps"), [(1, 5), (2, 3), (0, 5)])
def test_epochs_become_steps_over_every_replicas_batch(tmp_path, capsys, replicas, steps):
    config = _epochs_config(tmp_path, epochs=2)  # 600 records, batches of 256
    resolved = resolve_epochs(config, replicas)
    assert resolved.training.steps == steps  # ceil(2 x 600 / (256 x replicas)), 0 as 1
    assert resolved.model == config.model and config.training.steps != steps
    (line,) = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert line == {"event": "epochs", "epochs": 2, "records": 600, "steps": steps}


def test_a_job_by_steps_is_left_as_it_is(tmp_path):
    config = _epochs_config(tmp_path, epochs=None)
    assert resolve_epochs(config, 4) is config


def test_the_placement_line_gives_every_tables_shards_rows_and_slots(tf, capsys):
    config = trainer_config(job_spec())
    state = TrainingState(config, tf.distribute.get_strategy())
    capsys.readouterr()
    log_placement(state)
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [x["table"] for x in lines] == [t.name for t in config.model.tables]
    for line, table in zip(lines, config.model.tables, strict=True):
        assert line["event"] == "placement" and sum(line["rows"]) == table.vocabulary_size
        assert len(line["devices"]) == len(line["rows"])
        assert set(line["slotDevices"]) == {"accumulator"}  # Adagrad's one slot
        assert "dynamicShards" not in line  # a fixed table


def test_a_synchronous_chunks_result_is_read_as_numbers():
    result = _numpy((np.float32(0.5), np.ones([2, 3]), np.int64(4)))
    assert (result.loss, result.bad, result.seconds) == (0.5, 4, None)
    assert result.hist.shape == (2, 3)
