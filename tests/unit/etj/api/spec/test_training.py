"""etj.api.spec.training: how many steps a job trains (step_limit)."""

from __future__ import annotations

from etj.api.spec import DEFAULT_STEPS, DataSpec, TrainingSpec, step_limit

FOLLOWING = DataSpec.model_validate(
    {"source": "files", "files": {"pattern": "/d/*.tfrecord", "follow": {}}}
)
FIXED = DataSpec.model_validate({"source": "files", "files": {"pattern": "/d/*.tfrecord"}})


def test_steps_left_out_are_the_default_unless_the_job_follows_its_files():
    assert TrainingSpec().steps is None
    assert step_limit(TrainingSpec(), DataSpec()) == DEFAULT_STEPS == 1000
    assert step_limit(TrainingSpec(), FIXED) == DEFAULT_STEPS
    assert step_limit(TrainingSpec(), FOLLOWING) is None


def test_steps_given_are_kept_with_or_without_following():
    assert step_limit(TrainingSpec(steps=70), FIXED) == 70
    assert step_limit(TrainingSpec(steps=70), FOLLOWING) == 70
