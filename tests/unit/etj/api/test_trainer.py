"""The trainer's configuration (etj.api.trainer): what the trainer reads that the job may
leave out resolves the same on every side."""

from __future__ import annotations

import pytest

from etj.api.spec import EmbeddingTrainingJobSpec, Strategy
from etj.api.trainer import TrainerConfig
from etj.core.planner import build_plan


def config(strategy: str, **training: int) -> TrainerConfig:
    spec = EmbeddingTrainingJobSpec.model_validate(
        {
            "strategy": strategy,
            "model": {
                "embeddings": [{"name": "user_id", "vocabularySize": 1000, "dimension": 8}],
                "hiddenUnits": [8],
            },
            "data": {"source": "synthetic"},
            "training": training,
        }
    )
    plan = build_plan(spec)
    return TrainerConfig(
        job_name="j",
        strategy=plan.strategy,
        model=spec.model,
        data=spec.data,
        training=spec.training,
        shard_plan=plan,
        metrics_port=9090,
    )


@pytest.mark.parametrize(
    ("strategy", "steps"),
    [(Strategy.PARAMETER_SERVER, 50), (Strategy.MULTI_WORKER_MIRRORED, 10)],
)
def test_steps_per_execution_left_out_is_the_strategys_and_given_is_kept(strategy, steps):
    assert config(strategy.value).training.steps_per_execution is None
    assert config(strategy.value).steps_per_execution == steps
    assert config(strategy.value, stepsPerExecution=7).steps_per_execution == 7
