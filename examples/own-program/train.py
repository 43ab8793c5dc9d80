"""Your own TensorFlow program under etj: examples/own-program.yaml runs it.

Written the way TensorFlow's ParameterServerStrategy tutorial writes one: ps and workers
start their own ``tf.distribute.Server`` and wait; the chief builds a
``ClusterCoordinator``, a ``tf_keras`` model under the strategy's scope and a per-worker
dataset, and schedules steps. The lines using ``etj_trainer.sdk`` give it etj's shard plan
(the embedding table split as planned) and progress (``kubectl get etj`` shows the step
and loss; the job's status has the final step).

    etj run examples/own-program.yaml      # on this machine
    kubectl apply -f examples/own-program.yaml   # with the program in your image

(tests/local/etj/local/test_runner_own_program.py runs this job, with a worker killed mid-way.)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import tensorflow as tf
import tf_keras

from etj_trainer import sdk


def note(scratch: str | None, task: str) -> None:
    """Leave a mark in the template's scratch volume: one line per start of this task."""
    if scratch:
        with open(Path(scratch) / f"{task}.starts", "a") as f:
            f.write(f"{os.getpid()}\n")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--steps-per-join", type=int, default=20)
    parser.add_argument("--checkpoint-every", type=int, default=500)
    args = parser.parse_args()

    # The tutorial's advice: RPCs to a lost worker fail fast, so its closures move on.
    os.environ["GRPC_FAIL_FAST"] = "use_caller"
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    task_type, task_id = resolver.task_type, resolver.task_id
    note(os.environ.get("SCRATCH"), f"{task_type}-{task_id}")

    if task_type in ("worker", "ps"):
        # As in the tutorial: a server per worker/ps, serving until it is stopped.
        server = tf.distribute.Server(
            resolver.cluster_spec(),
            job_name=task_type,
            task_index=task_id,
            protocol=resolver.rpc_layer or "grpc",
            start=True,
        )
        server.join()
        return 0

    # The chief: the coordinator.
    plan = sdk.load_shard_plan()
    table = plan.tables[0]
    partitioner = sdk.PlanPartitioner(plan)
    strategy = tf.distribute.ParameterServerStrategy(resolver, variable_partitioner=partitioner)
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    with strategy.scope():
        with partitioner.table(table.name):
            embedding = tf_keras.layers.Embedding(table.rows, table.dimension)
            embedding.build((None,))
        head = tf_keras.layers.Dense(1)
        head.build((None, table.dimension))
        optimizer = tf_keras.optimizers.legacy.SGD(learning_rate=0.5)
        step = tf.Variable(0, dtype=tf.int64, trainable=False)
    shards = len(getattr(embedding.embeddings, "variables", [embedding.embeddings]))
    print(json.dumps({"event": "table", "name": table.name, "shards": shards}), flush=True)

    rows = table.rows

    def dataset_fn(_: tf.distribute.InputContext | None = None) -> tf.data.Dataset:
        ids = tf.data.Dataset.range(1 << 30).map(lambda i: (i * 7919) % rows)
        # The click signal: even ids are clicked.
        return ids.map(lambda i: (i, tf.cast(i % 2 == 0, tf.float32))).batch(args.batch)

    @tf.function
    def per_worker_dataset_fn() -> tf.distribute.DistributedDataset:
        return strategy.distribute_datasets_from_function(dataset_fn)

    per_worker_dataset = coordinator.create_per_worker_dataset(per_worker_dataset_fn)
    per_worker_iterator = iter(per_worker_dataset)

    @tf.function
    def step_fn(iterator: tf.distribute.DistributedIterator) -> tf.Tensor:
        def replica_fn(batch: tuple[tf.Tensor, tf.Tensor]) -> tf.Tensor:
            ids, labels = batch
            with tf.GradientTape() as tape:
                logits = tf.squeeze(head(embedding(ids)), -1)
                loss = tf.reduce_mean(
                    tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits)
                )
            variables = embedding.trainable_variables + head.trainable_variables
            grads = tape.gradient(loss, variables)
            optimizer.apply_gradients(zip(grads, variables, strict=True))
            return loss

        losses = strategy.run(replica_fn, args=(next(iterator),))
        return strategy.reduce(tf.distribute.ReduceOp.MEAN, losses, axis=None)

    # Checkpoints in etj's checkpoint volume; a restarted chief resumes from the newest, the
    # table shard by shard on its ps (sdk.restore_in_pieces), the rest as usual.
    directory = sdk.checkpoint_dir()
    manager = None
    if directory:
        ckpt = tf.train.Checkpoint(user_id=embedding.embeddings, head=head, step=step)
        manager = tf.train.CheckpointManager(ckpt, directory, max_to_keep=2)
        if manager.latest_checkpoint:
            path = manager.latest_checkpoint
            sdk.restore_in_pieces(path, {"user_id": embedding.embeddings})
            tf.train.Checkpoint(head=head, step=step).read(path).expect_partial()
            print(json.dumps({"event": "restored", "step": int(step.numpy())}), flush=True)

    reporter = sdk.ProgressReporter(examples_per_step=args.batch)
    done = int(step.numpy())
    while done < args.steps:
        chunk = min(args.steps_per_join, args.steps - done)
        results = [coordinator.schedule(step_fn, args=(per_worker_iterator,)) for _ in range(chunk)]
        coordinator.join()  # a failed worker's closures run again on another worker
        done += chunk
        reporter.step(done, loss=float(results[-1].fetch()))
        crossed = done // args.checkpoint_every > (done - chunk) // args.checkpoint_every
        if manager is not None and (crossed or done == args.steps):
            step.assign(done)
            manager.save()
            reporter.checkpointed(done)
    reporter.complete()
    return 0


if __name__ == "__main__":
    sys.exit(main())
