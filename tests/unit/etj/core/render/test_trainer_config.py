"""etj.core.render.trainer_config: the trainer's config of a job, from its spec, its plan
and the operator's settings."""

from __future__ import annotations

import copy

from etj.api.trainer import TrainerConfig
from etj.core.render.settings import RenderSettings
from etj.core.render.trainer_config import build_trainer_config
from etj.core.validation import validate_manifest
from tests.unit.conftest import job_manifest, load_example


def _job(spec: dict | None = None):
    spec = spec or copy.deepcopy(load_example("quickstart.yaml")["spec"])
    result = validate_manifest(job_manifest(spec, name="ctr"))
    assert result.ok and result.job is not None and result.plan is not None
    return result.job, result.plan


def test_the_config_carries_the_jobs_sections_and_its_plan():
    job, plan = _job()
    config = build_trainer_config(job, plan, RenderSettings(metrics_port=9100))
    assert config.job_name == "ctr" and config.strategy == plan.strategy
    assert config.model == job.spec.model and config.data == job.spec.data
    assert config.training == job.spec.training and config.shard_plan == plan
    assert config.metrics_port == 9100
    assert config.watchdog_seconds == job.spec.run_policy.watchdog_seconds
    assert config.warm_start is None


def test_checkpoints_go_to_a_directory_of_the_job_under_the_mount_and_export_beside():
    job, plan = _job()
    config = build_trainer_config(job, plan, RenderSettings())
    mount = job.spec.checkpoint.mount_path
    assert config.checkpoint.directory == f"{mount}/ctr"
    assert config.export_dir == f"{mount}/ctr/export"
    assert (config.checkpoint.every_steps, config.checkpoint.keep) == (500, 3)


def test_a_uri_gets_the_namespace_and_the_job_under_it():
    spec = copy.deepcopy(load_example("quickstart.yaml")["spec"])
    spec["checkpoint"] = {"uri": "gs://bucket/ckpt/", "everySteps": 100}
    job, plan = _job(spec)
    config = build_trainer_config(job, plan, RenderSettings())
    assert config.checkpoint.directory == "gs://bucket/ckpt/team-a/ctr"


def test_the_config_round_trips_through_the_configmaps_json():
    job, plan = _job()
    config = build_trainer_config(job, plan, RenderSettings())
    assert TrainerConfig.model_validate_json(config.model_dump_json(by_alias=True)) == config


def test_the_config_carries_how_the_job_follows_its_files():
    spec = copy.deepcopy(load_example("quickstart.yaml")["spec"])
    spec["data"] = {
        "source": "files",
        "files": {
            "pattern": "/data/dt=*/part-*.csv",
            "format": "csv",
            "follow": {"pollSeconds": 15, "stopAfterIdleSeconds": 900},
        },
    }
    spec["training"].pop("steps", None)
    job, plan = _job(spec)
    config = TrainerConfig.model_validate_json(
        build_trainer_config(job, plan, RenderSettings()).model_dump_json(by_alias=True)
    )
    assert config.data.files is not None and config.data.files.follow is not None
    assert config.data.files.follow.poll_seconds == 15
    assert config.data.files.follow.stop_after_idle_seconds == 900
    assert config.steps is None
