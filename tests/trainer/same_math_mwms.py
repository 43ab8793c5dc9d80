"""The same-math check under MultiWorkerMirrored, run as each of 2 workers.

``same_math_mwms.py local <file.npz>`` trains a model alone (the default strategy) on the
full batches and saves its initial and final values (a process that will join a
MultiWorkerMirrored cluster may run nothing before: collectives are set up at start).
``same_math_mwms.py worker <file.npz>`` joins the 2-worker cluster of ``TF_CONFIG`` and
trains a fresh model from those initial values on its half of each batch (worker ``i``
takes rows ``i::2``).
The mean of the two halves' gradients is the full batch's gradient, so both end with the
same variables. Prints one JSON line, as ``same_math_chief.py``.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import tensorflow as tf
from same_math_chief import STEPS, assign, batches, values

from etj.api.trainer import TrainerConfig
from etj_trainer.task.state import TrainingState


def main() -> None:
    mode, path = sys.argv[1], sys.argv[2]
    config = TrainerConfig.model_validate_json(Path(os.environ["ETJ_TRAINER_CONFIG"]).read_text())
    data = batches(config)
    if mode == "local":
        steps = tf.constant(STEPS, tf.int64)
        local = TrainingState(config, tf.distribute.get_strategy())
        before = values(local)
        local.train_chunk(iter(tf.data.Dataset.from_tensor_slices(data)), steps)
        after = values(local)
        np.savez(
            path,
            **{f"before:{k}": v for k, v in before.items()},
            **{f"after:{k}": v for k, v in after.items()},
        )
        return
    saved = np.load(path)
    before = {k.removeprefix("before:"): saved[k] for k in saved.files if k.startswith("before:")}
    after_local = {
        k.removeprefix("after:"): saved[k] for k in saved.files if k.startswith("after:")
    }

    tf_config = json.loads(os.environ["TF_CONFIG"])
    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
        tf.train.ClusterSpec(tf_config["cluster"]),
        task_type="worker",
        task_id=tf_config["task"]["index"],
        rpc_layer="grpc",
    )
    strategy = tf.distribute.MultiWorkerMirroredStrategy(
        cluster_resolver=resolver,
        communication_options=tf.distribute.experimental.CommunicationOptions(
            implementation=tf.distribute.experimental.CommunicationImplementation.RING
        ),
    )
    steps = tf.constant(STEPS, tf.int64)  # (no TensorFlow op before the strategy exists)
    mirrored = TrainingState(config, strategy, None, sync_replicas=True)
    assign(mirrored, before)

    def dataset_fn(ctx: tf.distribute.InputContext) -> tf.data.Dataset:
        i, n = ctx.input_pipeline_id, ctx.num_input_pipelines
        return tf.data.Dataset.from_tensor_slices({k: v[:, i::n] for k, v in data.items()})

    iterator = iter(strategy.distribute_datasets_from_function(dataset_fn))
    mirrored.train_chunk(iterator, steps)
    after = values(mirrored)
    report = {
        "diff": {k: float(np.abs(after_local[k] - after[k]).max()) for k in after_local},
        "moved": {k: float(np.abs(after_local[k] - before[k]).max()) for k in after_local},
    }
    print("SAME_MATH " + json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
