"""A ParameterServer job whose tables are on the ps' disks (``storage.disk``, a cache of
1 % of the rows) on a real cluster (chief + worker + 2 ps on 127.0.0.1): it trains, writes
its shard files where ``$ETJ_DISK_TABLES`` says, checkpoints with the keys of a table in
RAM, and a ps killed mid-training comes back from the last checkpoint with the restored
tables equal to it (digest of every table and slot against the checkpoint's tensors); the
job then finishes, and its checkpoint restores into one process with the tables in RAM.
One job for all of it: each stage needs the state the one before leaves."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from harness import LocalJob, assert_restored_as_saved, job_spec, trainer_config, wait_for

from etj_trainer import exitcodes

pytestmark = pytest.mark.trainer

EVERY = 100
# The hang net of a new chief's restore and first steps (its new worker traces beside it).
RESUMED = 600
TABLES = [
    {"name": "user_id", "vocabularySize": 5000, "dimension": 8},
    {"name": "item_id", "vocabularySize": 2000, "dimension": 8, "idsPerExample": 3},
]


def _on_disk(cache: float) -> list[dict[str, Any]]:
    return [
        {**t, "storage": {"disk": {"cacheRows": max(1, int(t["vocabularySize"] * cache))}}}
        for t in TABLES
    ]


@pytest.fixture(scope="module")
def kernels() -> Path:
    from etj_trainer.kernels import build

    return build.build()


@pytest.fixture
def job(kernels: Path, tmp_path: Path) -> Any:
    spec = job_spec(
        replicas={"chief": {"replicas": 1}, "worker": {"replicas": 1}, "ps": {"replicas": 2}},
        model={"embeddings": _on_disk(0.01), "denseFeatures": 4, "hiddenUnits": [16]},
        training={
            "batchSizePerReplica": 128,
            "steps": 1_000_000,
            "optimizer": "adagrad",
            "learningRate": 0.1,
            "stepsPerExecution": 10,
        },
    )
    config = trainer_config(
        spec, checkpoint_dir=tmp_path / "ckpt", every_steps=EVERY, keep=10, watchdog_seconds=300
    )
    (tmp_path / "disk").mkdir()
    j = LocalJob(config, tmp_path, workers=1, ps=2, env={"ETJ_DISK_TABLES": str(tmp_path / "disk")})
    try:
        yield j.start_all()
    finally:
        j.close()


def _checkpoints(job: LocalJob) -> list[int]:
    return [e["step"] for e in job.events() if e["event"] == "checkpoint"]


# A hang net: 35 s on an idle machine; a restarted ps took 5 minutes to import TensorFlow
# at a load of 36.
@pytest.mark.timeout(1800)
def test_a_disk_table_job_survives_a_ps_kill_and_restores_into_ram(
    job: LocalJob, tmp_path: Path
) -> None:
    def saved() -> int:
        job.check_chief_alive()
        return max([s for s in _checkpoints(job) if s > 0], default=0)

    wait_for(saved, RESUMED, "a first checkpoint")
    shards = sorted(p.name for p in (tmp_path / "disk").iterdir())
    assert shards and all(p.endswith(".rows") for p in shards), shards
    assert {p.split("-")[0] for p in shards} == {"user_id", "item_id"}, shards

    job.kill("ps", 0, signal.SIGKILL)
    assert job.wait_exit("chief", 0, timeout=300) == exitcodes.RETRYABLE
    job.start("ps", 0)
    latest = max(_checkpoints(job))
    total = latest + 2 * EVERY
    job.set_steps(total)
    job.restart_workers()
    job.start("chief", 0)
    restored = dict(wait_for(lambda: job.last("restored"), RESUMED, "the chief to restore"))
    assert restored["step"] == latest
    # The restored tables and slots (read back from the ps' files) sum to the checkpoint's.
    assert_restored_as_saved(restored)
    assert {"model/tables/0", "slots/tables/user_id/accumulator"} <= set(restored["digest"])
    done = job.wait_done(timeout=RESUMED)
    assert done["step"] == total

    # The last checkpoint, as a table in RAM reads it: the same keys and shapes.
    import tensorflow as tf

    final = tf.train.latest_checkpoint(str(tmp_path / "ckpt"))
    reader = tf.train.load_checkpoint(final)
    shapes = reader.get_variable_to_shape_map()
    assert shapes["model/tables/0/.ATTRIBUTES/VARIABLE_VALUE"] == [5000, 8]
    assert shapes["slots/tables/item_id/accumulator/.ATTRIBUTES/VARIABLE_VALUE"] == [2000, 8]
    accum = reader.get_tensor("slots/tables/user_id/accumulator/.ATTRIBUTES/VARIABLE_VALUE")
    assert np.all(accum >= 0.1) and np.any(accum > 0.1), "the slots trained and were saved"

    # Into another ps count (one process) with the tables in RAM: every value as saved.
    from etj_trainer.task.checkpoint import restore_in_pieces
    from etj_trainer.task.state import TrainingState

    spec = job_spec(model={"embeddings": TABLES, "denseFeatures": 4, "hiddenUnits": [16]})
    ram = TrainingState(trainer_config(spec), tf.distribute.get_strategy())
    restore_in_pieces(ram, final)
    for key, parts in ram.named_variables().items():
        value = np.concatenate([np.asarray(p.numpy()).reshape(-1) for p in parts])
        want = reader.get_tensor(f"{key}/.ATTRIBUTES/VARIABLE_VALUE").reshape(-1)
        np.testing.assert_array_equal(value, want, err_msg=key)
