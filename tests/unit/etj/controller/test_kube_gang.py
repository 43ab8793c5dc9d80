"""etj.controller.kube for gang scheduling, with the client's API classes replaced by fakes: a
Workload (immutable pod groups) is deleted and made again, a PodGroup is patched, refusals
come back as ApiRefused with the server's message, and a pod with fields newer than the
client's models (spec.workloadRef) is sent as plain JSON instead of failing in the client."""

from __future__ import annotations

import asyncio
import json

import pytest
from kubernetes.client.rest import ApiException

from etj.controller.kube import ApiRefused
from tests.unit.etj.controller.test_kube import Answer, Recorder, answering, kube

WORKLOAD = {
    "apiVersion": "scheduling.k8s.io/v1alpha1",
    "kind": "Workload",
    "metadata": {"name": "j", "namespace": "n"},
    "spec": {"podGroups": [{"name": "replicas", "policy": {"gang": {"minCount": 3}}}]},
}
POD_GROUP = {
    "apiVersion": "scheduling.volcano.sh/v1beta1",
    "kind": "PodGroup",
    "metadata": {"name": "j", "namespace": "n"},
    "spec": {"minMember": 3},
}


def names(r: Recorder) -> list[str]:
    return [c[0] for c in r.calls]


def test_a_new_gang_is_created():
    custom = Recorder()
    asyncio.run(kube(custom=custom).apply_gang(WORKLOAD, None))
    assert names(custom) == ["create_namespaced_custom_object"]
    assert custom.calls[0][1][:4] == ("scheduling.k8s.io", "v1alpha1", "n", "workloads")


def test_a_changed_workload_is_remade_and_a_pod_group_patched():
    custom = Recorder()
    asyncio.run(kube(custom=custom).apply_gang(WORKLOAD, {"spec": {}}))
    assert names(custom) == ["delete_namespaced_custom_object", "create_namespaced_custom_object"]
    custom = Recorder()
    asyncio.run(kube(custom=custom).apply_gang(POD_GROUP, {"spec": {}}))
    assert names(custom) == ["patch_namespaced_custom_object"]
    assert custom.calls[0][1][-1] == {"spec": {"minMember": 3}}


@pytest.mark.parametrize("status", [403, 404, 422])
def test_refusals_carry_the_servers_message(status: int):
    refused = ApiException(status=status, reason="No")
    refused.body = json.dumps({"message": "workloads is forbidden"})
    custom = Recorder(create_namespaced_custom_object=refused)
    with pytest.raises(ApiRefused) as err:
        asyncio.run(kube(custom=custom).apply_gang(WORKLOAD, None))
    assert (err.value.status, err.value.message) == (status, "workloads is forbidden")


def test_other_errors_are_raised_as_they_are():
    custom = Recorder(create_namespaced_custom_object=ApiException(status=500))
    with pytest.raises(ApiException):
        asyncio.run(kube(custom=custom).apply_gang(WORKLOAD, None))


def test_a_pod_with_a_workload_ref_is_posted_as_plain_json():
    core = Recorder()
    k = kube(core=core)
    sent = answering(
        k, Answer(201, {"metadata": {"name": "p", "resourceVersion": "9"}}), Answer(409)
    )
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "n"},
        "spec": {"workloadRef": {"name": "j", "podGroup": "replicas"}, "containers": []},
    }
    assert asyncio.run(k.create(pod)) == {"metadata": {"name": "p", "resourceVersion": "9"}}
    assert core.calls == []  # not through the typed call, whose models reject workloadRef
    method, url, body = sent[0]
    assert (method, url.endswith("/api/v1/namespaces/n/pods")) == ("POST", True)
    assert body["spec"]["workloadRef"] == {"name": "j", "podGroup": "replicas"}
    # "Already exists" is done, as for any create.
    assert asyncio.run(k.create(pod)) is None
