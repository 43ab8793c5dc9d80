"""etj.api.spec.job: the rules that join the spec's sections (strategy and replicas, who
leads, data and training)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from pydantic import ValidationError

from etj.api.spec import (
    IMMUTABLE_MANAGED_BY,
    UNSUPPORTED_SCHEMES,
    EmbeddingTrainingJobSpec,
    Strategy,
    SuccessPolicy,
)
from tests.unit.conftest import load_example

PS = Strategy.PARAMETER_SERVER.value
MWMS = Strategy.MULTI_WORKER_MIRRORED.value
OWN_PROGRAM = {"spec": {"containers": [{"name": "trainer", "command": ["python", "mine.py"]}]}}


def _spec(**changes: Any) -> dict[str, Any]:
    spec = copy.deepcopy(load_example("quickstart.yaml")["spec"])
    for key, value in changes.items():
        spec[key] = value
    return spec


def _refused(spec: dict[str, Any], words: str) -> None:
    with pytest.raises(ValidationError, match=words):
        EmbeddingTrainingJobSpec.model_validate(spec)


def test_the_quickstart_is_a_valid_spec():
    spec = EmbeddingTrainingJobSpec.model_validate(_spec())
    assert spec.strategy == Strategy.PARAMETER_SERVER


def test_multi_worker_mirrored_has_no_ps():
    _refused(_spec(strategy=MWMS), "replicas.ps is only for strategy ParameterServer")


def test_parameter_server_needs_a_worker():
    replicas = {"chief": {"replicas": 1}, "worker": {"replicas": 0}}
    _refused(_spec(replicas=replicas), "ParameterServer needs at least one worker")


def test_etjs_trainer_under_parameter_server_needs_one_chief_unless_workers_run_their_own():
    no_chief = {"chief": {"replicas": 0}, "worker": {"replicas": 2}, "ps": {"replicas": 1}}
    _refused(_spec(replicas=no_chief), "needs exactly one chief")
    own = copy.deepcopy(no_chief)
    own["worker"]["template"] = OWN_PROGRAM
    assert EmbeddingTrainingJobSpec.model_validate(_spec(replicas=own)).replicas.chief.replicas == 0


def test_all_workers_success_is_for_a_job_without_a_chief():
    run_policy = {"successPolicy": SuccessPolicy.ALL_WORKERS.value}
    _refused(_spec(runPolicy=run_policy), "successPolicy AllWorkers is for a job without a chief")
    replicas = {"worker": {"replicas": 2}}
    spec = _spec(strategy=MWMS, replicas=replicas, runPolicy=run_policy)
    spec["checkpoint"] = {"storage": {"size": "1Gi"}}
    assert EmbeddingTrainingJobSpec.model_validate(spec).run_policy.success_policy == (
        SuccessPolicy.ALL_WORKERS
    )


def test_epochs_need_files():
    training = {**_spec()["training"], "epochs": 2}
    training.pop("steps")
    _refused(_spec(training=training), "training.epochs needs data.source files")


def test_parquet_needs_features_and_is_not_for_parameter_server():
    files = {"source": "files", "files": {"pattern": "/d/*.parquet", "format": "parquet"}}
    _refused(_spec(data=files), "parquet needs model.features")
    model = copy.deepcopy(_spec()["model"])
    model.pop("denseFeatures")
    model["features"] = [
        {"name": "clicked", "kind": "label"},
        {"name": "user_id", "kind": "categorical", "table": "user_id"},
        {"name": "item_id", "kind": "categorical", "table": "item_id"},
    ]
    _refused(
        _spec(data=files, model=model), "parquet cannot be read under strategy ParameterServer"
    )


FOLLOW = {"source": "files", "files": {"pattern": "/d/part-*.tfrecord", "follow": {}}}


def test_a_following_job_has_no_epochs():
    training = {**_spec()["training"], "epochs": 2}
    training.pop("steps")
    _refused(_spec(data=FOLLOW, training=training), "epochs cannot be used with data.files.follow")


def test_a_following_job_under_parameter_server_may_leave_steps_out():
    training = {**_spec()["training"]}
    training.pop("steps")
    spec = EmbeddingTrainingJobSpec.model_validate(_spec(data=FOLLOW, training=training))
    assert spec.training.steps is None


@pytest.mark.parametrize(
    ("chief", "workers", "ok"), [(0, 1, True), (1, 0, True), (0, 2, False), (1, 1, False)]
)
def test_a_following_job_under_multi_worker_mirrored_is_one_process(chief, workers, ok):
    spec = _spec(
        strategy=MWMS,
        data=FOLLOW,
        replicas={"chief": {"replicas": chief}, "worker": {"replicas": workers}},
    )
    spec["checkpoint"] = {"storage": {"size": "1Gi"}}
    if ok:
        assert EmbeddingTrainingJobSpec.model_validate(spec).data.files.follow is not None
    else:
        _refused(spec, "follow under MultiWorkerMirrored takes one training process")


@pytest.mark.parametrize("scheme", UNSUPPORTED_SCHEMES)
def test_data_on_an_unsupported_scheme_says_why(scheme):
    data = {"source": "files", "files": {"pattern": f"{scheme}b/train-*", "format": "csv"}}
    _refused(_spec(data=data), "data.files.pattern: s3:// and hdfs:// are not built into")


def test_managed_by_is_immutable_for_the_api_server():
    assert IMMUTABLE_MANAGED_BY["fieldPath"] == ".runPolicy.managedBy"
    assert "oldSelf" in IMMUTABLE_MANAGED_BY["rule"] and "self" in IMMUTABLE_MANAGED_BY["rule"]
