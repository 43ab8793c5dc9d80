"""spec.replicas.<role>.template: what a template may set, how it merges over etj's Pod,
and what etj keeps (TF_CONFIG, ETJ_SHARD_PLAN, its labels, the container name)."""

from __future__ import annotations

import copy
import json

import pytest
from pydantic import ValidationError

from etj.api import EmbeddingTrainingJob
from etj.api.constants import (
    LABEL_JOB_NAME,
    LABEL_REPLICA_TYPE,
    SHARD_PLAN_ENV,
    SHARD_PLAN_FILE,
    TRAINER_CONFIG_MOUNT,
)
from etj.api.plan import ShardPlan
from etj.api.podtemplate import PodTemplate
from etj.api.spec import step_limit
from etj.api.status import Phase, Progress
from etj.core.planner import build_plan
from etj.core.render import RenderSettings, build_config_map, build_pod
from etj.core.render.podtemplate import merge_pod_template
from etj.core.validation import validate_manifest
from tests.unit.conftest import load_example
from tests.unit.reconcile_helpers import all_pods, make_job, pod, run

BASE_POD = {
    "metadata": {"name": "j-worker-0", "labels": {LABEL_JOB_NAME: "j", "a": "etj"}},
    "spec": {
        "restartPolicy": "Never",
        "securityContext": {"runAsNonRoot": True, "runAsUser": 1000},
        "containers": [
            {
                "name": "trainer",
                "image": "etj-trainer",
                "command": ["python", "-m", "etj_trainer"],
                "env": [{"name": "TF_CONFIG", "value": "{}"}, {"name": "LOG", "value": "info"}],
                "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
                "resources": {"requests": {"memory": "1Gi"}},
            }
        ],
        "volumes": [{"name": "tmp", "emptyDir": {}}],
        "tolerations": [{"key": "etj"}],
    },
}


def _container(pod: dict, name: str = "trainer") -> dict:
    return next(c for c in pod["spec"]["containers"] if c["name"] == name)


def _env(container: dict) -> dict:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env") or []}


# ---- the pure merge ------------------------------------------------------------------


@pytest.mark.parametrize("name", ["trainer", "tensorflow"])
def test_main_container_merges_by_name_and_keeps_etjs_name(name):
    template = {
        "spec": {
            "containers": [
                {
                    "name": name,
                    "command": ["python", "/app/train.py"],
                    "args": ["--steps=5"],
                    "env": [{"name": "LOG", "value": "debug"}, {"name": "NEW", "value": "1"}],
                    "volumeMounts": [{"name": "code", "mountPath": "/app"}],
                }
            ]
        }
    }
    pod = merge_pod_template(BASE_POD, template)
    assert [c["name"] for c in pod["spec"]["containers"]] == ["trainer"]
    c = _container(pod)
    assert c["command"] == ["python", "/app/train.py"] and c["args"] == ["--steps=5"]
    assert c["image"] == "etj-trainer"  # not given: etj's
    # env by name: replaced in place, added at the end, TF_CONFIG kept first
    assert [e["name"] for e in c["env"]] == ["TF_CONFIG", "LOG", "NEW"]
    assert _env(c)["LOG"] == "debug"
    assert [m["mountPath"] for m in c["volumeMounts"]] == ["/tmp", "/app"]
    # resources are folded in by build_pod, not here: the plan's memory floor holds
    assert c["resources"] == {"requests": {"memory": "1Gi"}}
    assert BASE_POD["spec"]["containers"][0]["command"] == ["python", "-m", "etj_trainer"]


def test_an_image_without_a_command_runs_its_own_entrypoint():
    pod = merge_pod_template(
        BASE_POD, {"spec": {"containers": [{"name": "tensorflow", "image": "x", "args": ["-v"]}]}}
    )
    c = _container(pod)
    assert "command" not in c and c["image"] == "x" and c["args"] == ["-v"]


