"""A stand-in for Kubeflow's dist-mnist program (tests/cases/tfjob/dist-mnist.yaml): TF1-style
between-graph replication, PS + Worker and no Chief, where worker 0 is the chief.

Every task starts a ``tf.distribute.Server`` from TF_CONFIG, as the TFJob's program does;
the ps serve until they are stopped. Each worker builds the same small linear model with
its variables on the ps (``replica_device_setter``) and trains it in a
``MonitoredTrainingSession`` until the shared global step reaches ``--train_steps``; worker 0
(``is_chief``, by TFJob's rule, which ``etj_trainer.sdk.is_leader`` follows) initialises
the variables and reports progress. Each task writes one JSON line ``{"event": "role", ...}``
saying what it saw, so the test can check the roles. No data: the examples are random.

tests/local/etj/local/test_runner_tfjob_shapes.py runs it under ``etj run``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import tensorflow as tf

from etj_trainer import sdk


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--train_steps", type=int, default=200)
    parser.add_argument("--batch_size", type=int, default=32)
    args, _ = parser.parse_known_args()

    tf_config = json.loads(os.environ["TF_CONFIG"])
    cluster, task = tf_config["cluster"], tf_config["task"]
    kind, index = task["type"], int(task["index"])
    # TFJob's rule: with no chief in the cluster, worker 0 is the chief.
    is_chief = "chief" not in cluster and kind == "worker" and index == 0
    print(
        json.dumps(
            {
                "event": "role",
                "task": f"{kind}-{index}",
                "cluster": sorted(cluster),
                "workers": len(cluster.get("worker", [])),
                "ps": len(cluster.get("ps", [])),
                "is_chief": is_chief,
                "sdk_leader": sdk.is_leader(),
            }
        ),
        flush=True,
    )

    tf.compat.v1.disable_eager_execution()
    server = tf.distribute.Server(
        tf.train.ClusterSpec(cluster), job_name=kind, task_index=index, start=True
    )
    if kind == "ps":
        server.join()  # until etj stops it, once worker 0 has finished
        return 0

    reporter = sdk.ProgressReporter(examples_per_step=args.batch_size, enabled=is_chief)
    device = tf.compat.v1.train.replica_device_setter(
        worker_device=f"/job:worker/task:{index}", cluster=cluster
    )
    with tf.compat.v1.device(device):
        global_step = tf.compat.v1.train.get_or_create_global_step()
        x = tf.random.normal([args.batch_size, 4])
        y = tf.matmul(x, tf.constant([[1.0], [-2.0], [0.5], [3.0]]))
        w = tf.compat.v1.get_variable("w", [4, 1], initializer=tf.compat.v1.zeros_initializer())
        loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - y))
        train = tf.compat.v1.train.GradientDescentOptimizer(0.05).minimize(
            loss, global_step=global_step
        )
    # Each worker talks to the ps and itself only (not to the other workers).
    config = tf.compat.v1.ConfigProto(device_filters=["/job:ps", f"/job:worker/task:{index}"])
    hooks = [tf.compat.v1.train.StopAtStepHook(last_step=args.train_steps)]
    mine = 0
    with tf.compat.v1.train.MonitoredTrainingSession(
        master=server.target, is_chief=is_chief, hooks=hooks, config=config
    ) as session:
        while not session.should_stop():
            _, step, value = session.run([train, global_step, loss])
            mine += 1
            reporter.step(int(step), loss=float(value))
    print(json.dumps({"event": "trained", "task": f"worker-{index}", "steps": mine}), flush=True)
    reporter.complete()
    return 0


if __name__ == "__main__":
    sys.exit(main())
