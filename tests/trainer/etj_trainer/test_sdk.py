"""etj_trainer.sdk: the shard plan a job's own program reads, the partitioner that follows
it, and the progress the operator reads back (its metrics page and the TrainingComplete
termination message, parsed by the operator's own code)."""

from __future__ import annotations

import json
import time
import urllib.request
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from etj.api.constants import SHARD_PLAN_ENV, TERMINATION_LOG_ENV
from etj.api.plan import ShardPlan
from etj.api.trainer_reasons import REASON_COMPLETED
from etj.core.planner import build_plan
from etj.core.reconcile.progress import parse_completion, parse_progress
from etj.core.render import RenderSettings, build_config_map
from etj.local.launch import free_port
from etj_trainer import sdk

NOW = "2026-01-01T00:00:00Z"


def _plan() -> ShardPlan:
    from etj.api.job import EmbeddingTrainingJob

    job = EmbeddingTrainingJob.from_manifest(
        {
            "apiVersion": "training.etj.dev/v1alpha1",
            "kind": "EmbeddingTrainingJob",
            "metadata": {"name": "sdk"},
            "spec": {
                "strategy": "ParameterServer",
                "replicas": {"ps": {"replicas": 2}},
                "sharding": {"maxShardBytes": "1Mi"},
                "model": {
                    "embeddings": [
                        {"name": "user_id", "vocabularySize": 40000, "dimension": 16},
                        {"name": "item_id", "vocabularySize": 40000, "dimension": 16},
                    ]
                },
            },
        }
    )
    return build_plan(job.spec)


def test_the_plan_comes_from_the_file_etj_renders(tmp_path: Path, monkeypatch):
    plan = _plan()
    path = tmp_path / "shard-plan.json"
    path.write_text(json.dumps(plan.to_wire()))
    monkeypatch.setenv(SHARD_PLAN_ENV, str(path))
    assert sdk.load_shard_plan() == plan
    monkeypatch.delenv(SHARD_PLAN_ENV)
    with pytest.raises(sdk.SdkError, match=SHARD_PLAN_ENV):
        sdk.load_shard_plan()
    with pytest.raises(sdk.SdkError, match="cannot read"):
        sdk.load_shard_plan(tmp_path / "missing.json")


def test_the_rendered_config_map_file_loads():
    from etj.api.job import EmbeddingTrainingJob

    plan = _plan()
    job = EmbeddingTrainingJob.from_manifest(
        {
            "apiVersion": "training.etj.dev/v1alpha1",
            "kind": "EmbeddingTrainingJob",
            "metadata": {"name": "sdk"},
            "spec": {
                "model": {"embeddings": [{"name": "a", "vocabularySize": 10, "dimension": 2}]}
            },
        }
    )
    cm = build_config_map(job, build_plan(job.spec), RenderSettings())
    job_cm_plan = ShardPlan.model_validate_json(cm["data"]["shard-plan.json"])
    assert [t.name for t in job_cm_plan.tables] == ["a"]
    assert plan.tables[0].shards > 1


def test_partitioner_splits_named_tables_only():
    plan = _plan()
    part = sdk.PlanPartitioner(plan)
    shards = plan.tables[0].shards
    assert shards > 1
    assert part((40000, 16)) == [1, 1]  # not announced: whole
    with part.table("user_id") as t:
        assert t.name == "user_id"
        assert part((40000, 16)) == [shards, 1]
        assert part((3, 16)) == [3, 1]  # never an empty shard
    assert part((40000, 16)) == [1, 1]
    assert part(()) == []
    with (
        pytest.raises(sdk.SdkError, match="'usr_id' is not in the shard plan"),
        part.table("usr_id"),
    ):
        pass


def _ps_strategy(partitioner: sdk.PlanPartitioner) -> Any:
    """ParameterServerStrategy over TensorFlow's in-process cluster (one worker, two ps), as
    its tutorial builds one, with ``partitioner`` as its variable partitioner."""
    import tensorflow as tf

    spec = tf.train.ClusterSpec(
        {
            "worker": [f"127.0.0.1:{free_port()}"],
            "ps": [f"127.0.0.1:{free_port()}" for _ in range(2)],
        }
    )
    for job, tasks in (("worker", 1), ("ps", 2)):
        for i in range(tasks):
            tf.distribute.Server(spec, job_name=job, task_index=i, protocol="grpc", start=True)
    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(spec, rpc_layer="grpc")
    return tf.distribute.ParameterServerStrategy(resolver, variable_partitioner=partitioner)


