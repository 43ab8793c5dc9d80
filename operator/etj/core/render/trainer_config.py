"""The trainer's config for a job: what the trainer reads from its ConfigMap (model, data,
training, the shard plan, the checkpoint directory, where exports and summaries go). Pure:
no I/O.
"""

from __future__ import annotations

from etj.api.export import deltas_location, serving_location
from etj.api.job import EmbeddingTrainingJob
from etj.api.plan import ShardPlan
from etj.api.trainer import TrainerCheckpoint, TrainerConfig, TrainerExport
from etj.core.render.settings import RenderSettings
from etj.core.render.warmstart import checkpoint_dir, trainer_warm_start


def build_trainer_config(
    job: EmbeddingTrainingJob, plan: ShardPlan, settings: RenderSettings
) -> TrainerConfig:
    spec = job.spec
    return TrainerConfig(
        job_name=job.name,
        strategy=plan.strategy,
        model=spec.model,
        data=spec.data,
        training=spec.training,
        checkpoint=TrainerCheckpoint(
            directory=checkpoint_dir(job),
            every_steps=spec.checkpoint.every_steps,
            keep=spec.checkpoint.keep,
        ),
        shard_plan=plan,
        metrics_port=settings.metrics_port,
        export_dir=f"{checkpoint_dir(job)}/export",
        export=trainer_export(job),
        tensorboard_dir=tensorboard_dir(job),
        watchdog_seconds=spec.run_policy.watchdog_seconds,
        warm_start=trainer_warm_start(job),
    )


def trainer_export(job: EmbeddingTrainingJob) -> TrainerExport | None:
    """spec.export for the trainer: the serving base path and when to write versions."""
    export = job.spec.export
    if export is None:
        return None
    return TrainerExport(
        directory=serving_location(checkpoint_dir(job)),
        every_steps=export.every_steps,
        every_seconds=export.every_seconds,
        keep=export.keep,
        delta_directory=(
            deltas_location(checkpoint_dir(job))
            if export.delta_steps is not None or export.delta_seconds is not None
            else None
        ),
        delta_steps=export.delta_steps,
        delta_seconds=export.delta_seconds,
    )


def tensorboard_dir(job: EmbeddingTrainingJob) -> str:
    """Where the job's leader writes its summaries: a per-job directory under
    spec.tensorboard.uri (as checkpoint.uri), else beside its checkpoints."""
    tensorboard = job.spec.tensorboard
    if tensorboard is not None:
        return f"{tensorboard.uri.rstrip('/')}/{job.namespace}/{job.name}"
    return f"{checkpoint_dir(job)}/tensorboard"
