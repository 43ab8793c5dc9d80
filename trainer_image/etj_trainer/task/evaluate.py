"""Held-out evaluation: AUC and log-loss of the model on data the trainers do not see.

``Scorer`` scores a model on the batches of ``data.validation`` (the same examples every
time); the chief runs it inline after each checkpoint when the job has validation data
(its results become Prometheus gauges the operator copies into ``status.evaluation``).

The evaluator role is not part of the training cluster (TensorFlow's convention); it polls
the checkpoint directory, restores the newest checkpoint into a local, unsharded copy of
the model (``restore_model``: tables by row, whatever their saved sharding; a dynamic
table's index shards, saved one per pool shard, laid out anew as one), and scores it: on
``data.validation`` when given, else on an independent synthetic stream or the files of
``data.files``. It finishes after evaluating the final step. It needs memory for the whole
model (tables without optimizer slots) and never writes checkpoints.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

import numpy as np
import tensorflow as tf

from etj.api.progress import EVENT_EVALUATION
from etj.api.trainer import TrainerConfig
from etj_trainer import exitcodes
from etj_trainer.data.batch import LABEL_KEY
from etj_trainer.data.pipeline import make_dataset, validation_dataset
from etj_trainer.models.ctr import CtrModel
from etj_trainer.models.dynamic_relayout import restore_dynamic
from etj_trainer.task.auc import BINS, auc_from_histogram
from etj_trainer.task.cluster import Task
from etj_trainer.task.events import emit
from etj_trainer.task.progress import EVAL_RUN, TAG_AUC, TAG_LOGLOSS, tensorboard_dir, write_scalars
from etj_trainer.task.restore import restore_components
from etj_trainer.task.state import checkpoint_keys
from etj_trainer.task.step import histogram

log = logging.getLogger(__name__)

# A synthetic stream no worker draws (workers use their index or a random 31-bit id).
HELD_OUT_STREAM = 2**40
BATCHES_ENV = "ETJ_EVAL_BATCHES"
POLL_ENV = "ETJ_EVAL_POLL_SECONDS"


class Scorer:
    """Scores a model on fixed held-out batches: AUC, log-loss and the example count."""

    def __init__(self, model: CtrModel, data: tf.data.Dataset):
        self.model = model
        self.data = data

        @tf.function
        def score(batch: dict[str, tf.Tensor]) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
            labels = tf.cast(batch[LABEL_KEY], tf.float32)
            logits = model(batch)
            loss = tf.reduce_sum(
                tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits)
            )
            return loss, histogram(tf.sigmoid(logits), labels), tf.size(labels)

        self._score = score

    def __call__(self, step: int) -> dict[str, Any]:
        total, examples, hist = 0.0, 0, np.zeros((2, BINS))
        for batch in self.data:
            loss, h, n = self._score(batch)
            total += float(loss)
            examples += int(n)
            hist += h.numpy()
        return {
            "step": step,
            "auc": auc_from_histogram(hist),
            "logloss": total / max(examples, 1),
            "examples": examples,
        }


def held_out(config: TrainerConfig) -> tf.data.Dataset | None:
    """``data.validation``'s batches (cached after the first pass), or None."""
    if config.data.validation is None:
        return None
    batch = config.training.batch_size_per_replica
    return validation_dataset(config.model, config.data, batch).cache()


def restore_model(model: CtrModel, step: tf.Variable, path: str) -> None:
    """The tables, the tower and the step of ``model`` from ``path``, no optimizer slots.

    Tables restore by row, whatever sharding they were saved in (``restore_components``, as
    the chief restores). A dynamic table's index, row state and candidates were saved one
    set per pool shard; this model has one shard per table, so a table saved by a
    ParameterServer job is laid out anew (``models.dynamic_relayout``): every admitted id
    keeps its row. (``tf.train.Checkpoint.restore`` would read saved shard 0 into the one
    shard and fail on its shape.)
    """
    wanted = {f"model/tables/{i}": model.table_components(i) for i in range(len(model.tables))}
    root = tf.train.Checkpoint(model=model, step=step)
    wanted.update(checkpoint_keys(root, model.tower_variables))
    restore_components(path, {**wanted, "step": [step]})
    pools = {spec.name: model.tables[i] for i, spec in enumerate(model.specs)}
    restore_dynamic(model.dynamic, pools, {}, path, int(step.numpy()))


def run_evaluator(config: TrainerConfig, task: Task) -> int:
    if config.checkpoint is None:
        print("etj_trainer: the evaluator needs checkpoint settings to read", flush=True)
        return exitcodes.USAGE
    directory = config.checkpoint.directory
    model = CtrModel(config)
    step = tf.Variable(0, dtype=tf.int64, name="global_step")
    # Only the model and the step: the optimizer slots are not needed to evaluate.
    batches = int(os.environ.get(BATCHES_ENV, "20"))
    poll = float(os.environ.get(POLL_ENV, "10"))
    data = held_out(config) or (
        make_dataset(
            config.model,
            config.data,
            config.training.batch_size_per_replica,
            stream=HELD_OUT_STREAM,
        )
        .take(batches)
        .cache()
    )
    writer = tf.summary.create_file_writer(
        f"{(tensorboard_dir(config) or directory).rstrip('/')}/{EVAL_RUN}"
    )
    scorer = Scorer(model, data)

    seen = None
    while True:
        path = tf.train.latest_checkpoint(directory)
        if path is not None and path != seen:
            restore_model(model, step, path)
            seen = path
            at = int(step.numpy())
            result = scorer(at)
            emit(EVENT_EVALUATION, checkpoint=path, **result)
            auc = result["auc"]
            write_scalars(
                writer, at, {TAG_LOGLOSS: result["logloss"], **({TAG_AUC: auc} if auc else {})}
            )
            if config.steps is not None and at >= config.steps:
                emit("done", step=at)
                return exitcodes.SUCCESS
        time.sleep(poll)
