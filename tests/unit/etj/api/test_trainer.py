"""The trainer's configuration (etj.api.trainer): what a job may leave out resolves the
same for the trainer whichever side built the configuration (here, the operator's)."""

from __future__ import annotations

from typing import Any

import pytest

from etj.api.spec import Strategy
from etj.api.trainer import TrainerConfig
from etj.core.planner import build_plan
from etj.core.render.settings import RenderSettings
from etj.core.render.trainer_config import build_trainer_config
from tests.unit.reconcile_helpers import make_job


def config(strategy: Strategy, **training: Any) -> TrainerConfig:
    job = make_job(strategy.value, checkpoint={"uri": "/shared/ckpt"}, training=training)
    return build_trainer_config(job, build_plan(job.spec), RenderSettings())


def sent(strategy: Strategy) -> TrainerConfig:
    """What the pods read: the configuration after its trip through JSON."""
    return TrainerConfig.model_validate_json(config(strategy).model_dump_json(by_alias=True))


@pytest.mark.parametrize(
    ("strategy", "steps"),
    [(Strategy.PARAMETER_SERVER, 50), (Strategy.MULTI_WORKER_MIRRORED, 10)],
)
def test_steps_per_execution_left_out_is_the_strategys_and_given_is_kept(strategy, steps):
    assert config(strategy).training.steps_per_execution is None
    assert config(strategy).steps_per_execution == steps
    assert config(strategy, stepsPerExecution=7).steps_per_execution == 7
    assert sent(strategy).steps_per_execution == steps


def test_only_a_parameter_server_job_that_leaves_the_count_out_sizes_its_chunks_by_time():
    assert config(Strategy.PARAMETER_SERVER).sized_by_time
    assert not config(Strategy.PARAMETER_SERVER, stepsPerExecution=50).sized_by_time
    assert not config(Strategy.MULTI_WORKER_MIRRORED).sized_by_time
    assert sent(Strategy.PARAMETER_SERVER).sized_by_time


FOLLOW = {
    "source": "files",
    "files": {"pattern": "/data/part-*.csv", "format": "csv", "follow": {}},
}


def test_a_following_job_without_steps_has_no_step_limit_on_both_sides():
    job = make_job("ParameterServer", checkpoint={"uri": "/shared/ckpt"}, data=FOLLOW)
    built = build_trainer_config(job, build_plan(job.spec), RenderSettings())
    read = TrainerConfig.model_validate_json(built.model_dump_json(by_alias=True))
    assert built.steps is None and read.steps is None
    assert read.data.files is not None and read.data.files.follow is not None
    assert read.data.files.follow.poll_seconds == 60
    assert config(Strategy.PARAMETER_SERVER).steps == 1000
    assert config(Strategy.PARAMETER_SERVER, steps=30).steps == 30
