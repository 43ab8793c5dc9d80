"""The trainer's config for a job: what the trainer reads from its ConfigMap (model, data,
training, the shard plan, the checkpoint directory). Pure: no I/O.
"""

from __future__ import annotations

from etj.api.job import EmbeddingTrainingJob
from etj.api.plan import ShardPlan
from etj.api.trainer import TrainerCheckpoint, TrainerConfig
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
        watchdog_seconds=spec.run_policy.watchdog_seconds,
        warm_start=trainer_warm_start(job),
    )
