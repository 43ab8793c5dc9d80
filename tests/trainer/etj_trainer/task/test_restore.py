"""Restoring a ParameterServer checkpoint into another layout, and refusing a wrong one.

The trainer restores one variable per ps at a time, each read by slice on its own ps. A
checkpoint written with 2 ps and one shard layout must come back whole into 3 ps and
another layout (the operator may re-plan when ps memory or count changes), and a model
whose table changed size must fail with a config error naming the table, not train on.
A dynamic table's index and row state come back too, laid out for the new shards
(extended; its in-process sibling is test_dynamic_relayout.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from harness import (
    LocalJob,
    assert_restored_as_saved,
    job_spec,
    saved_invariants,
    trainer_config,
    wait_for,
)

from etj_trainer import exitcodes

DYNAMIC = {"capacity": 600, "admitAfter": 2, "evictAfterSteps": 40, "maintainEverySteps": 20}


def _spec(
    ps: int, max_shard: str, user_rows: int = 5000, steps: int = 200, dynamic: bool = False
) -> Any:
    user: dict[str, Any] = {"name": "user_id", "vocabularySize": user_rows, "dimension": 8}
    if dynamic:
        user = {**user, "vocabularySize": 4, "dynamic": DYNAMIC}
    return job_spec(
        replicas={"chief": {"replicas": 1}, "worker": {"replicas": 1}, "ps": {"replicas": ps}},
        model={
            "embeddings": [
                user,
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


def _losses(events: list[dict[str, Any]]) -> list[float]:
    return [e["loss"] for e in events if e["event"] == "progress" and "loss" in e]


@pytest.mark.extended
def test_a_dynamic_table_restores_into_more_ps(tmp_path: Path) -> None:
    """A dynamic table saved by 2 ps in 8 shards goes on with 3 ps in 9: each admitted id
    routed to its new shard with its row, the invariants holding per shard, the loss going
    on from where it was."""
    config = trainer_config(
        _spec(2, "64Ki", dynamic=True), checkpoint_dir=tmp_path / "ckpt", every_steps=100
    )
    with LocalJob(config, tmp_path / "src", workers=1, ps=2) as job:
        job.start_all()
        assert job.wait_done(timeout=240)["step"] == 200
        before = _losses(job.events())
    saved = saved_invariants(str(tmp_path / "ckpt" / "ckpt-200"), 8)
    assert saved["used"] > 0
    config = trainer_config(
        _spec(3, "64Ki", dynamic=True, steps=300),
        checkpoint_dir=tmp_path / "ckpt",
        every_steps=100,
    )
    assert [t.shards for t in config.shard_plan.tables] == [9, 3]
    with LocalJob(config, tmp_path / "dst", workers=1, ps=3) as job:
        job.start_all()
        restored = dict(wait_for(lambda: job.last("restored"), 180, "the chief to restore"))
        assert restored["step"] == 200
        # The fixed parts as saved (the dynamic pool's rows moved to their new shards).
        assert_restored_as_saved(
            {
                **restored,
                "digest": {
                    k: v
                    for k, v in restored["digest"].items()
                    if k != "model/tables/0" and not k.startswith("slots/tables/user_id/")
                },
            }
        )
        assert job.wait_done(timeout=240)["step"] == 300
        after = _losses(job.events())
        chief_log = "".join(p.read_text() for p in sorted((tmp_path / "dst").glob("chief-0.*")))
    assert "dynamic table user_id saved in 8 shards, restored into 9" in chief_log
    final = saved_invariants(str(tmp_path / "ckpt" / "ckpt-300"), 9)
    assert final["capacity"] == 600 and 0 < final["used"] <= 600
    assert final["admitted"] >= saved["admitted"]
    assert after and abs(after[0] - before[-1]) < 0.05, (before[-5:], after[:5])
