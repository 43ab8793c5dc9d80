"""Gang scheduling rendering (etj.core.render.scheduling): the gang object per backend, sized
from the plan, and what every pod carries to join it."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from etj.api import EmbeddingTrainingJob
from etj.api.spec import GangScheduler
from etj.core.planner import build_plan
from etj.core.render import RenderSettings, build_objects
from etj.core.render.build import build_gang_object
from etj.core.render.scheduling import (
    COSCHEDULING_GROUP_LABEL,
    VOLCANO_GROUP_ANNOTATION,
    WORKLOAD_POD_GROUP,
)
from tests.unit.conftest import load_example

UID = "0b1c2d3e-0000-4000-8000-000000000001"


def job_with(policy: dict[str, Any] | None, **spec: Any) -> EmbeddingTrainingJob:
    manifest = copy.deepcopy(load_example("quickstart.yaml"))
    manifest["metadata"].update(namespace="team-a", uid=UID, generation=1)
    if policy is not None:
        manifest["spec"]["runPolicy"]["schedulingPolicy"] = policy
    manifest["spec"].update(spec)
    return EmbeddingTrainingJob.from_manifest(manifest)


def render(job: EmbeddingTrainingJob, default: GangScheduler = GangScheduler.WORKLOAD):
    objects = build_objects(job, build_plan(job.spec), RenderSettings(gang_scheduler=default))
    gang = [o for o in objects if o["kind"] in ("Workload", "PodGroup")]
    pods = [o for o in objects if o["kind"] == "Pod"]
    return (gang[0] if gang else None), pods


def test_no_policy_no_gang_and_pods_unchanged():
    gang, pods = render(job_with(None))
    assert gang is None
    for pod in pods:
        assert "schedulerName" not in pod["spec"]
        assert "workloadRef" not in pod["spec"]
        assert VOLCANO_GROUP_ANNOTATION not in pod["metadata"]["annotations"]
        assert COSCHEDULING_GROUP_LABEL not in pod["metadata"]["labels"]


def test_workload_gang_counts_every_pod_and_pods_point_at_it():
    job = job_with({})
    gang, pods = render(job)
    assert len(pods) == 5  # chief, 2 workers, 2 ps
    assert gang == {
        "apiVersion": "scheduling.k8s.io/v1alpha1",
        "kind": "Workload",
        "metadata": {
            "name": "quickstart",
            "namespace": "team-a",
            "labels": gang["metadata"]["labels"],
            "ownerReferences": [
                {
                    "apiVersion": "training.etj.dev/v1alpha1",
                    "kind": "EmbeddingTrainingJob",
                    "name": "quickstart",
                    "uid": UID,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "controllerRef": {
                "apiGroup": "training.etj.dev",
                "kind": "EmbeddingTrainingJob",
                "name": "quickstart",
            },
            "podGroups": [{"name": WORKLOAD_POD_GROUP, "policy": {"gang": {"minCount": 5}}}],
        },
    }
    assert gang["metadata"]["labels"]["training.etj.dev/job-name"] == "quickstart"
    for pod in pods:
        assert pod["spec"]["workloadRef"] == {"name": "quickstart", "podGroup": WORKLOAD_POD_GROUP}
        # kube-scheduler itself places Workload gangs.
        assert "schedulerName" not in pod["spec"]


def test_ps_auto_gang_is_sized_from_the_plan():
    job = job_with({}, sharding={"maxShardBytes": "8Mi", "defaultPsMemory": "1Gi"})
    job.spec.replicas.ps.replicas = "auto"  # type: ignore[union-attr]
    job.spec.model.embeddings[0].vocabulary_size = 20_000_000
    plan = build_plan(job.spec)
    assert plan.ps_replicas > 2
    gang = build_gang_object(job, plan, RenderSettings())
    assert gang is not None
    assert gang["spec"]["podGroups"][0]["policy"]["gang"]["minCount"] == 3 + plan.ps_replicas


def test_min_available_is_kept_and_capped_at_every_pod():
    gang, _ = render(job_with({"minAvailable": 3}))
    assert gang["spec"]["podGroups"][0]["policy"]["gang"]["minCount"] == 3
    gang, _ = render(job_with({"minAvailable": 50}))
    assert gang["spec"]["podGroups"][0]["policy"]["gang"]["minCount"] == 5


def test_volcano_pod_group():
    job = job_with(
        {"gangScheduler": "Volcano", "queue": "research", "priorityClass": "high"},
    )
    gang, pods = render(job)
    assert gang["apiVersion"] == "scheduling.volcano.sh/v1beta1"
    assert gang["kind"] == "PodGroup"
    spec = gang["spec"]
    assert spec["minMember"] == 5
    assert spec["queue"] == "research"
    assert spec["priorityClassName"] == "high"
    # chief and two workers request 500m / 1Gi each; each ps's memory request comes
    # from the plan: the gang reserves their sum.
    ps_memory = sum(
        int(p["spec"]["containers"][0]["resources"]["requests"]["memory"].removesuffix("Mi"))
        for p in pods
        if "-ps-" in p["metadata"]["name"]
    )
    assert spec["minResources"] == {"cpu": "1500m", "memory": f"{3 * 1024 + ps_memory}Mi"}
    for pod in pods:
        assert pod["metadata"]["annotations"][VOLCANO_GROUP_ANNOTATION] == "quickstart"
        assert pod["spec"]["schedulerName"] == "volcano"
        assert pod["spec"]["priorityClassName"] == "high"
        assert "workloadRef" not in pod["spec"]


def test_min_resources_of_a_partial_gang_take_the_chief_and_ps_first():
    job = job_with({"gangScheduler": "Volcano", "minAvailable": 1})
    gang, _ = render(job)
    assert gang["spec"]["minResources"] == {"cpu": "500m", "memory": "1Gi"}  # the chief


def test_scheduler_plugins_pod_group():
    job = job_with(
        {"gangScheduler": "SchedulerPlugins", "scheduleTimeoutSeconds": 120, "queue": "ignored"}
    )
    gang, pods = render(job)
    assert gang["apiVersion"] == "scheduling.x-k8s.io/v1alpha1"
    assert gang["kind"] == "PodGroup"
    assert gang["spec"]["minMember"] == 5
    assert gang["spec"]["scheduleTimeoutSeconds"] == 120
    assert "queue" not in gang["spec"]
    for pod in pods:
        assert pod["metadata"]["labels"][COSCHEDULING_GROUP_LABEL] == "quickstart"
        assert pod["spec"]["schedulerName"] == "scheduler-plugins-scheduler"


def test_operator_default_backend_and_a_job_choice_over_it():
    gang, _ = render(job_with({}), default=GangScheduler.VOLCANO)
    assert gang["apiVersion"] == "scheduling.volcano.sh/v1beta1"
    gang, _ = render(job_with({"gangScheduler": "Workload"}), default=GangScheduler.VOLCANO)
    assert gang["kind"] == "Workload"


def test_scheduler_name_without_a_gang():
    gang, pods = render(job_with({"gangScheduler": "None", "schedulerName": "my-scheduler"}))
    assert gang is None
    assert {p["spec"]["schedulerName"] for p in pods} == {"my-scheduler"}
    assert all("workloadRef" not in p["spec"] for p in pods)


def test_pod_template_priority_class_wins():
    job = job_with({"priorityClass": "high"}, podTemplate={"priorityClassName": "mine"})
    _, pods = render(job)
    assert {p["spec"]["priorityClassName"] for p in pods} == {"mine"}


def test_no_owner_reference_without_a_uid():
    manifest = copy.deepcopy(load_example("quickstart.yaml"))
    manifest["spec"]["runPolicy"]["schedulingPolicy"] = {}
    job = EmbeddingTrainingJob.from_manifest(manifest)
    gang = build_gang_object(job, build_plan(job.spec), RenderSettings())
    assert gang is not None
    assert "ownerReferences" not in gang["metadata"]


@pytest.mark.parametrize("bad", [{"minAvailable": 0}, {"scheduleTimeoutSeconds": 0}])
def test_schema_rejects_bad_policies(bad):
    with pytest.raises(ValueError):
        job_with(bad)
