"""Warm start (``config.warm_start``, spec.warmStart) in real trainer processes.

A source job (ParameterServer, 2 ps) trains and checkpoints. A second job warm-starts from
its checkpoint directory into 3 ps and other shards, with a table added and one table
stored as bfloat16: each restored table (and its Adagrad slot) equals the source's (the
chief's ``restored`` digest against the source checkpoint read here), the added table
starts fresh, the tower (whose input grew) keeps the source's weights but the new input's
rows of its first layer, training runs from step 0. Its
restart, once it has a checkpoint of its own, restores that one and not the source again.
A table whose vocabularySize changed is refused before any step, naming the table, unless
the job lists it in freshTables; the source's files are never written.
"""

from __future__ import annotations

import hashlib
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from harness import LocalJob, job_spec, saved_invariants, trainer_config, wait_for

from etj.api.trainer import TrainerConfig
from etj.api.warmstart import CHECKPOINT_MANIFEST_FILE, TrainerWarmStart
from etj.core.reconcile.progress import parse_warm_start
from etj_trainer import exitcodes

SOURCE_STEPS = 100


def _tables(user_rows: int = 5000, user_dtype: str = "float32", extra: bool = False) -> list:
    tables: list[dict[str, Any]] = [
        {"name": "user_id", "vocabularySize": user_rows, "dimension": 8, "dtype": user_dtype},
        {"name": "item_id", "vocabularySize": 2000, "dimension": 8, "idsPerExample": 3},
    ]
    if extra:
        tables.append({"name": "ad_id", "vocabularySize": 300, "dimension": 4})
    return tables


def _spec(tables: list, ps: int | None, steps: int, max_shard: str = "64Ki") -> Any:
    replicas: dict[str, Any] = (
        {"chief": {"replicas": 1}, "worker": {"replicas": 1}, "ps": {"replicas": ps}}
        if ps
        else {"chief": {"replicas": 0}, "worker": {"replicas": 1}}
    )
    return job_spec(
        strategy="ParameterServer" if ps else "MultiWorkerMirrored",
        replicas=replicas,
        model={"embeddings": tables, "denseFeatures": 4, "hiddenUnits": [16]},
        training={
            "batchSizePerReplica": 128,
            "steps": steps,
            "optimizer": "adagrad",
            "learningRate": 0.1,
            "stepsPerExecution": 10,
        },
        sharding={"maxShardBytes": max_shard},
    )


def _with_warm_start(config: TrainerConfig, location: Path, **options: Any) -> TrainerConfig:
    ws = TrainerWarmStart(location=str(location), source=f"test {location.name}", **options)
    return config.model_copy(update={"warm_start": ws})


