"""spec.model.custom (a job's own tower): the API and its CRD schema, the rendered
ConfigMap volume and import path, and the operator's handling of a ModelError."""

from __future__ import annotations

import copy
import json

import pytest
from pydantic import ValidationError

from etj.api import EmbeddingTrainingJob, TrainerConfig
from etj.api.constants import (
    ETJ_VOLUMES,
    MODEL_CODE_ENV,
    MODEL_CODE_MOUNT,
    VOLUME_MODEL_CODE,
)
from etj.api.custom import CUSTOM_RULES
from etj.api.spec import ModelSpec
from etj.api.trainer_reasons import REASON_MODEL_ERROR
from etj.core.crd import build_crd
from etj.core.planner import build_plan
from etj.core.reconcile.policies.restart import classify
from etj.core.render import build_objects
from tests.unit.reconcile_helpers import pod

TABLES = [{"name": "user", "vocabularySize": 1000, "dimension": 8}]
CUSTOM = {
    "module": "my_tower",
    "factory": "build",
    "parameters": {"units": [32, 16], "dropout": 0.1, "nested": {"gate": True, "name": "x"}},
    "configMap": "my-tower-code",
}
JOB = {
    "apiVersion": "training.etj.dev/v1alpha1",
    "kind": "EmbeddingTrainingJob",
    "metadata": {"name": "ct", "namespace": "ns"},
    "spec": {
        "strategy": "ParameterServer",
        "replicas": {"worker": {"replicas": 2}, "ps": {"replicas": 1}},
        "model": {"embeddings": TABLES, "denseFeatures": 3, "custom": CUSTOM},
        "training": {"steps": 10},
    },
}


def _job(custom: dict | None = CUSTOM) -> EmbeddingTrainingJob:
    doc = copy.deepcopy(JOB)
    if custom is None:
        del doc["spec"]["model"]["custom"]
    else:
        doc["spec"]["model"]["custom"] = custom
    return EmbeddingTrainingJob.from_manifest(doc)


def test_parameters_are_free_form_and_reach_the_trainer_config_unchanged():
    job = _job()
    objects = build_objects(job, build_plan(job.spec))
    cm = next(o for o in objects if o["kind"] == "ConfigMap")
    config = TrainerConfig.model_validate_json(cm["data"]["trainer.json"])
    assert config.model.custom is not None
    assert config.model.custom.parameters == CUSTOM["parameters"]
    assert (config.model.custom.module, config.model.custom.factory) == ("my_tower", "build")
    assert config.model.to_wire()["custom"]["configMap"] == "my-tower-code"


def test_crd_describes_custom_and_preserves_the_parameters():
    model = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"][
        "properties"
    ]["model"]
    custom = model["properties"]["custom"]
    assert sorted(custom["required"]) == ["factory", "module"]
    assert custom["properties"]["parameters"]["x-kubernetes-preserve-unknown-fields"] is True
    for name in ("module", "factory", "parameters", "configMap"):
        assert custom["properties"][name]["description"], name
    assert "tower(embeddings, dense, training)" in custom["description"]
    # The rule is in the CRD once, with the message pydantic's check shares.
    rules = [r for r in model["x-kubernetes-validations"] if "self.custom" in r["rule"]]
    assert [(r["rule"], r["message"]) for r in rules] == [
        (CUSTOM_RULES[0].cel, CUSTOM_RULES[0].message)
    ]


@pytest.mark.parametrize("architecture", ["wideDeep", "deepFM", "dcnV2", "dlrm"])
def test_custom_with_another_architecture_is_refused(architecture):
    model = {"embeddings": TABLES, "custom": CUSTOM, "architecture": architecture}
    with pytest.raises(ValidationError, match=f"model.architecture is '{architecture}'"):
        ModelSpec.model_validate(model)


def test_custom_goes_with_the_default_architecture():
    assert ModelSpec.model_validate({"embeddings": TABLES, "custom": CUSTOM}).custom is not None
    spec = ModelSpec.model_validate({"embeddings": TABLES, "custom": CUSTOM, "architecture": "dnn"})
    assert spec.custom is not None and spec.custom.parameters["units"] == [32, 16]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("configMap", "My_Code"),
        ("configMap", "code-"),
        ("module", "my-tower"),
        ("module", "towers..ctr"),
        ("factory", "build.tower"),
        ("factory", ""),
    ],
)
def test_bad_names_are_refused(field, value):
    with pytest.raises(ValidationError, match=f"custom.{field}"):
        ModelSpec.model_validate({"embeddings": TABLES, "custom": {**CUSTOM, field: value}})


def _trainer_container(pod_obj: dict) -> dict:
    return next(c for c in pod_obj["spec"]["containers"] if c["name"] == "trainer")


def test_every_replica_mounts_the_code_read_only_and_names_it_to_the_trainer():
    job = _job()
    pods = [o for o in build_objects(job, build_plan(job.spec)) if o["kind"] == "Pod"]
    assert {p["metadata"]["labels"]["training.etj.dev/replica-type"] for p in pods} == {
        "chief",
        "worker",
        "ps",
    }
    for p in pods:
        volumes = {v["name"]: v for v in p["spec"]["volumes"]}
        assert volumes[VOLUME_MODEL_CODE] == {
            "name": VOLUME_MODEL_CODE,
            "configMap": {"name": "my-tower-code"},
        }
        container = _trainer_container(p)
        mount = next(m for m in container["volumeMounts"] if m["name"] == VOLUME_MODEL_CODE)
        assert mount == {"name": VOLUME_MODEL_CODE, "mountPath": MODEL_CODE_MOUNT, "readOnly": True}
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env[MODEL_CODE_ENV] == MODEL_CODE_MOUNT


@pytest.mark.parametrize("custom", [None, {"module": "my_tower", "factory": "build"}])
def test_no_config_map_no_volume(custom):
    job = _job(custom)
    for p in (o for o in build_objects(job, build_plan(job.spec)) if o["kind"] == "Pod"):
        assert VOLUME_MODEL_CODE not in json.dumps(p["spec"]["volumes"])
        assert MODEL_CODE_ENV not in {e["name"] for e in _trainer_container(p)["env"]}


def test_the_code_volume_name_is_etj_s_own():
    assert VOLUME_MODEL_CODE in ETJ_VOLUMES
    doc = copy.deepcopy(JOB)
    doc["spec"]["replicas"]["worker"]["template"] = {
        "spec": {"volumes": [{"name": VOLUME_MODEL_CODE, "emptyDir": {}}]}
    }
    with pytest.raises(ValidationError, match=VOLUME_MODEL_CODE):
        EmbeddingTrainingJob.from_manifest(doc)


@pytest.mark.parametrize("policy", ["OnFailure", "ExitCode", "Never"])
def test_a_model_error_fails_the_job_under_every_policy_with_its_message(policy):
    message = f"{REASON_MODEL_ERROR}: custom.module my_tower (configMap my-tower-code): ..."
    chief = pod("chief", 0, "Failed", exit_code=2, message=message)
    failure = classify(chief, policy)
    assert failure.permanent
    assert "custom.module my_tower" in failure.why and "j-chief-0" in failure.why


def test_other_failures_are_still_retried_under_on_failure():
    chief = pod("chief", 0, "Failed", exit_code=2, message="ValueError: boom")
    assert not classify(chief, "OnFailure").permanent