def test_pod_fields_merge_append_or_replace():
    template = {
        "metadata": {"labels": {"a": "user", "team": "ads"}, "annotations": {"x": "1"}},
        "spec": {
            "containers": [{"name": "sidecar", "image": "fluent-bit"}],
            "initContainers": [{"name": "fetch", "image": "busybox"}],
            "volumes": [{"name": "code", "configMap": {"name": "code"}}],
            "tolerations": [{"key": "gpu"}],
            "securityContext": {"fsGroup": 2000},
            "schedulerName": "volcano",
            "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone"}],
            "nodeSelector": {"pool": "big"},
        },
    }
    pod = merge_pod_template(BASE_POD, template)
    spec = pod["spec"]
    assert [c["name"] for c in spec["containers"]] == ["trainer", "sidecar"]  # etj's first
    assert spec["initContainers"] == [{"name": "fetch", "image": "busybox"}]
    assert [v["name"] for v in spec["volumes"]] == ["tmp", "code"]
    assert spec["tolerations"] == [{"key": "etj"}, {"key": "gpu"}]
    # replaced whole: etj's runAsUser would otherwise stay (a merge cannot remove a key)
    assert spec["securityContext"] == {"fsGroup": 2000}
    assert spec["schedulerName"] == "volcano"
    assert spec["topologySpreadConstraints"][0]["topologyKey"] == "zone"
    assert spec["nodeSelector"] == {"pool": "big"}
    assert spec["restartPolicy"] == "Never"
    # etj's own label keys win; the others are added
    assert pod["metadata"]["labels"] == {LABEL_JOB_NAME: "j", "a": "etj", "team": "ads"}
    assert pod["metadata"]["annotations"] == {"x": "1"}


def test_an_empty_security_context_runs_the_image_as_built():
    container = {"name": "tensorflow", "securityContext": {}}
    pod = merge_pod_template(BASE_POD, {"spec": {"securityContext": {}, "containers": [container]}})
    assert pod["spec"]["securityContext"] == {} and _container(pod)["securityContext"] == {}


def test_no_template_is_a_copy():
    pod = merge_pod_template(BASE_POD, None)
    assert pod == BASE_POD and pod is not BASE_POD


# ---- what a template may not set -------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ({"restartPolicy": "Always"}, "spec.restartPolicy"),
        ({"hostname": "h"}, "spec.hostname"),
        ({"subdomain": "s"}, "spec.subdomain"),
        (
            {"containers": [{"name": "tensorflow", "env": [{"name": "TF_CONFIG", "value": "{}"}]}]},
            "env[0]: TF_CONFIG is set by etj",
        ),
        (
            {
                "containers": [
                    {"name": "trainer", "env": [{"name": "ETJ_SHARD_PLAN", "value": "/x"}]}
                ]
            },
            "ETJ_SHARD_PLAN is set by etj",
        ),
        ({"containers": [{"name": "trainer"}, {"name": "tensorflow"}]}, "are the same"),
        ({"containers": [{"name": "a"}, {"name": "a"}]}, "'a' appears twice"),
        ({"containers": [{"image": "x"}]}, "containers[0].name is required"),
        ({"volumes": [{"name": "checkpoints", "emptyDir": {}}]}, "one of etj's own volumes"),
        (
            {
                "containers": [
                    {"name": "trainer", "volumeMounts": [{"name": "c", "mountPath": "/etc/etj"}]}
                ]
            },
            TRAINER_CONFIG_MOUNT,
        ),
    ],
)
def test_what_etj_owns_is_refused_with_the_field(spec, words):
    with pytest.raises(ValidationError) as e:
        PodTemplate.model_validate({"spec": spec})
    assert words in str(e.value)


def test_a_sidecar_may_set_tf_config():
    # Only etj's own container gets etj's TF_CONFIG; a sidecar's env is its business.
    PodTemplate.model_validate(
        {"spec": {"containers": [{"name": "proxy", "env": [{"name": "TF_CONFIG", "value": "x"}]}]}}
    )


def test_etj_validate_names_the_field():
    manifest = load_example("quickstart.yaml")
    manifest["spec"]["replicas"]["worker"]["template"] = {"spec": {"restartPolicy": "Always"}}
    result = validate_manifest(manifest)
    assert not result.ok
    assert any(
        p.field.startswith("spec.replicas.worker.template") and "restartPolicy" in p.message
        for p in result.problems
    ), result.problems


# ---- rendered pods ---------------------------------------------------------------------


def _job(templates: dict[str, dict]) -> tuple[EmbeddingTrainingJob, ShardPlan]:
    manifest = copy.deepcopy(load_example("quickstart.yaml"))
    replicas = manifest["spec"]["replicas"]
    for role, template in templates.items():
        replicas.setdefault(role, {})["template"] = template
    job = EmbeddingTrainingJob.from_manifest(manifest)
    return job, build_plan(job.spec)


