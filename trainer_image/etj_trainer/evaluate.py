"""The evaluator role: scores every new checkpoint on data the trainers do not see.

It is not part of the training cluster (TensorFlow's convention); it polls the checkpoint
directory, restores the newest checkpoint into a local, unsharded copy of the model (a
checkpoint restores into any sharding), and reports log-loss and AUC on held-out batches:
an independent synthetic stream, or the files of ``data.files`` (no separate evaluation
set exists in the spec). It finishes after evaluating the final step. It needs memory for
the whole model (tables without optimizer slots) and never writes checkpoints.
"""

from __future__ import annotations

import logging
import os
import time

import numpy as np
import tensorflow as tf

from etj.api.trainer import TrainerConfig
from etj_trainer import exitcodes
from etj_trainer.auc import auc_from_histogram
from etj_trainer.cluster import Task
from etj_trainer.core import histogram
from etj_trainer.data import LABEL_KEY, make_dataset
from etj_trainer.model import CtrModel
from etj_trainer.progress import emit, write_scalars

log = logging.getLogger(__name__)

# A synthetic stream no worker draws (workers use their index or a random 31-bit id).
HELD_OUT_STREAM = 2**40
BATCHES_ENV = "ETJ_EVAL_BATCHES"
POLL_ENV = "ETJ_EVAL_POLL_SECONDS"


def run_evaluator(config: TrainerConfig, task: Task) -> int:
    if config.checkpoint is None:
        print("etj_trainer: the evaluator needs checkpoint settings to read", flush=True)
        return exitcodes.USAGE
    directory = config.checkpoint.directory
    model = CtrModel(config)
    step = tf.Variable(0, dtype=tf.int64, name="global_step")
    # Only the model and the step: the optimizer slots are not needed to evaluate.
    checkpoint = tf.train.Checkpoint(model=model, step=step)
    batches = int(os.environ.get(BATCHES_ENV, "20"))
    poll = float(os.environ.get(POLL_ENV, "10"))
    data = (
        make_dataset(
            config.model,
            config.data,
            config.training.batch_size_per_replica,
            stream=HELD_OUT_STREAM,
        )
        .take(batches)
        .cache()
    )
    writer = tf.summary.create_file_writer(f"{directory}/tensorboard/eval")

    @tf.function
    def score(batch: dict[str, tf.Tensor]) -> tuple[tf.Tensor, tf.Tensor]:
        labels = tf.cast(batch[LABEL_KEY], tf.float32)
        logits = model(batch)
        loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits))
        return loss, histogram(tf.sigmoid(logits), labels)

    seen = None
    while True:
        path = tf.train.latest_checkpoint(directory)
        if path is not None and path != seen:
            checkpoint.restore(path).expect_partial().assert_existing_objects_matched()
            seen = path
            losses, hist = [], np.zeros((2, 200))
            for batch in data:
                loss, h = score(batch)
                losses.append(float(loss))
                hist += h.numpy()
            at = int(step.numpy())
            auc = auc_from_histogram(hist)
            emit("evaluation", step=at, loss=float(np.mean(losses)), auc=auc, checkpoint=path)
            write_scalars(
                writer, at, {"loss": float(np.mean(losses)), **({"auc": auc} if auc else {})}
            )
            if at >= config.training.steps:
                emit("done", step=at)
                return exitcodes.SUCCESS
        time.sleep(poll)
