"""``spec.training`` (the training loop) and ``spec.sharding`` (how tables are split over
parameter servers).

Pure: no I/O, no environment, no kopf or Kubernetes client.
"""

from __future__ import annotations

from pydantic import Field

from etj.api.base import ApiModel, Quantity
from etj.api.sizing import Optimizer
from etj.api.spec.data import DataSpec
from etj.api.spec.strategy import Strategy

# stepsPerExecution when a job leaves it out, by resolved strategy: under ParameterServer
# each scheduled function costs its worker ~25 ms of dispatch besides its steps (timed in
# benchmarks/trainer_throughput.py; benchmarks/RESULTS.md): 10 steps a closure run ~a fifth
# slower than 50 there, and 50 is only where its chunks start (TrainerConfig.sized_by_time:
# then sized by time).
# MultiWorkerMirrored runs its chunks in the workers' own loop: nothing to amortise.
DEFAULT_STEPS_PER_EXECUTION = {Strategy.PARAMETER_SERVER: 50, Strategy.MULTI_WORKER_MIRRORED: 10}
# The most a chunk runs, given or sized by time.
MAX_STEPS_PER_EXECUTION = 10_000
# training.steps when a job leaves it out (and neither epochs nor data.files.follow decide).
DEFAULT_STEPS = 1000


class TrainingSpec(ApiModel):
    """The training loop."""

    batch_size_per_replica: int = Field(
        default=1024, ge=1, le=1 << 20, description="Examples per step per worker."
    )
    steps: int | None = Field(
        default=None,
        ge=1,
        description=(
            f"Total training steps (default {DEFAULT_STEPS}, unless epochs is given). A job "
            "following its files (data.files.follow) or a Kafka topic (data.kafka) without "
            "steps trains until it is suspended, deleted or idle for stopAfterIdleSeconds."
        ),
    )
    epochs: int | None = Field(
        default=None,
        ge=1,
        le=100000,
        description=(
            "Train for this many passes over data.files instead of steps: the steps are "
            "epochs x records / (batchSizePerReplica x workers), counted before training. "
            "Under ParameterServer an epoch is that many examples, not each record exactly "
            "once (workers run at their own pace; a failed worker's chunk may be re-run)."
        ),
    )
    optimizer: Optimizer = Field(
        default=Optimizer.ADAGRAD,
        description=(
            "sgd, adagrad, rowwiseAdagrad (one accumulator per table row, the mean of the "
            "row's squared gradients: a float32 table needs half the memory of adagrad's; the "
            "dense layers then use adagrad), ftrl, or adam (a lazy Adam that only updates the "
            "rows in the batch)."
        ),
    )
    learning_rate: float = Field(default=0.05, gt=0, le=100, description="Learning rate.")
    steps_per_execution: int | None = Field(
        default=None,
        ge=1,
        le=MAX_STEPS_PER_EXECUTION,
        description=(
            "Steps run per scheduled function (fewer round-trips to the workers). Default "
            "under ParameterServer, where each scheduled function costs its worker a "
            "dispatch to the ps (~25 ms): sized as training goes so each takes about a "
            "second on its worker (50 steps until the first are timed); 10 otherwise."
        ),
    )
    seed: int = Field(default=0, ge=0, description="Seed for initialisers and the data order.")


class ShardingSpec(ApiModel):
    """How embedding tables are split over parameter servers."""

    max_shard_bytes: Quantity = Field(
        default="512Mi",
        description="Largest shard, counting its optimizer slots.",
    )
    ps_memory_headroom: float = Field(
        default=1.3,
        ge=1.0,
        le=10.0,
        description="Factor over the shard bytes a ps requests (for copies during updates and checkpoints).",
    )
    ps_base_memory: Quantity = Field(
        default="768Mi",
        description="Memory of a ps process before any shard (the TensorFlow runtime).",
    )
    default_ps_memory: Quantity = Field(
        default="4Gi",
        description="Memory budget of a ps when replicas.ps.resources gives none.",
    )
    mirrored_max_bytes: Quantity = Field(
        default="1Gi",
        description="strategy Auto picks MultiWorkerMirrored when all tables fit in this; else ParameterServer.",
    )


def step_limit(training: TrainingSpec, data: DataSpec) -> int | None:
    """The steps a job trains: ``training.steps``, else none for a job that follows its
    files or a Kafka topic (it ends when stopped or idle), else ``DEFAULT_STEPS``. (``training.epochs`` is
    resolved into steps by the trainer, which counts the records.)"""
    if training.steps is not None:
        return training.steps
    if data.files is not None and data.files.follow is not None:
        return None
    if data.kafka is not None:
        return None
    return DEFAULT_STEPS
