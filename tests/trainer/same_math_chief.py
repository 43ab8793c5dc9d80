"""The same-math check, run as a chief process (``python same_math_chief.py``).

Builds the model of the trainer config named by ``ETJ_TRAINER_CONFIG`` twice from the same
seed: in this process alone (the default strategy), then under ParameterServerStrategy on
the cluster of ``TF_CONFIG`` (its ps and worker started by the test). Both take the same
fixed batches (``STEPS`` training steps, one chunk; a model with dynamic tables two chunks,
each table's pass after each: in-step alone, by this coordinator under
ParameterServer, as the trainer's loop runs it); the script prints one JSON line: the
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


def batches(config: TrainerConfig, chunks: int = 1) -> dict[str, np.ndarray]:
    """``STEPS`` batches a chunk (leading axis) of etj's own layout: ids, dense features,
    labels."""
    rng = np.random.default_rng(7)
    n = config.training.batch_size_per_replica
    out: dict[str, np.ndarray] = {}
    for t in config.model.embeddings:
        # Small ids so that a batch repeats some: repeated rows must add up the same way.
        # A dynamic table's ids are keys: more of them than its pool has rows.
        rows = t.vocabulary_size + (t.dynamic.capacity if t.dynamic else 0)
        out[t.name] = rng.integers(0, min(rows, 3 * n), (STEPS * chunks, n, t.ids_per_example))
    if config.model.dense_inputs:
        out[DENSE_KEY] = rng.normal(size=(STEPS * chunks, n, config.model.dense_inputs)).astype(
            np.float32
        )
    out[LABEL_KEY] = rng.integers(0, 2, (STEPS * chunks, n)).astype(np.float32)
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


def main() -> None:
    config = TrainerConfig.model_validate_json(Path(os.environ["ETJ_TRAINER_CONFIG"]).read_text())
    dynamic = any(t.dynamic for t in config.model.embeddings)
    chunks = 2 if dynamic else 1
    data = batches(config, chunks)

    def dataset() -> tf.data.Dataset:
        return tf.data.Dataset.from_tensor_slices(data)

    steps = tf.constant(STEPS, tf.int64)
    local = TrainingState(config, tf.distribute.get_strategy())
    before = values(local)
    it = iter(dataset())
    losses_local = [float(local.train_chunk(it, steps)[0].numpy()) for _ in range(chunks)]
    loss_local = losses_local[-1]
    after_local = values(local)
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
    for chunk in range(chunks):
        result = coordinator.schedule(ps.train_chunk, args=(iterator, steps))
        coordinator.join()
        # The coordinator's pass between chunks (alone, the step function ran it).
        ps.maintain_between_steps((chunk + 1) * STEPS)
    loss_ps = float(np.asarray(result.fetch()[0]))
    after_ps = values(ps)

    report: dict[str, Any] = {
        "loss": [loss_local, loss_ps],
        "shards": shards,
        "devices": devices,
        "initial": {k: float(np.abs(before[k] - start[k]).max()) for k in before},
        "diff": {k: float(np.abs(after_local[k] - after_ps[k]).max()) for k in after_local},
        "moved": {k: float(np.abs(after_local[k] - before[k]).max()) for k in after_local},
        # Per dynamic table, each run's admitted keys and their rows.
        "dynamic": {
            name: [
                [a.tolist() for a in state.model.dynamic[name].admitted_rows()]
                for state in (local, ps)
            ]
            for name in local.model.dynamic
        },
    }
    print("SAME_MATH " + json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