def test_partitioner_under_parameter_server_strategy_follows_the_plan():
    import tensorflow as tf

    plan = _plan()
    part = sdk.PlanPartitioner(plan)
    strategy = _ps_strategy(part)
    with strategy.scope():
        with part.table("item_id"):
            table = tf.Variable(tf.zeros((40000, 16)), name="item_id")
        dense = tf.Variable(tf.zeros((40000, 16)), name="dense")
    assert len(table.variables) == plan.tables[1].shards
    assert {v.device.split("/task:")[1][0] for v in table.variables} == {"0", "1"}
    assert not hasattr(dense, "variables")


def test_is_leader():
    cluster = json.dumps({"cluster": {"chief": ["a"], "worker": ["b"]}})
    assert sdk.is_leader({"ETJ_REPLICA_TYPE": "chief", "ETJ_REPLICA_INDEX": "0"})
    worker0 = {"ETJ_REPLICA_TYPE": "worker", "ETJ_REPLICA_INDEX": "0"}
    assert not sdk.is_leader({**worker0, "TF_CONFIG": cluster})
    assert sdk.is_leader({**worker0, "TF_CONFIG": json.dumps({"cluster": {"worker": ["b"]}})})
    assert not sdk.is_leader({"ETJ_REPLICA_TYPE": "ps", "ETJ_REPLICA_INDEX": "0"})
    assert not sdk.is_leader({})


def test_progress_reaches_the_operator(tmp_path: Path, monkeypatch, capsys):
    port = free_port()
    termination = tmp_path / "termination-log"
    monkeypatch.setenv(TERMINATION_LOG_ENV, str(termination))
    now = [0.0]
    reporter = sdk.ProgressReporter(
        examples_per_step=32, interval=5, port=port, enabled=True, clock=lambda: now[0]
    )
    now[0] = 1.0
    assert reporter.step(10, loss=0.69) is not None  # the first step always reports
    now[0] = 2.0
    assert reporter.step(20, loss=0.6) is None  # within the interval
    reporter.checkpointed(20)
    now[0] = 10.0
    fields = reporter.step(200, loss=0.5, auc=0.7)
    assert fields is not None and fields["step"] == 200
    page = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=60).read().decode()
    progress = parse_progress(page, NOW)
    assert progress is not None
    assert (progress.step, progress.loss, progress.auc) == (200, 0.5, 0.7)
    assert progress.last_checkpoint_step == 20
    assert progress.examples_per_second == pytest.approx((200 - 10) * 32 / 9, abs=1e-3)
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [d["step"] for d in lines if d["event"] == "progress"] == [10, 200]
    reporter.step(250, loss=0.4)
    assert parse_progress(_page(port), NOW).finished_time is None
    before = time.time()
    reporter.complete()
    message = termination.read_text()
    assert message.startswith(f"{REASON_COMPLETED}: ")
    final, _ = parse_completion(message, NOW)
    assert final is not None and final.step == 250 and final.loss == 0.4
    # Set last, for the operator's stop of a leader that does not exit (whole seconds).
    finished = parse_progress(_page(port), NOW).finished_time
    assert finished is not None
    assert int(before) <= datetime.fromisoformat(finished).timestamp() <= time.time()


def _page(port: int) -> str:
    return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=60).read().decode()


def test_progress_is_silent_off_the_leader(tmp_path: Path, monkeypatch, capsys):
    termination = tmp_path / "termination-log"
    monkeypatch.setenv(TERMINATION_LOG_ENV, str(termination))
    monkeypatch.setenv("ETJ_REPLICA_TYPE", "worker")
    monkeypatch.setenv("ETJ_REPLICA_INDEX", "1")
    reporter = sdk.ProgressReporter(examples_per_step=1)
    assert reporter.step(5, loss=1.0, force=True) is None
    reporter.complete()
    assert capsys.readouterr().out == "" and not termination.exists()


