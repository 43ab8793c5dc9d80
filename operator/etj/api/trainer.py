"""The trainer config: the document the operator renders for the trainer in every pod.

The operator builds it (``etj.core.render.build_trainer_config``) and mounts it as JSON; the
trainer (``etj_trainer``) parses it with this model. It reuses the spec's model, data and
training sections unchanged, so there is one definition of each. Pure data.
"""

from __future__ import annotations

from pydantic import Field, field_validator

from etj.api.base import ApiModel
from etj.api.constants import DEFAULT_WATCHDOG_SECONDS
from etj.api.plan import ShardPlan
from etj.api.spec import (
    DEFAULT_STEPS_PER_EXECUTION,
    DataSpec,
    ModelSpec,
    Strategy,
    TrainingSpec,
    step_limit,
)
from etj.api.warmstart import TrainerWarmStart


class TrainerCheckpoint(ApiModel):
    """Where the trainer keeps checkpoints."""

    directory: str = Field(min_length=1, description="Checkpoint directory (on every replica).")
    every_steps: int = Field(ge=1, description="Checkpoint interval in steps.")
    keep: int = Field(ge=1, description="Checkpoints kept.")


class TrainerExport(ApiModel):
    """Where and when the leader writes serving versions (spec.export)."""

    directory: str = Field(
        min_length=1, description="The serving base path (TensorFlow Serving's model_base_path)."
    )
    every_steps: int | None = Field(default=None, ge=1, description="Steps between versions.")
    every_seconds: int | None = Field(default=None, ge=1, description="Seconds between versions.")
    keep: int = Field(ge=1, description="Versions kept.")
    delta_directory: str | None = Field(
        default=None, description="Where deltas between versions go (none: no deltas)."
    )
    delta_steps: int | None = Field(default=None, ge=1, description="Steps between deltas.")
    delta_seconds: int | None = Field(default=None, ge=1, description="Seconds between deltas.")


class TrainerConfig(ApiModel):
    """Everything the trainer needs beyond TF_CONFIG."""

    job_name: str = Field(min_length=1, description="Name of the job.")
    strategy: Strategy = Field(description="Resolved strategy (never Auto).")
    model: ModelSpec = Field(description="The model.")
    data: DataSpec = Field(description="Training data.")
    training: TrainingSpec = Field(description="The training loop.")
    checkpoint: TrainerCheckpoint | None = Field(default=None, description="Checkpoints.")
    shard_plan: ShardPlan = Field(description="The shard plan the variables must follow.")
    metrics_port: int = Field(ge=1, le=65535, description="Port of the chief's metrics.")
    export_dir: str | None = Field(default=None, description="Where the final export goes.")
    export: TrainerExport | None = Field(
        default=None, description="Serving versions written while training (spec.export)."
    )
    tensorboard_dir: str | None = Field(
        default=None, description="Where the leader's TensorBoard summaries go."
    )
    watchdog_seconds: int = Field(
        default=DEFAULT_WATCHDOG_SECONDS,
        ge=10,
        description="The chief fails if no step completes for this long.",
    )
    warm_start: TrainerWarmStart | None = Field(
        default=None,
        description=(
            "The checkpoint to start from when the job has none of its own yet "
            "(spec.warmStart, resolved by the operator)."
        ),
    )

    @field_validator("strategy")
    @classmethod
    def _resolved(cls, value: Strategy) -> Strategy:
        if value is Strategy.AUTO:
            raise ValueError("the trainer runs a resolved strategy, never Auto")
        return value

    @property
    def steps(self) -> int | None:
        """The steps to train (``etj.api.spec.step_limit``): None for a job that follows its
        files without ``training.steps`` (it trains until stopped or idle)."""
        return step_limit(self.training, self.data)

    @property
    def steps_per_execution(self) -> int:
        """``training.stepsPerExecution``, or the strategy's default when the job left it
        out (``DEFAULT_STEPS_PER_EXECUTION``)."""
        given = self.training.steps_per_execution
        return given if given is not None else DEFAULT_STEPS_PER_EXECUTION[self.strategy]

    @property
    def sized_by_time(self) -> bool:
        """Left out under ParameterServer: the chief sizes each chunk by its time on the
        worker (``etj_trainer.task.chunk_size``), starting at ``steps_per_execution``."""
        return (
            self.training.steps_per_execution is None and self.strategy is Strategy.PARAMETER_SERVER
        )
