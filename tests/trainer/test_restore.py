"""Restoring a ParameterServer checkpoint into another layout, and refusing a wrong one.

The trainer restores one variable per ps at a time, each read by slice on its own ps. A
checkpoint written with 2 ps and one shard layout must come back whole into 3 ps and
another layout (the operator may re-plan when ps memory or count changes), and a model
whose table changed size must fail with a config error naming the table, not train on.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from harness import LocalJob, assert_restored_as_saved, job_spec, trainer_config, wait_for

from etj_trainer import exitcodes


def _spec(ps: int, max_shard: str, user_rows: int = 5000, steps: int = 200) -> Any:
    return job_spec(
        replicas={"chief": {"replicas": 1}, "worker": {"replicas": 1}, "ps": {"replicas": ps}},
        model={
            "embeddings": [
                {"name": "user_id", "vocabularySize": user_rows, "dimension": 8},
                {"name": "item_id", "vocabularySize": 2000, "dimension": 8, "idsPerExample": 3},
            ],
            "denseFeatures": 4,
            "hiddenUnits": [16],
        },
        training={
            "batchSizePerReplica": 128,
            "steps": steps,
            "optimizer": "adagrad",
            "learningRate": 0.1,
            "stepsPerExecution": 10,
        },
        sharding={"maxShardBytes": max_shard},
    )


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A checkpoint at step 200 of a 2-ps job with 64 KiB shards (6 + 2 of them)."""
    workdir = tmp_path_factory.mktemp("restore-src")
    config = trainer_config(_spec(2, "64Ki"), checkpoint_dir=workdir / "ckpt", every_steps=100)
    assert [t.shards for t in config.shard_plan.tables] == [6, 2]
    with LocalJob(config, workdir, workers=1, ps=2) as job:
        job.start_all()
        assert job.wait_done(timeout=240)["step"] == 200
    return workdir / "ckpt"


def test_restores_into_more_ps_and_other_shards(saved: Path, tmp_path: Path) -> None:
    config = trainer_config(_spec(3, "48Ki", steps=300), checkpoint_dir=saved, every_steps=100)
    # 3 ps, and shard counts that cut the saved shards at other rows.
    assert [t.shards for t in config.shard_plan.tables] == [9, 3]
    with LocalJob(config, tmp_path, workers=1, ps=3) as job:
        job.start_all()
        restored = dict(wait_for(lambda: job.last("restored"), 180, "the chief to restore"))
        assert restored["step"] == 200
        assert_restored_as_saved(restored)
        assert job.wait_done(timeout=240)["step"] == 300


def test_a_resized_table_is_a_config_error(saved: Path, tmp_path: Path) -> None:
    config = trainer_config(
        _spec(2, "64Ki", user_rows=6000, steps=300), checkpoint_dir=saved, every_steps=100
    )
    with LocalJob(config, tmp_path, workers=1, ps=2) as job:
        job.start_all()
        assert job.wait_exit("chief", 0, timeout=180) == exitcodes.USAGE
        error = job.last("error")
        assert error is not None and error["reason"] == "CheckpointMismatch"
        assert "model/tables/0" in error["message"] and "6000" in error["message"]
        assert job.last("progress") is None, "no step may run on a mismatched model"