def _files_digest(directory: Path) -> dict[str, str]:
    return {
        str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The checkpoints of a 2-ps job at step 100 (user_id in 6 shards, item_id in 2)."""
    workdir = tmp_path_factory.mktemp("warm-src")
    config = trainer_config(
        _spec(_tables(), 2, SOURCE_STEPS), checkpoint_dir=workdir / "ckpt", every_steps=100
    )
    assert [t.shards for t in config.shard_plan.tables] == [6, 2]
    with LocalJob(config, workdir, workers=1, ps=2) as job:
        job.start_all()
        assert job.wait_done(timeout=300)["step"] == SOURCE_STEPS
    assert (workdir / "ckpt" / CHECKPOINT_MANIFEST_FILE).exists()
    return workdir / "ckpt"


def _saved_sum(path: str, key: str, dtype: str = "float32") -> float:
    import numpy as np
    import tensorflow as tf

    value = tf.train.load_checkpoint(path).get_tensor(f"{key}/.ATTRIBUTES/VARIABLE_VALUE")
    if dtype != "float32":
        value = tf.cast(tf.cast(value, getattr(tf, dtype)), tf.float64).numpy()
    return float(np.asarray(value, np.float64).sum())


def _scraped(port: int) -> Any:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            return parse_warm_start(resp.read().decode())
    except OSError:
        return None


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-6 + 1e-6 * abs(b)


def test_warm_start_into_more_ps_with_a_table_added_then_a_restart_resumes_its_own(
    source: Path, tmp_path: Path
) -> None:
    before = _files_digest(source)
    config = trainer_config(
        _spec(_tables(user_dtype="bfloat16", extra=True), 3, 40, max_shard="48Ki"),
        checkpoint_dir=tmp_path / "ckpt",
        every_steps=20,
    )
    # 3 ps (the source had 2), item_id in 3 shards (it was in 2): other rows per shard.
    assert [t.shards for t in config.shard_plan.tables] == [6, 3, 1]
    assert config.shard_plan.ps_replicas == 3
    config = _with_warm_start(config, source)
    with LocalJob(config, tmp_path / "run", workers=1, ps=3) as job:
        job.start_all()
        warm = dict(wait_for(lambda: job.last("warmStarted"), 240, "the warm start"))
        restored = dict(wait_for(lambda: job.last("restored"), 120, "the restored line"))
        assert warm["sourceStep"] == SOURCE_STEPS and warm["step"] == 0
        assert warm["path"] == str(source / f"ckpt-{SOURCE_STEPS}")
        actions = {t["name"]: (t["action"], t.get("reason", "")) for t in warm["tables"]}
        assert actions["user_id"] == ("Restored", "float32 -> bfloat16; adagrad state kept")
        assert actions["item_id"] == ("Restored", "adagrad state kept")
        assert actions["ad_id"] == ("StartedFresh", "not in the checkpoint")
        # A third table widens the tower's input: the first layer keeps the rows of the
        # inputs the source had, the other layers are the source's.
        assert warm["tower"] == (
            "partly restored (its inputs changed): mlp/0/bias, mlp/1/kernel, mlp/1/bias "
            "whole; mlp/0/kernel (rows of user_id, item_id, dense) by input; nothing fresh "
            "(adagrad state kept)"
        ), warm["tower"]
        assert restored["step"] == 0 and restored["warmStart"] is True
        # The same decisions on the metrics page, as the operator reads them into
        # status.warmStart.
        report = wait_for(lambda: _scraped(job.metrics_port), 120, "the metrics page")
        assert report[0] == SOURCE_STEPS
        assert [t.to_wire() for t in report[1]] == warm["tables"]
        path, digest = restored["path"], restored["digest"]
        # Tables by name (the checkpoint keys them by position: the same here, 0 and 1).
        assert _close(digest["model/tables/0"], _saved_sum(path, "model/tables/0", "bfloat16"))
        assert _close(digest["model/tables/1"], _saved_sum(path, "model/tables/1"))
        for table in ("user_id", "item_id"):
            key = f"slots/tables/{table}/accumulator"
            assert _close(digest[key], _saved_sum(path, key)), key
        assert job.wait_done(timeout=300)["step"] == 40
    assert (tmp_path / "ckpt" / "ckpt-40.index").exists()
    assert _files_digest(source) == before, "a warm start must not write the source's files"

    # A restart after the job has checkpoints of its own: its own, never the source again.
    config = config.model_copy(
        update={"training": config.training.model_copy(update={"steps": 60})}
    )
    with LocalJob(config, tmp_path / "again", workers=1, ps=3) as job:
        job.start_all()
        restored = dict(wait_for(lambda: job.last("restored"), 240, "the restore"))
        assert restored["path"] == str(tmp_path / "ckpt" / "ckpt-40")
        assert restored["step"] == 40 and restored["warmStart"] is False
        assert job.last("warmStarted") is None
        assert job.wait_done(timeout=300)["step"] == 60


def _refused(config: TrainerConfig, workdir: Path) -> dict[str, Any]:
    with LocalJob(config, workdir, workers=1, ps=0, chief=False) as job:
        job.start_all()
        assert job.wait_exit("worker", 0, timeout=180) == exitcodes.USAGE
        error = job.last("error", "worker")
        assert error is not None and error["reason"] == "CheckpointMismatch", error
        assert job.last("progress", "worker") is None, "no step may run"
        return error


def test_a_changed_vocabulary_size_is_refused_naming_the_table(
    source: Path, tmp_path: Path
) -> None:
    config = trainer_config(
        _spec(_tables(user_rows=6000), None, 20), checkpoint_dir=tmp_path / "ckpt"
    )
    error = _refused(_with_warm_start(config, source), tmp_path / "run")
    message = error["message"]
    assert "table user_id: vocabularySize 5000 in the checkpoint, 6000 here" in message
    assert "warmStart.freshTables" in message
    assert not list((tmp_path / "ckpt").glob("ckpt-*")), "nothing trained, nothing saved"


def test_a_table_named_fresh_starts_fresh_and_the_rest_is_restored(
    source: Path, tmp_path: Path
) -> None:
    """One process (MultiWorkerMirrored, one worker) from the 2-ps checkpoint: the resized
    table named in freshTables starts fresh, item_id and the unchanged tower are restored,
    the optimizer state reset as asked, the step count continued."""
    config = trainer_config(
        _spec(_tables(user_rows=6000), None, SOURCE_STEPS + 20),
        checkpoint_dir=tmp_path / "ckpt",
        every_steps=20,
    )
    config = _with_warm_start(
        config, source, fresh_tables=["user_id"], keep_optimizer=False, continue_steps=True
    )
    with LocalJob(config, tmp_path / "run", workers=1, ps=0, chief=False) as job:
        job.start_all()
        warm = dict(wait_for(lambda: job.last("warmStarted", "worker"), 240, "the warm start"))
        actions = {t["name"]: t["action"] for t in warm["tables"]}
        assert actions == {"user_id": "StartedFresh", "item_id": "Restored"}
        assert warm["tower"] == "restored (optimizer state reset)"
        assert warm["step"] == SOURCE_STEPS
        restored = dict(wait_for(lambda: job.last("restored", "worker"), 120, "restored"))
        digest = restored["digest"]
        path = restored["path"]
        assert _close(digest["model/tables/1"], _saved_sum(path, "model/tables/1"))
        assert _close(digest["model/tower_params"], _saved_sum(path, "model/tower_params"))
        # Reset: Adagrad's initial accumulator, not the source's.
        saved = _saved_sum(path, "slots/tables/item_id/accumulator")
        assert not _close(digest["slots/tables/item_id/accumulator"], saved)
        assert not _close(digest["model/tables/0"], _saved_sum(path, "model/tables/0"))
        done = wait_for(lambda: job.last("done", "worker"), 300, "the end")
        assert done["step"] == SOURCE_STEPS + 20


DYNAMIC = {"capacity": 600, "admitAfter": 2, "evictAfterSteps": 40, "maintainEverySteps": 20}


def _keys(path: str, shards: int) -> list[int]:
    """The admitted ids in row order (each shard's rows in order), as ``_last_seen``'s."""
    import tensorflow as tf

    reader = tf.train.load_checkpoint(path)
    out: list[int] = []
    for i in range(shards):
        base = f"model/dynamic/user_id/shards/{i}"
        row_key = reader.get_tensor(f"{base}/row_key/.ATTRIBUTES/VARIABLE_VALUE")
        last = reader.get_tensor(f"{base}/last_seen/.ATTRIBUTES/VARIABLE_VALUE")
        out += row_key[last != -1].tolist()
    return out


def _last_seen(path: str, shards: int) -> Any:
    import numpy as np
    import tensorflow as tf

    reader = tf.train.load_checkpoint(path)
    return np.concatenate(
        [
            reader.get_tensor(
                f"model/dynamic/user_id/shards/{i}/last_seen/.ATTRIBUTES/VARIABLE_VALUE"
            )
            for i in range(shards)
        ]
    )


def _rows_of_ids(path: str, shards: int, fallback: int) -> dict[int, Any]:
    """Each admitted id's vector in a checkpoint of the dynamic table user_id (table 0)."""
    import tensorflow as tf

    reader = tf.train.load_checkpoint(path)
    table = reader.get_tensor("model/tables/0/.ATTRIBUTES/VARIABLE_VALUE")
    out, first = {}, fallback
    for i in range(shards):
        base = f"model/dynamic/user_id/shards/{i}"
        keys = reader.get_tensor(f"{base}/index/.ATTRIBUTES/table-keys")
        slots = reader.get_tensor(f"{base}/index/.ATTRIBUTES/table-values")
        for k, slot in zip(keys.tolist(), slots.tolist(), strict=True):
            out[k] = table[first + slot]
        first += len(reader.get_tensor(f"{base}/last_seen/.ATTRIBUTES/VARIABLE_VALUE"))
    return out


@pytest.mark.extended  # make test-all; CI has the ParameterServer warm start into more ps above, a dynamic table restored into another layout (models/test_dynamic_relayout.py) and `etj run`'s warm starts
def test_a_dynamic_table_warm_starts_into_more_ps_and_a_smaller_pool(tmp_path: Path) -> None:
    """A dynamic table saved by 2 ps in 8 shards of a 600-row pool goes on in 3 ps, 18
    shards, a 240-row pool: each id kept has its saved vector at its new row (an id the new
    job did not see yet, compared after its first steps), the ids that do not fit are
    dropped (counted as evicted), the step count restarts at 0 and each row's last-seen
    step moves back with it, so a row of the source unseen for evictAfterSteps of the new
    job is evicted (not kept until the new job passes the source's step)."""
    tables = [
        {"name": "user_id", "vocabularySize": 4, "dimension": 8, "dynamic": DYNAMIC},
        {"name": "item_id", "vocabularySize": 2000, "dimension": 8},
    ]
    src = trainer_config(_spec(tables, 2, SOURCE_STEPS), checkpoint_dir=tmp_path / "src")
    with LocalJob(src, tmp_path / "src-run", workers=1, ps=2) as job:
        job.start_all()
        assert job.wait_done(timeout=300)["step"] == SOURCE_STEPS
    src_shards = src.shard_plan.tables[0].shards
    src_path = str(tmp_path / "src" / f"ckpt-{SOURCE_STEPS}")
    saved = saved_invariants(src_path, src_shards)
    assert saved["used"] > 240, "the new pool must be too small for them all"
    smaller = [{**tables[0], "dynamic": {**DYNAMIC, "capacity": 240}}, tables[1]]
    config = trainer_config(
        _spec(smaller, 3, 60, max_shard="32Ki"), checkpoint_dir=tmp_path / "dst", every_steps=20
    )
    shards = config.shard_plan.tables[0].shards
    assert config.shard_plan.ps_replicas == 3 and shards != src_shards
    config = _with_warm_start(config, tmp_path / "src")
    with LocalJob(config, tmp_path / "dst-run", workers=1, ps=3) as job:
        job.start_all()
        warm = dict(wait_for(lambda: job.last("warmStarted"), 240, "the warm start"))
        assert warm["tables"][0]["reason"].startswith("capacity 600 -> 240")
        assert [t["action"] for t in warm["tables"]] == ["Restored", "Restored"]
        assert job.wait_done(timeout=300)["step"] == 60
        log = job.log_path("chief", 0).read_text()
    assert "dynamic table user_id saved with capacity 600, restored into 240" in log
    at_20 = str(tmp_path / "dst" / "ckpt-20")
    kept = saved_invariants(at_20, shards)
    assert 0 < kept["used"] <= 240 and kept["evicted"] > saved["evicted"]
    seen = _last_seen(at_20, shards)
    # Rebased: none seen "after" the new job's step, the source's rows older than 0.
    assert seen.max() <= 20, seen.max()
    untouched = seen < 0
    assert untouched.any(), "rows of the source keep their age, below 0"
    # An id kept and not seen by the new job yet still has the source's vector, exactly.
    before, after = _rows_of_ids(src_path, src_shards, 4), _rows_of_ids(at_20, shards, 4)
    unseen = [k for k, s in zip(_keys(at_20, shards), seen[seen != -1], strict=True) if s < 0]
    assert unseen
    for k in unseen:
        np.testing.assert_array_equal(after[k], before[k])
    seen = _last_seen(str(tmp_path / "dst" / "ckpt-60"), shards)
    # Every row still held was seen within evictAfterSteps of the last pass (step 60).
    assert seen[seen != -1].min() > 60 - 40 - DYNAMIC["maintainEverySteps"], seen