def test_restore_in_pieces_reshards(tmp_path: Path):
    """A table saved whole restores into shards, row for row; a wrong key or shape is
    refused before anything is assigned."""
    import numpy as np
    import tensorflow as tf

    from etj_trainer.task.restore import CheckpointMismatch

    values = np.arange(10 * 4, dtype=np.float32).reshape(10, 4)
    whole = tf.Variable(values)
    path = tf.train.Checkpoint(table=tf.train.Checkpoint(user_id=whole)).write(
        str(tmp_path / "whole")
    )
    shards = [tf.Variable(tf.zeros((n, 4))) for n in (4, 3, 3)]

    class Sharded:  # the shape of a ShardedVariable: its components in row order
        variables = shards

    sdk.restore_in_pieces(path, {"table/user_id": Sharded()})
    np.testing.assert_array_equal(np.concatenate([s.numpy() for s in shards]), values)
    # ... and into one variable (shards saved, restored whole: the next test)
    again = tf.Variable(tf.zeros((10, 4)))
    sdk.restore_in_pieces(path, {"table/user_id": again})
    np.testing.assert_array_equal(again.numpy(), values)
    with pytest.raises(CheckpointMismatch, match="has no table/item_id"):
        sdk.restore_in_pieces(path, {"table/item_id": again})
    small = tf.Variable(tf.zeros((9, 4)))
    with pytest.raises(CheckpointMismatch, match="table resized"):
        sdk.restore_in_pieces(path, {"table/user_id": small})
    assert not small.numpy().any()


def test_restore_in_pieces_of_a_partitioned_table(tmp_path: Path):
    """Under ParameterServerStrategy: a table of the plan's shards, saved, restored into a
    whole variable and into the shards again, each shard on its own ps."""
    import numpy as np
    import tensorflow as tf

    plan = _plan()
    part = sdk.PlanPartitioner(plan)
    strategy = _ps_strategy(part)
    values = np.random.default_rng(0).random((40000, 16), dtype=np.float32)
    with strategy.scope():
        with part.table("user_id"):
            table = tf.Variable(values, name="user_id")
        with part.table("item_id"):
            empty = tf.Variable(tf.zeros((40000, 16)), name="item_id")
    assert len(table.variables) == plan.tables[0].shards > 1
    path = tf.train.Checkpoint(user_id=table).write(str(tmp_path / "ckpt"))
    sdk.restore_in_pieces(path, {"user_id": empty})
    assert len({v.device for v in empty.variables}) == 2  # on both ps
    restored = np.concatenate([v.numpy() for v in empty.variables])
    np.testing.assert_array_equal(restored, values)
    whole = tf.Variable(tf.zeros((40000, 16)))
    sdk.restore_in_pieces(path, {"user_id": whole})
    np.testing.assert_array_equal(whole.numpy(), values)


def test_checkpoint_dir_and_metrics_port_come_from_the_trainer_config(tmp_path: Path):
    from etj.api.job import EmbeddingTrainingJob
    from etj.core.render import build_trainer_config

    job = EmbeddingTrainingJob.from_manifest(
        {
            "apiVersion": "training.etj.dev/v1alpha1",
            "kind": "EmbeddingTrainingJob",
            "metadata": {"name": "sdk"},
            "spec": {
                "model": {"embeddings": [{"name": "a", "vocabularySize": 10, "dimension": 2}]}
            },
        }
    )
    config = build_trainer_config(job, build_plan(job.spec), RenderSettings(metrics_port=9999))
    path = tmp_path / "trainer.json"
    path.write_text(json.dumps(config.to_wire()))
    env = {"ETJ_TRAINER_CONFIG": str(path)}
    assert sdk.checkpoint_dir(env) == "/var/lib/etj/checkpoints/sdk"
    assert sdk.metrics_port(env) == 9999
    assert sdk.metrics_port({**env, "ETJ_METRICS_PORT": "1234"}) == 1234
    assert sdk.checkpoint_dir({}) is None and sdk.metrics_port({}) is None
