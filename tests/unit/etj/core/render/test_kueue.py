"""Kueue's plain-Pod group labels and annotations (etj.core.render.kueue) and their place on
every rendered pod."""

from __future__ import annotations

import pytest

from etj.api.constants import (
    KUEUE_POD_GROUP_NAME_LABEL,
    KUEUE_POD_GROUP_TOTAL_COUNT_ANNOTATION,
    KUEUE_PRIORITY_CLASS_LABEL,
    KUEUE_QUEUE_NAME_LABEL,
    KUEUE_RETRIABLE_IN_GROUP_ANNOTATION,
    LABEL_REPLICA_TYPE,
    MAX_JOB_NAME_LENGTH,
)
from etj.core.render.kueue import KueueMetadata, kueue_pod_metadata, pod_group_name, queue_name
from tests.unit.conftest import load_example
from tests.unit.etj.core.render.test_build import rendered

QUEUE = {KUEUE_QUEUE_NAME_LABEL: "team-a"}


def test_no_queue_no_kueue_metadata():
    assert kueue_pod_metadata({}, "ctr", "u", 5, "worker") == KueueMetadata()
    assert kueue_pod_metadata({KUEUE_QUEUE_NAME_LABEL: ""}, "ctr", "u", 5, "ps") == KueueMetadata()
    assert queue_name({"other": "x"}) is None


@pytest.mark.parametrize("role", ["chief", "worker", "evaluator"])
def test_a_replica_gets_the_queue_the_group_and_its_size(role: str):
    m = kueue_pod_metadata(QUEUE, "ctr", "0123456789abcdef", 7, role)
    assert m.labels == {
        KUEUE_QUEUE_NAME_LABEL: "team-a",
        KUEUE_POD_GROUP_NAME_LABEL: "ctr-01234567",
    }
    assert m.annotations == {KUEUE_POD_GROUP_TOTAL_COUNT_ANNOTATION: "7"}


@pytest.mark.parametrize("role", ["chief", "worker", "ps", "evaluator"])
def test_every_pod_is_created_retriable_so_kueue_requeues_a_preempted_group(role: str):
    """An unretriable pod would make Kueue count a preempted group finished; the operator
    marks the pods only once the job has finished (etj.core.reconcile.policies.queue)."""
    m = kueue_pod_metadata(QUEUE, "ctr", "u", 3, role)
    assert KUEUE_RETRIABLE_IN_GROUP_ANNOTATION not in m.annotations


def test_a_priority_class_is_copied_from_the_job():
    labels = {**QUEUE, KUEUE_PRIORITY_CLASS_LABEL: "high"}
    assert (
        kueue_pod_metadata(labels, "ctr", None, 1, "chief").labels[KUEUE_PRIORITY_CLASS_LABEL]
        == "high"
    )


def test_group_name_is_a_valid_label_value_for_the_longest_job_name():
    name = pod_group_name("j" * MAX_JOB_NAME_LENGTH, "f" * 36)
    assert len(name) <= 63 and name.endswith("-ffffffff")
    assert pod_group_name("ctr", None) == "ctr"  # `etj render`: no uid yet


@pytest.mark.parametrize("example", ["quickstart.yaml", "mirrored.yaml", "large-tables.yaml"])
def test_every_rendered_pod_carries_the_group_sized_by_the_plan(example: str):
    manifest = load_example(example)
    manifest["metadata"].setdefault("labels", {}).update(QUEUE)
    manifest["metadata"]["uid"] = "abcdef0123456789"
    pods = [o for o in rendered(manifest) if o["kind"] == "Pod"]
    for pod in pods:
        meta = pod["metadata"]
        assert meta["labels"][KUEUE_QUEUE_NAME_LABEL] == "team-a"
        assert (
            meta["labels"][KUEUE_POD_GROUP_NAME_LABEL] == f"{manifest['metadata']['name']}-abcdef01"
        )
        # The count is the pods actually rendered: for `ps: auto`, the plan's ps count.
        assert meta["annotations"][KUEUE_POD_GROUP_TOTAL_COUNT_ANNOTATION] == str(len(pods))
        assert KUEUE_RETRIABLE_IN_GROUP_ANNOTATION not in meta["annotations"]
    # Only pods: the Service and ConfigMap are no part of the group.
    for obj in rendered(manifest):
        if obj["kind"] != "Pod":
            assert KUEUE_POD_GROUP_NAME_LABEL not in obj["metadata"]["labels"]


def test_ps_auto_counts_the_planned_ps():
    manifest = load_example("large-tables.yaml")
    manifest["metadata"].setdefault("labels", {}).update(QUEUE)
    pods = [o for o in rendered(manifest) if o["kind"] == "Pod"]
    ps = [p for p in pods if p["metadata"]["labels"][LABEL_REPLICA_TYPE] == "ps"]
    assert len(ps) > 1  # the plan chose several
    assert {p["metadata"]["annotations"][KUEUE_POD_GROUP_TOTAL_COUNT_ANNOTATION] for p in pods} == {
        str(len(pods))
    }


def test_without_a_queue_label_pods_carry_no_kueue_key():
    for pod in (o for o in rendered(load_example("quickstart.yaml")) if o["kind"] == "Pod"):
        keys = set(pod["metadata"]["labels"]) | set(pod["metadata"].get("annotations") or {})
        assert not any(k.startswith("kueue.x-k8s.io/") for k in keys)
