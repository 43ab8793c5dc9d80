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


def test_create_returns_the_stored_object_and_none_when_it_already_exists():
    stored = client.V1Pod(metadata=client.V1ObjectMeta(name="p", resource_version="7"))
    k = kube(core=Recorder(create_namespaced_pod=stored))
    assert asyncio.run(k.create(POD)) == {"metadata": {"name": "p", "resourceVersion": "7"}}
    k = kube(core=Recorder(create_namespaced_pod=ApiException(status=409)))
    assert asyncio.run(k.create(POD)) is None
    k = kube(core=Recorder(create_namespaced_pod=ApiException(status=403)))
    with pytest.raises(ApiException):
        asyncio.run(k.create(POD))


def test_deleting_what_is_gone_is_done():
    k = kube(core=Recorder(delete_namespaced_pod=ApiException(status=404)))
    assert asyncio.run(k.delete_pod("n", "p")) is False
    k = kube(core=Recorder())
    assert asyncio.run(k.delete_pod("n", "p")) is True
    assert k.core.calls == [("delete_namespaced_pod", ("p", "n"), {})]  # type: ignore[attr-defined]


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
