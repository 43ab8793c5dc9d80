"""The operator's diff-base storage gives kopf the same essence of an object as kopf's own,
without copying the status and managedFields it drops."""

from __future__ import annotations

import copy

import kopf

from etj.api.constants import GROUP
from etj.controller.handlers import EssenceStorage

POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "name": "j-worker-0",
        "namespace": "n",
        "uid": "u",
        "resourceVersion": "7",
        "labels": {"training.etj.dev/job-name": "j"},
        "annotations": {
            "training.etj.dev/spec-generation": "1",
            # kopf's own storage and kubectl's: left out of the essence by kopf.
            f"{GROUP}/last-handled-configuration": '{"spec": {}}',
            "kubectl.kubernetes.io/last-applied-configuration": "{}",
        },
        "ownerReferences": [{"kind": "EmbeddingTrainingJob", "name": "j", "uid": "u0"}],
        "managedFields": [{"manager": "etj", "fieldsV1": {"f:spec": {}}}],
    },
    "spec": {"containers": [{"name": "trainer", "env": [{"name": "A", "value": "1"}]}]},
    "status": {"phase": "Running", "containerStatuses": [{"name": "trainer", "ready": True}]},
}


def test_the_essence_is_kopfs_own():
    ours = EssenceStorage(prefix=GROUP, key="last-handled-configuration")
    theirs = kopf.AnnotationsDiffBaseStorage(prefix=GROUP, key="last-handled-configuration")
    for obj in (POD, {**POD, "metadata": {"name": "bare"}}, {k: POD[k] for k in ("kind", "spec")}):
        body = kopf.Body(copy.deepcopy(obj))
        assert ours.build(body=body) == theirs.build(body=body)
    # A handler that watches fields outside the essence still gets them.
    body = kopf.Body(copy.deepcopy(POD))
    assert ours.build(body=body, extra_fields=["status.phase"]) == theirs.build(
        body=body, extra_fields=["status.phase"]
    )
    assert ours.build(body=body, extra_fields=["status.phase"])["status"] == {"phase": "Running"}


def test_the_essence_shares_nothing_with_the_object():
    pod = copy.deepcopy(POD)
    essence = EssenceStorage(prefix=GROUP).build(body=kopf.Body(pod))
    essence["spec"]["containers"][0]["env"].append({"name": "B"})
    assert pod["spec"]["containers"][0]["env"] == [{"name": "A", "value": "1"}]
