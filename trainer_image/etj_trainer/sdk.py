"""Helpers for your own TensorFlow program under etj (``spec.replicas.<role>.template``).

etj gives every replica of such a program ``TF_CONFIG`` (use it as with TFJob:
``tf.distribute.cluster_resolver.TFConfigClusterResolver()``), ``ETJ_REPLICA_TYPE``/
``ETJ_REPLICA_INDEX``, and the shard plan in the file named by ``ETJ_SHARD_PLAN``. With
a few lines of this module the program gets what etj's own trainer gets:

- ``load_shard_plan()`` and ``PlanPartitioner``: ParameterServerStrategy's
  ``variable_partitioner`` that splits each embedding table into the plan's shard count
  (so each ps holds what the planner sized its memory for), and leaves every other
  variable whole::

      plan = sdk.load_shard_plan()
      partitioner = sdk.PlanPartitioner(plan)
      strategy = tf.distribute.ParameterServerStrategy(resolver, variable_partitioner=partitioner)
      with strategy.scope(), partitioner.table("user_id"):
          table = tf.Variable(initial_value, name="user_id")

- ``ProgressReporter``: on the chief (else worker 0), serves the metrics page the operator
  scrapes (``etj_trainer_step``, ``_loss``, ``_auc``, ``_examples_per_second``,
  ``_last_checkpoint_step``), writes the ``{"event": "progress"}`` lines ``etj run`` reads,
  and at the end ``complete()`` writes the ``TrainingComplete`` termination message, so
  ``kubectl get etj`` shows the step, loss and final progress of your program::

      reporter = sdk.ProgressReporter(examples_per_step=batch_size)
      for step in ...:
          reporter.step(step, loss=loss)
      reporter.complete()

- ``restore_in_pieces``: restore large tables from a ``tf.train.Checkpoint`` one shard at
  a time, each read and assigned on its own ps (``Checkpoint.restore`` reads all a ps holds
  before assigning any of it: twice the tables' memory for a moment), into any shard count::

      ckpt = tf.train.Checkpoint(user_id=embedding.embeddings, head=head)  # what is saved
      path = tf.train.latest_checkpoint(sdk.checkpoint_dir())  # etj's checkpoint volume
      if path:
          sdk.restore_in_pieces(path, {"user_id": embedding.embeddings})   # the big ones
          tf.train.Checkpoint(head=head).read(path).expect_partial()      # the rest

etj keeps owning the rest: it stops the ps when the chief exits 0, restarts failed
replicas by ``runPolicy.restartPolicy`` and counts them against ``backoffLimit``. A restarted
replica starts the same command again, so a program that wants to resume restores its own
checkpoint (``tf.train.CheckpointManager``).

Needs no kopf and no Kubernetes client; TensorFlow is imported only where it is used.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from etj.api.constants import SHARD_PLAN_ENV
from etj.api.plan import ShardPlan, TablePlan
from etj_trainer.config import config_field

# The one progress reporter, etj's trainer's too (etj_trainer.task.progress).
from etj_trainer.task.progress import ProgressReporter, is_leader, metrics_port

__all__ = [
    "PlanPartitioner",
    "ProgressReporter",
    "SdkError",
    "checkpoint_dir",
    "is_leader",
    "load_shard_plan",
    "metrics_port",
    "restore_in_pieces",
]


class SdkError(RuntimeError):
    """This program is not set up the way etj runs it (e.g. no shard plan file)."""


def load_shard_plan(path: str | os.PathLike[str] | None = None) -> ShardPlan:
    """The job's shard plan: from ``path``, else the file ``ETJ_SHARD_PLAN`` names."""
    source = path or os.environ.get(SHARD_PLAN_ENV)
    if not source:
        raise SdkError(f"no shard plan: {SHARD_PLAN_ENV} is not set (is this run by etj?)")
    try:
        text = Path(source).read_text()
    except OSError as e:
        raise SdkError(f"cannot read the shard plan {source}: {e.strerror or e}") from e
    return ShardPlan.model_validate_json(text)


class PlanPartitioner:
    """``variable_partitioner`` for ``tf.distribute.ParameterServerStrategy`` that follows
    the plan: inside ``with partitioner.table(name):`` a variable is split along its rows
    into the table's planned shard count; every other variable stays whole.

    TensorFlow calls a partitioner with the shape and dtype only, so the table being
    created is announced by name (two tables of one shape are told apart). A table the
    plan does not know is an error: a typo would otherwise silently land on one ps.
    """

    def __init__(self, plan: ShardPlan):
        self.plan = plan
        self._tables = {t.name: t for t in plan.tables}
        self._pending: TablePlan | None = None

    def shards(self, name: str) -> int:
        """The planned shard count of table ``name``."""
        try:
            return self._tables[name].shards
        except KeyError:
            known = ", ".join(sorted(self._tables)) or "none"
            raise SdkError(f"table {name!r} is not in the shard plan (planned: {known})") from None

    @contextlib.contextmanager
    def table(self, name: str) -> Iterator[TablePlan]:
        self.shards(name)  # fail early on an unknown name
        self._pending = self._tables[name]
        try:
            yield self._pending
        finally:
            self._pending = None

    def __call__(self, shape: Any, dtype: Any = None) -> list[int]:
        rank = len(shape)
        if self._pending is None or rank == 0:
            return [1] * rank
        # Never more shards than rows (TensorFlow refuses empty partitions).
        return [min(self._pending.shards, int(shape[0]))] + [1] * (rank - 1)


def checkpoint_dir(environ: dict[str, str] | None = None) -> str | None:
    """The job's checkpoint directory (``spec.checkpoint``: on every replica, one per job),
    from the trainer config etj mounts; None when there is none."""
    checkpoint = config_field("checkpoint", environ)
    directory = checkpoint.get("directory") if isinstance(checkpoint, dict) else None
    return str(directory) if directory else None


def restore_in_pieces(path: str, variables: dict[str, Any]) -> None:
    """Assign each of ``variables`` from the checkpoint ``path``, piece by piece.

    Keys are the variables' paths in the ``tf.train.Checkpoint`` that saved them
    (``"user_id"`` for ``Checkpoint(user_id=table)``, ``"model/table"`` for
    ``Checkpoint(model=Checkpoint(table=table))``); values are ``tf.Variable``s or
    ``ShardedVariable``s (ParameterServerStrategy's partitioned variables). Each shard is
    read and assigned on its own device, one shard per device at a time, from the rows it
    holds, whatever the saved shard count was. A key not in the checkpoint, or a shape that
    differs, raises ``CheckpointMismatch`` before anything is assigned.
    """
    from etj_trainer.task.restore import restore_components  # TensorFlow: only when used

    restore_components(
        path, {key: list(getattr(v, "variables", [v])) for key, v in variables.items()}
    )
