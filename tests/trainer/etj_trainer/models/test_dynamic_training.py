"""A dynamic table in the CTR model, one process: trained with etj's training function on
generated data (twice as many ids as rows), admission and eviction run between steps, the
invariants hold, freed rows carry no optimizer state, and the checkpoint the trainer writes
restores the index with the pool."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from harness import job_spec, trainer_config, trainer_env

from etj_trainer.data.pipeline import make_dataset
from etj_trainer.task.checkpoint import Checkpoints
from etj_trainer.task.state import TrainingState

CAPACITY = 120


def _config(tmp_path: Path, steps: int = 60, export_dir: Path | None = None):
    spec = job_spec(
        strategy="MultiWorkerMirrored",
        replicas={"worker": {"replicas": 1}},
        model={
            "embeddings": [
                {
                    "name": "user_id",
                    "vocabularySize": 4,
                    "dimension": 8,
                    "dynamic": {
                        "capacity": CAPACITY,
                        "admitAfter": 2,
                        "evictAfterSteps": 15,
                        "maintainEverySteps": 5,
                    },
                },
                {"name": "item_id", "vocabularySize": 200, "dimension": 8},
            ],
            "denseFeatures": 4,
            "hiddenUnits": [16],
        },
        training={"steps": steps, "batchSizePerReplica": 32, "stepsPerExecution": 10},
    )
    return trainer_config(
        spec, checkpoint_dir=tmp_path / "ckpt", every_steps=20, export_dir=export_dir
    )


def _admitted(state: TrainingState) -> dict[int, int]:
    keys, slots = state.model.dynamic["user_id"].shards[0].index.export()
    return dict(zip(keys.numpy().tolist(), slots.numpy().tolist(), strict=True))


def test_a_dynamic_table_trains_keeps_its_invariants_and_restores(tmp_path: Path):
    config = _config(tmp_path)
    strategy = tf.distribute.get_strategy()
    state = TrainingState(config, strategy)
    (table,) = state.model.dynamic["user_id"].shards
    assert tuple(table.pool.shape) == (4 + CAPACITY, 8)
    iterator = iter(make_dataset(config.model, config.data, 32))
    losses = []
    for _ in range(6):
        loss, _, _ = state.train_chunk(iterator, tf.constant(10, tf.int64))
        losses.append(float(loss))
        assert table.invariant_violations() == []
    assert all(np.isfinite(losses))
    used = int(table.used_slots())
    admitted, evicted = int(table.admitted.numpy()), int(table.evicted.numpy())
    # 240 ids drawn over 60 steps for 120 rows: rows filled, and stale ones freed.
    assert 0 < used <= CAPACITY and admitted == used + evicted and evicted > 0
    assert int(table.fallback_lookups.numpy()) > 0
    # A free row's Adagrad accumulator is its initial value: never trained, or reset.
    accumulator = state.dynamic_slots["user_id"][0][0].variable.numpy()
    free_rows = 4 + table.free_slots().numpy()
    assert len(free_rows) == CAPACITY - used
    assert np.all(accumulator[free_rows] == np.float32(0.1))
    # Admitted rows were trained: their accumulators grew.
    used_rows = 4 + np.array(sorted(_admitted(state).values()))
    assert np.any(accumulator[used_rows] > 0.1)

    Checkpoints(state, config.checkpoint).save()
    restored = TrainingState(config, strategy)
    assert Checkpoints(restored, config.checkpoint).restore() == 60
    (again,) = restored.model.dynamic["user_id"].shards
    assert again.invariant_violations() == []
    assert _admitted(restored) == _admitted(state)
    assert np.array_equal(again.last_seen.numpy(), table.last_seen.numpy())
    assert np.array_equal(again.pool.numpy(), table.pool.numpy())
    assert int(again.candidate_count.size()) == int(table.candidate_count.size())


def test_a_checkpoint_without_the_dynamic_state_is_refused(tmp_path: Path):
    config = _config(tmp_path)
    state = TrainingState(config, tf.distribute.get_strategy())
    # A checkpoint of the pool and the rest, but not of the index (as an older trainer
    # or a fixed table of the same shape would write).
    path = tf.train.Checkpoint(model=tf.Module(), slots=state.slots, step=state.step).write(
        str(tmp_path / "partial" / "ckpt")
    )
    with pytest.raises(AssertionError):
        state.restore_dynamic(path)


def _events(stdout: str) -> list[dict]:
    out = []
    for line in stdout.splitlines():
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
    return out


def _train(tmp_path: Path, steps: int) -> list[dict]:
    path = tmp_path / f"config-{steps}.json"
    path.write_text(json.dumps(_config(tmp_path, steps).to_wire()))
    # No TF_CONFIG: the trainer's single-process mode.
    env = {k: v for k, v in trainer_env().items() if k != "TF_CONFIG"}
    result = subprocess.run(
        [sys.executable, "-m", "etj_trainer", "--config", str(path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    return _events(result.stdout)


def _saved_invariants(path: str) -> int:
    """Check a saved dynamic table offline (index against row state); its rows in use."""
    reader = tf.train.load_checkpoint(path)
    base = "model/dynamic/user_id/shards/0"
    keys = reader.get_tensor(f"{base}/index/.ATTRIBUTES/table-keys")
    slots = reader.get_tensor(f"{base}/index/.ATTRIBUTES/table-values")
    row_key = reader.get_tensor(f"{base}/row_key/.ATTRIBUTES/VARIABLE_VALUE")
    last_seen = reader.get_tensor(f"{base}/last_seen/.ATTRIBUTES/VARIABLE_VALUE")
    assert len(set(keys.tolist())) == len(keys) and len(set(slots.tolist())) == len(slots)
    assert len(keys) <= CAPACITY and np.all((slots >= 0) & (slots < CAPACITY))
    assert np.array_equal(row_key[slots], keys)
    assert set(np.nonzero(last_seen != -1)[0].tolist()) == set(slots.tolist())
    return len(keys)


@pytest.mark.extended  # make test-all; CI runs the in-process sibling above (the same training and restore)
def test_the_trainer_process_trains_a_dynamic_table_and_resumes_from_its_checkpoint(
    tmp_path: Path,
):
    first = _train(tmp_path, 40)
    assert {"event": "done", "step": 40}.items() <= next(
        e for e in first if e.get("event") == "done"
    ).items()
    at_40 = tf.train.latest_checkpoint(str(tmp_path / "ckpt"))
    assert at_40 is not None and _saved_invariants(at_40) > 0
    second = _train(tmp_path, 60)
    restored = next(e for e in second if e.get("event") == "restored")
    assert restored["step"] == 40
    assert next(e for e in second if e.get("event") == "done")["step"] == 60
    assert _saved_invariants(tf.train.latest_checkpoint(str(tmp_path / "ckpt"))) > 0


def test_a_dynamic_table_trains_under_a_mirrored_strategy_as_the_same_table_everywhere(
    tmp_path: Path,
):
    """The MultiWorkerMirrored path in one process (the fast sibling of the same-math test
    below): a mirrored strategy with the replicas' keys gathered and counted in
    cross-replica context, the row state mirrored; admission, eviction and the invariants
    as alone."""
    config = _config(tmp_path)
    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    state = TrainingState(config, strategy, None, sync_replicas=True)
    (table,) = state.model.dynamic["user_id"].shards
    assert isinstance(table.last_seen, tf.distribute.DistributedValues)

    def dataset_fn(ctx: tf.distribute.InputContext) -> tf.data.Dataset:
        return make_dataset(config.model, config.data, 32)

    iterator = iter(strategy.distribute_datasets_from_function(dataset_fn))
    for _ in range(6):
        state.train_chunk(iterator, tf.constant(10, tf.int64))
        assert table.invariant_violations() == []
    stats = state.dynamic_stats()["user_id"]
    assert 0 < stats["rowsUsed"] <= CAPACITY and stats["evicted"] > 0
    assert stats["rowsUsed"] == int(table.used_slots())
    assert stats["fallbackLookups"] > 0


@pytest.mark.extended  # make test-all (minutes); CI runs the in-process sibling above
def test_same_math_alone_and_under_multi_worker_mirrored(tmp_path: Path) -> None:
    """Two workers, each on half of every batch, end with the pool, slots and tower one
    process trained on the whole batches gets: they counted the same keys, admitted the
    same ids into the same rows (a pass after every step) and trained them alike."""
    from zoo import same_math_mirrored

    spec = job_spec(
        model={
            "embeddings": [
                {
                    "name": "user_id",
                    "vocabularySize": 8,
                    "dimension": 8,
                    "dynamic": {"capacity": 48, "admitAfter": 2, "maintainEverySteps": 1},
                },
                {"name": "item_id", "vocabularySize": 200, "dimension": 8},
            ],
            "denseFeatures": 4,
            "hiddenUnits": [16],
        },
        training={"batchSizePerReplica": 32, "optimizer": "adagrad", "learningRate": 0.1},
    )
    same_math_mirrored(spec, tmp_path)


@pytest.mark.extended  # make test-all (a minute); CI runs test_dynamic_fused's in-process sibling
def test_same_math_alone_and_under_parameter_server(tmp_path: Path) -> None:
    """A chief, a worker and two ps (the dynamic table's index sharded over both) end a chunk with the tables, slots and tower one process gets: the worker counted
    the keys on each index shard's ps and read the rows packed with the hashed table's
    (``models.fused``); the counts are the same, and one pass then admits the same ids."""
    from zoo import same_math, zoo_spec

    # No pass within the 3 steps (a pass every 10): the script runs one after them.
    dynamic = {"capacity": 100, "admitAfter": 2, "maintainEverySteps": 10}
    spec = zoo_spec(
        {
            "embeddings": [
                {"name": "user_id", "vocabularySize": 16, "dimension": 8, "dynamic": dynamic},
                {"name": "item_id", "vocabularySize": 1500, "dimension": 8, "idsPerExample": 3},
            ]
        }
    )
    report = same_math(spec, tmp_path)
    assert report["shards"]["model/tables/0"] >= 2
    (counted_alone, counted_ps), (admitted_alone, admitted_ps) = (
        report["counted"],
        report["admitted"],
    )
    assert len(counted_alone["user_id"]) > 0 and counted_ps == counted_alone
    # Not vacuous: more ids were ready than the pool holds, so the pass chose among them.
    ready = [key for key, count in counted_alone["user_id"] if count >= 2]
    assert 0 < len(admitted_alone["user_id"]) <= 100 and len(ready) > 0
    assert admitted_ps == admitted_alone
