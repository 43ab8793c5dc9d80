"""etj.controller.kube with the client's API classes replaced by fakes: creates are idempotent and hand
back the stored object, deletes of what is gone are done, a status write is one merge patch
of the status subresource, a Lease replace is guarded by its resourceVersion, other errors
are raised."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from etj.controller.kube import Kube


class Recorder:
    """Any method call is recorded; ``answers`` gives its result or the exception raised."""

    def __init__(self, **answers: Any) -> None:
        self.answers = answers
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def __getattr__(self, name: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls.append((name, args, kwargs))
            answer = self.answers.get(name)
            if isinstance(answer, Exception):
                raise answer
            return answer

        return call


def kube(core: Recorder | None = None, custom: Recorder | None = None, **kw: Any) -> Kube:
    k = Kube(client.ApiClient(client.Configuration()))
    k.core = core or Recorder()  # type: ignore[assignment]
    k.custom = custom or Recorder()  # type: ignore[assignment]
    k.coordination = kw.get("coordination") or Recorder()  # type: ignore[assignment]
    return k


POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "n"}}


class Answer:
    """What ``ApiClient.call_api`` returns: a status and a JSON body."""

    def __init__(self, status: int, body: dict[str, Any] | None = None) -> None:
        self.status = status
        self.reason = "OK" if status < 300 else "Error"
        self.data = json.dumps(body or {}).encode()
        self.headers: dict[str, str] = {}

    def read(self) -> bytes:
        return self.data


def answering(k: Kube, *answers: Answer) -> list[tuple[str, str, Any]]:
    """``k``'s plain-JSON requests answered in turn; the (method, url, body) sent."""
    sent: list[tuple[str, str, Any]] = []
    queue = list(answers)

    def call_api(method: str, url: str, _headers: Any = None, body: Any = None, *_: Any) -> Any:
        sent.append((method, url, body))
        return queue.pop(0)

    k.api_client.call_api = call_api  # type: ignore[method-assign]
    return sent


@pytest.mark.parametrize(
    ("kind", "path"),
    [
        ("Pod", "/api/v1/namespaces/n/pods"),
        ("Service", "/api/v1/namespaces/n/services"),
        ("ConfigMap", "/api/v1/namespaces/n/configmaps"),
        ("PersistentVolumeClaim", "/api/v1/namespaces/n/persistentvolumeclaims"),
        ("NetworkPolicy", "/apis/networking.k8s.io/v1/namespaces/n/networkpolicies"),
    ],
)
def test_create_returns_the_stored_object_and_none_when_it_already_exists(kind, path):
    obj = {**POD, "kind": kind}
    k = kube()
    stored = {"kind": kind, "metadata": {"name": "p", "resourceVersion": "7"}}
    sent = answering(k, Answer(201, stored), Answer(409), Answer(403))
    assert asyncio.run(k.create(obj)) == stored
    # Plain JSON both ways, past the client's models.
    method, url, body = sent[0]
    assert (method, url.endswith(path), body) == ("POST", True, obj)
    assert k.core.calls == []  # type: ignore[attr-defined]
    assert asyncio.run(k.create(obj)) is None
    with pytest.raises(ApiException):
        asyncio.run(k.create(obj))


def test_deleting_what_is_gone_is_done():
    k = kube()
    sent = answering(k, Answer(404), Answer(200, POD), Answer(200, POD), Answer(500))
    assert asyncio.run(k.delete_pod("n", "p")) is False
    assert asyncio.run(k.delete_pod("n", "p")) is True
    assert [(m, u.split("?")[0].endswith("/api/v1/namespaces/n/pods/p")) for m, u, _ in sent] == [
        ("DELETE", True),
        ("DELETE", True),
    ]
    # A forced delete: grace period 0, for a pod whose kubelet will never confirm it.
    assert asyncio.run(k.delete_pod("n", "p", force=True)) is True
    assert sent[-1][1].endswith("?gracePeriodSeconds=0")
    with pytest.raises(ApiException):
        asyncio.run(k.delete_pod("n", "p"))


def test_a_status_write_is_one_patch_of_the_status_subresource():
    custom = Recorder(patch_namespaced_custom_object_status={"metadata": {"resourceVersion": "9"}})
    k = kube(custom=custom)
    stored = asyncio.run(k.patch_job_status("n", "j", {"phase": "Running"}))
    assert stored == {"metadata": {"resourceVersion": "9"}}
    ((name, args, _),) = custom.calls
    assert name == "patch_namespaced_custom_object_status"
    assert args[2:] == ("n", "embeddingtrainingjobs", "j", {"status": {"phase": "Running"}})


def test_a_missing_job_is_none_and_other_errors_are_raised():
    k = kube(custom=Recorder(get_namespaced_custom_object=ApiException(status=404)))
    assert asyncio.run(k.get_job("n", "j")) is None
    k = kube(custom=Recorder(get_namespaced_custom_object=ApiException(status=500)))
    with pytest.raises(ApiException):
        asyncio.run(k.get_job("n", "j"))


def test_listing_the_operators_pods_selects_by_label_and_parses_the_raw_answer():
    class Raw:
        data = json.dumps({"metadata": {"resourceVersion": "42"}, "items": [{"x": 1}]}).encode()

    core = Recorder(list_pod_for_all_namespaces=Raw(), list_namespaced_pod=Raw())
    k = kube(core=core)
    assert asyncio.run(k.list_managed_pods(None)) == ([{"x": 1}], "42")
    assert asyncio.run(k.list_managed_pods("n"))[1] == "42"
    for _, _, kwargs in core.calls:
        assert kwargs["label_selector"] == "app.kubernetes.io/managed-by=etj"
        assert kwargs["_preload_content"] is False


def test_a_lease_replace_is_guarded_by_its_resource_version():
    coordination = Recorder(replace_namespaced_lease=ApiException(status=409))
    k = kube(coordination=coordination)
    assert asyncio.run(k.replace_lease("s", "etj", {"holderIdentity": "a"}, "5")) is False
    ((_, args, _),) = coordination.calls
    assert args[2]["metadata"]["resourceVersion"] == "5"
    k = kube(coordination=Recorder(create_namespaced_lease=ApiException(status=409)))
    assert asyncio.run(k.create_lease("s", "etj", {"holderIdentity": "a"})) is False
