"""The same-math check, run as a chief process (``python same_math_chief.py``).

Builds the model of the trainer config named by ``ETJ_TRAINER_CONFIG`` twice from the same
seed: in this process alone (the default strategy), then under ParameterServerStrategy on
the cluster of ``TF_CONFIG`` (its ps and worker started by the test). Both take the same
fixed batches (``STEPS`` training steps, one chunk); the script prints one JSON line: the
loss of each, and per saved variable the largest difference between the two runs and
how far training moved it. Kept apart from the pytest process: a process that joined a
cluster cannot leave it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf

from etj.api.trainer import TrainerConfig
from etj_trainer.data.batch import DENSE_KEY, LABEL_KEY
from etj_trainer.models.ctr import TablePartitioner
from etj_trainer.task.state import TrainingState

STEPS = 3


def batches(config: TrainerConfig) -> dict[str, np.ndarray]:
    """``STEPS`` batches (leading axis) of etj's own layout: ids, dense features, labels."""
    rng = np.random.default_rng(7)
    n = config.training.batch_size_per_replica
    out: dict[str, np.ndarray] = {}
    for t in config.model.embeddings:
        # Small ids so that a batch repeats some: repeated rows must add up the same way.
        # A dynamic table's ids are keys: more of them than its pool has rows.
        rows = t.vocabulary_size + (t.dynamic.capacity if t.dynamic else 0)
        out[t.name] = rng.integers(0, min(rows, 3 * n), (STEPS, n, t.ids_per_example))
    if config.model.dense_inputs:
        out[DENSE_KEY] = rng.normal(size=(STEPS, n, config.model.dense_inputs)).astype(np.float32)
    out[LABEL_KEY] = rng.integers(0, 2, (STEPS, n)).astype(np.float32)
    return out


def values(state: TrainingState) -> dict[str, np.ndarray]:
    return {
        key: np.concatenate([np.asarray(c.numpy(), np.float64).reshape(-1) for c in parts])
        for key, parts in state.named_variables().items()
    }


def assign(state: TrainingState, flat: dict[str, np.ndarray]) -> None:
    """Set every saved variable of ``state`` (shard by shard) to the flat values given."""
    for key, parts in state.named_variables().items():
        offset = 0
        for c in parts:
            size = int(np.prod(c.shape))
            c.assign(
                flat[key][offset : offset + size].reshape(c.shape).astype(c.dtype.as_numpy_dtype)
            )
            offset += size
        assert offset == flat[key].size, key


def counted(state: TrainingState) -> dict[str, list[list[int]]]:
    """Per dynamic table, every candidate key and its count, by key (all shards)."""
    out = {}
    for name, table in state.model.dynamic.items():
        pairs = []
        for shard in table.shards:
            keys, counts = (t.numpy().reshape(-1).tolist() for t in shard.candidate_count.export())
            pairs += zip(keys, counts, strict=True)
        out[name] = [list(p) for p in sorted(pairs)]
    return out


def admit(state: TrainingState) -> dict[str, list[int]]:
    """Per dynamic table, one pass (at step ``STEPS``), then its admitted keys: a sharded
    table places them in other rows than one process does (each shard allocates its own),
    so the keys, not the rows, are compared."""

    def passes() -> None:
        for name, table in state.model.dynamic.items():
            table.maintain(tf.constant(STEPS, tf.int64), state.dynamic_slots[name])

    tf.function(passes)()
    return {n: t.admitted_rows()[0].tolist() for n, t in state.model.dynamic.items()}


def main() -> None:
    config = TrainerConfig.model_validate_json(Path(os.environ["ETJ_TRAINER_CONFIG"]).read_text())
    data = batches(config)

    def dataset() -> tf.data.Dataset:
        return tf.data.Dataset.from_tensor_slices(data)

    steps = tf.constant(STEPS, tf.int64)
    local = TrainingState(config, tf.distribute.get_strategy())
    before = values(local)
    loss_local = float(local.train_chunk(iter(dataset()), steps)[0].numpy())
    after_local = values(local)
    # A dynamic table's counting, then its pass: read before this process joins the
    # cluster (its local devices go then).
    counted_local = counted(local)
    admitted_local = admit(local)

    cluster = json.loads(os.environ["TF_CONFIG"])["cluster"]
    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
        tf.train.ClusterSpec(cluster), task_type="chief", task_id=0, rpc_layer="grpc"
    )
    partitioner = TablePartitioner()
    strategy = tf.distribute.experimental.ParameterServerStrategy(
        resolver, variable_partitioner=partitioner
    )
    coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
    ps = TrainingState(config, strategy, partitioner)
    shards = {k: len(v) for k, v in ps.named_variables().items()}
    devices = {k: [c.device for c in v] for k, v in ps.named_variables().items()}
    # A sharded table's initial rows are seeded per shard: start from the local values.
    assign(ps, before)
    start = values(ps)
    iterator = iter(coordinator.create_per_worker_dataset(dataset))
    result = coordinator.schedule(ps.train_chunk, args=(iterator, steps))
    coordinator.join()
    loss_ps = float(np.asarray(result.fetch()[0]))
    after_ps = values(ps)
    counted_ps = counted(ps)
    admitted_ps = admit(ps)

    report: dict[str, Any] = {
        "loss": [loss_local, loss_ps],
        "shards": shards,
        "devices": devices,
        "initial": {k: float(np.abs(before[k] - start[k]).max()) for k in before},
        "diff": {k: float(np.abs(after_local[k] - after_ps[k]).max()) for k in after_local},
        "moved": {k: float(np.abs(after_local[k] - before[k]).max()) for k in after_local},
        # Per dynamic table, each run's candidates and counts, and the ids one pass admits.
        "counted": [counted_local, counted_ps],
        "admitted": [admitted_local, admitted_ps],
    }
    print("SAME_MATH " + json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