def test_a_custom_command_keeps_tf_config_the_shard_plan_and_the_labels():
    template = {
        "metadata": {"labels": {LABEL_REPLICA_TYPE: "spoof", "team": "ads"}},
        "spec": {"containers": [{"name": "tensorflow", "command": ["python", "/app/train.py"]}]},
    }
    job, plan = _job({"worker": template, "ps": template, "chief": template})
    settings = RenderSettings()
    for role in ("chief", "worker", "ps"):
        pod = build_pod(job, plan, role, 0, settings)
        c = pod["spec"]["containers"][0]
        assert c["name"] == "trainer"
        assert c["command"] == ["python", "/app/train.py"]
        env = _env(c)
        assert json.loads(env["TF_CONFIG"])["task"] == {"type": role, "index": 0}
        assert env[SHARD_PLAN_ENV] == f"{TRAINER_CONFIG_MOUNT}/{SHARD_PLAN_FILE}"
        assert pod["metadata"]["labels"][LABEL_REPLICA_TYPE] == role
        assert pod["metadata"]["labels"]["team"] == "ads"
        assert pod["spec"]["restartPolicy"] == "Never"
    # the file ETJ_SHARD_PLAN names is in the ConfigMap every replica mounts
    cm = build_config_map(job, plan, settings)
    assert ShardPlan.model_validate_json(cm["data"][SHARD_PLAN_FILE]) == plan


def test_roles_without_a_template_run_etjs_trainer():
    job, plan = _job({"worker": {"spec": {"containers": [{"name": "trainer", "command": ["x"]}]}}})
    ps = build_pod(job, plan, "ps", 0, RenderSettings())
    assert ps["spec"]["containers"][0]["command"] == ["python", "-m", "etj_trainer"]


def test_template_resources_keep_the_plans_memory_floor():
    # The ps must hold its shards: a template asking less memory still gets the plan's.
    small = {
        "spec": {
            "containers": [
                {"name": "trainer", "resources": {"requests": {"memory": "1Mi", "cpu": "3"}}}
            ]
        }
    }
    job, plan = _job({"ps": small})
    res = build_pod(job, plan, "ps", 0, RenderSettings())["spec"]["containers"][0]["resources"]
    assert res["requests"]["cpu"] == "3"
    assert res["requests"]["memory"] != "1Mi"
    from etj.api.quantity import quantity_bytes

    assert quantity_bytes(res["requests"]["memory"]) >= plan.ps[0].memory_request_bytes


def test_template_is_in_the_crd_schema():
    from etj.core.crd import build_crd

    schema = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    replicas = schema["properties"]["spec"]["properties"]["replicas"]["properties"]
    for role in ("chief", "worker", "ps", "evaluator"):
        template = replicas[role]["properties"]["template"]
        assert template["properties"]["spec"]["x-kubernetes-preserve-unknown-fields"] is True


# ---- a job's own program: its steps are its own ------------------------------------------


@pytest.mark.parametrize(
    ("container", "own"),
    [
        ({"name": "tensorflow", "command": ["python", "train.py"]}, True),
        ({"name": "trainer", "image": "my/program:1"}, True),  # its entrypoint runs
        ({"name": "trainer", "env": [{"name": "A", "value": "1"}]}, False),
        ({"name": "sidecar", "command": ["sleep"]}, False),
    ],
)
def test_runs_own_program(container, own):
    assert PodTemplate.model_validate({"spec": {"containers": [container]}}).runs_own_program is own


def test_own_program_success_keeps_the_programs_last_step():
    """etj's trainer exits 0 only after training.steps; a job's own program decides its
    own: a Succeeded job says the step the program reported, not training.steps."""
    template = {"spec": {"containers": [{"name": "tensorflow", "command": ["python", "t.py"]}]}}
    job = make_job(
        replicas={"chief": {"replicas": 1, "template": template}, "worker": {"replicas": 2}},
        status={"phase": "Running"},
    )
    assert step_limit(job.spec.training, job.spec.data) == 1000
    message = 'TrainingComplete: {"progress":{"step":300,"loss":0.5}}'
    chief = pod("chief", 0, "Succeeded", exit_code=0, message=message)
    pods = [p if p.key != ("chief", 0) else chief for p in all_pods(job)]
    d = run(job, pods, progress=Progress(step=280))
    assert d.status.phase == Phase.SUCCEEDED and d.status.progress.step == 300
    # A program that says nothing at the end: the last progress read.
    chief = pod("chief", 0, "Succeeded", exit_code=0)
    pods = [p if p.key != ("chief", 0) else chief for p in all_pods(job)]
    assert run(job, pods, progress=Progress(step=280)).status.progress.step == 280
