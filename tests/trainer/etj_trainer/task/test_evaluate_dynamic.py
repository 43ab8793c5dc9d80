"""The evaluator scoring a checkpoint of a ParameterServer job whose dynamic table is
sharded over 2 ps: it restores the table into its own unsharded copy of the model (one
index over the whole pool), every admitted id at the row it was trained in, and scores
the final step.

A real cluster (chief + 1 worker + 2 ps on 127.0.0.1, a few dozen steps), then the
evaluator process, as ``test_ps_training.py``'s evaluator test runs it for hashed tables.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from harness import LocalJob, job_spec, trainer_config

CAPACITY = 600
STEPS = 60


def _saved_index(path: str, shards: int) -> dict[int, int]:
    """Every admitted key of the saved table and its table row, from every saved shard."""
    import tensorflow as tf

    reader = tf.train.load_checkpoint(path)
    prefix = "model/dynamic/user_id/shards"
    out: dict[int, int] = {}
    first = 4  # the fallback rows come first
    for i in range(shards):
        keys = reader.get_tensor(f"{prefix}/{i}/index/.ATTRIBUTES/table-keys")
        slots = reader.get_tensor(f"{prefix}/{i}/index/.ATTRIBUTES/table-values")
        out.update(zip(keys.tolist(), (first + slots).tolist(), strict=True))
        first += len(reader.get_tensor(f"{prefix}/{i}/last_seen/.ATTRIBUTES/VARIABLE_VALUE"))
    return out


def _spec() -> Any:
    return job_spec(
        replicas={"chief": {"replicas": 1}, "worker": {"replicas": 1}, "ps": {"replicas": 2}},
        model={
            "embeddings": [
                {
                    "name": "user_id",
                    "vocabularySize": 4,
                    "dimension": 8,
                    "dynamic": {"capacity": CAPACITY, "admitAfter": 2, "maintainEverySteps": 10},
                },
                {"name": "item_id", "vocabularySize": 2000, "dimension": 8, "idsPerExample": 3},
            ],
            "denseFeatures": 4,
            "hiddenUnits": [16],
        },
        training={
            "batchSizePerReplica": 128,
            "steps": STEPS,
            "optimizer": "adagrad",
            "learningRate": 0.1,
            "stepsPerExecution": 10,
        },
    )


@pytest.mark.extended  # make test-all (processes of a cluster: minutes); the sibling below runs in CI
def test_the_evaluator_restores_a_dynamic_table_sharded_over_two_ps(tmp_path: Path) -> None:
    spec = _spec()
    config = trainer_config(spec, checkpoint_dir=tmp_path / "ckpt", every_steps=STEPS)
    plan = next(t for t in config.shard_plan.tables if t.name == "user_id")
    assert plan.shards >= 2 and len(set(plan.ps_of_shard)) == 2, plan
    with LocalJob(config, tmp_path, workers=1, ps=2) as job:
        job.start_all()
        assert job.wait_done(timeout=300)["step"] == STEPS
        saved = _saved_index(str(tmp_path / "ckpt" / f"ckpt-{STEPS}"), plan.shards)
        # Not vacuous: ids were admitted in more than one shard.
        assert len(saved) > 0 and len({k % plan.shards for k in saved}) == plan.shards
        # The evaluator process scores the final step.
        job.env["ETJ_EVAL_POLL_SECONDS"] = "1"
        job.start("evaluator", 0)
        code = job.wait_exit("evaluator", 0, timeout=180)
        assert code == 0, job.log_tail("evaluator", 0)
        final = [e for e in job.events("evaluator", 0) if e["event"] == "evaluation"][-1]
        assert final["step"] == STEPS
        assert np.isfinite(final["logloss"]) and final["examples"] > 0
        # The evaluator's restore, in this process: its one index holds every saved key at
        # the row it was trained in, and keeps the invariants.
        import tensorflow as tf

        from etj_trainer.models.ctr import CtrModel
        from etj_trainer.task.evaluate import restore_model

        model, step = CtrModel(config), tf.Variable(0, dtype=tf.int64)
        restore_model(model, step, str(tmp_path / "ckpt" / f"ckpt-{STEPS}"))
        table = model.dynamic["user_id"]
        assert len(table.shards) == 1 and int(step.numpy()) == STEPS
        keys, rows = table.admitted_rows()
        assert dict(zip(keys.tolist(), rows.tolist(), strict=True)) == saved
        assert table.invariant_violations() == []


def test_the_evaluators_restore_lays_a_sharded_table_out_as_one(tmp_path: Path) -> None:
    """In process: a checkpoint with the keys the 2-ps job above writes (the pool a sharded
    variable of the plan's shards, one index per pool shard) restored by ``restore_model``."""
    import tensorflow as tf

    from etj_trainer.models.ctr import CtrModel
    from etj_trainer.models.dynamic_shards import ShardedDynamicTable
    from etj_trainer.task.evaluate import restore_model

    config = trainer_config(_spec())
    plan = next(t for t in config.shard_plan.tables if t.name == "user_id")
    trained = CtrModel(config)
    # The pool as the ParameterServer job holds it (the plan's shards), ids admitted in
    # every shard.
    values = trained.tables[0].numpy() + 1.0
    pool = tf.__internal__.distribute.ShardedVariable(
        [tf.Variable(v) for v in np.split(values, np.cumsum(plan.rows_per_shard)[:-1])]
    )
    spec = config.model.tables[0]
    table = ShardedDynamicTable(spec, pool)
    assert len(table.shards) == plan.shards >= 2
    # Twice each (admitAfter 2), but the last: it stays a candidate.
    keys = tf.constant([*range(1, 13), 10**12 + 1] * 2 + [2**61 + 6], tf.int64)
    unique, _, counts = tf.unique_with_counts(keys)
    table.observe(unique, counts, tf.constant(1, tf.int64))
    table.maintain(10)
    saved_keys, saved_rows = table.admitted_rows()
    assert len({k % plan.shards for k in saved_keys.tolist()}) == plan.shards
    # Trained values, not the initial ones a fresh model starts from.
    trained.tables[1].assign_add(tf.ones_like(trained.tables[1]))
    trained.tower_params.assign_add(tf.ones_like(trained.tower_params))
    stand_in = tf.Module()
    stand_in.tables = [pool, trained.tables[1]]
    stand_in.dynamic = {"user_id": table}
    stand_in.tower_params = trained.tower_params
    path = tf.train.Checkpoint(model=stand_in, step=tf.Variable(STEPS, dtype=tf.int64)).write(
        str(tmp_path / "ckpt")
    )

    model, step = CtrModel(config), tf.Variable(0, dtype=tf.int64)
    restore_model(model, step, path)
    (one,) = model.dynamic["user_id"].shards
    assert int(step.numpy()) == STEPS and one.invariant_violations() == []
    keys_after, rows_after = model.dynamic["user_id"].admitted_rows()
    assert keys_after.tolist() == saved_keys.tolist() and rows_after.tolist() == saved_rows.tolist()
    np.testing.assert_array_equal(model.tables[0].numpy(), values)
    np.testing.assert_array_equal(model.tables[1].numpy(), trained.tables[1].numpy())
    np.testing.assert_array_equal(model.tower_params.numpy(), trained.tower_params.numpy())
    # It scores what the trained rows give: an admitted id reads its own row.
    rows = model.dynamic["user_id"].rows(tf.constant(saved_keys))
    assert rows.numpy().tolist() == saved_rows.tolist()
