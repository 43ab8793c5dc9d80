"""etj.controller.kube with the client's API classes replaced by fakes: creates are idempotent and hand
back the stored object, deletes of what is gone are done, a status write is one merge patch
of the status subresource, a Lease replace is guarded by its resourceVersion, other errors
are raised."""

from __future__ import annotations

import asyncio
import json
import re
import threading
import urllib.parse
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from etj.controller.kube import Kube, WatchExpired, watch_lines
from etj_testcluster.waiting import wait_for


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
    """An HTTP answer of the hot path (``Kube._send``): a status and a JSON body."""

    def __init__(self, status: int, body: dict[str, Any] | None = None) -> None:
        self.status = status
        self.reason = "OK" if status < 300 else "Error"
        self.data = json.dumps(body or {}).encode()


class Sent(list[tuple[str, str, Any]]):
    """The (method, url with its query, JSON body) of each request, and its headers."""

    def __init__(self) -> None:
        super().__init__()
        self.headers: list[dict[str, str]] = []


def answering(k: Kube, *answers: Answer) -> Sent:
    """``k``'s plain-JSON requests answered in turn (no connection is made)."""
    sent = Sent()
    queue = list(answers)

    async def send(
        method: str, url: str, headers: dict[str, str], data: bytes | None, query: dict[str, str]
    ) -> tuple[int, str, bytes]:
        full = url + ("?" + urllib.parse.urlencode(query) if query else "")
        sent.append((method, full, json.loads(data) if data is not None else None))
        sent.headers.append(headers)
        answer = queue.pop(0)
        return answer.status, answer.reason, answer.data

    k._send = send  # type: ignore[method-assign]
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


def test_a_kueue_workloads_owners_are_its_pods_uids_and_none_when_unknown(caplog):
    k = kube()
    workload = {
        "metadata": {
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Pod", "name": "j-chief-0", "uid": "u1"},
                {"apiVersion": "v1", "kind": "Pod", "name": "j-ps-0", "uid": "u2"},
                {"apiVersion": "x/v1", "kind": "Other", "name": "o", "uid": "u3"},
            ]
        }
    }
    sent = answering(k, Answer(200, workload), Answer(404), Answer(403), Answer(403), Answer(500))
    assert asyncio.run(k.queue_workload_owners("n", "j-1")) == frozenset({"u1", "u2"})
    assert sent[0][0] == "GET"
    assert sent[0][1].endswith("/apis/kueue.x-k8s.io/v1beta1/namespaces/n/workloads/j-1")
    # No Workload (not yet, or no more), or no right to read it: not known.
    assert asyncio.run(k.queue_workload_owners("n", "j-1")) is None
    with caplog.at_level("WARNING"):
        assert asyncio.run(k.queue_workload_owners("n", "j-1")) is None
        assert asyncio.run(k.queue_workload_owners("n", "j-1")) is None
    # Said once, with the rule that would mend it.
    said = [r.getMessage() for r in caplog.records if "Kueue Workloads" in r.getMessage()]
    assert len(said) == 1 and "workloads.kueue.x-k8s.io" in said[0]
    with pytest.raises(ApiException):
        asyncio.run(k.queue_workload_owners("n", "j-1"))


def test_a_status_write_is_one_merge_patch_of_the_status_subresource():
    k = kube()
    stored = {"metadata": {"resourceVersion": "9"}, "status": {"phase": "Running"}}
    sent = answering(k, Answer(200, stored), Answer(500))
    headers = sent.headers
    assert asyncio.run(k.patch_job_status("n", "j", {"phase": "Running"})) == stored
    ((method, url, body),) = sent
    assert method == "PATCH"
    assert url.endswith(
        "/apis/training.etj.dev/v1alpha1/namespaces/n/embeddingtrainingjobs/j/status"
    )
    assert body == {"status": {"phase": "Running"}}
    assert headers[0]["Content-Type"] == "application/merge-patch+json"
    assert k.custom.calls == []  # type: ignore[attr-defined]
    with pytest.raises(ApiException):
        asyncio.run(k.patch_job_status("n", "j", {"phase": "Running"}))


def test_the_hot_path_sends_the_client_configurations_credentials_and_user_agent():
    cfg = client.Configuration()
    cfg.host = "https://api.example:6443"
    cfg.api_key = {"BearerToken": "t0k"}
    cfg.api_key_prefix = {"BearerToken": "Bearer"}
    api = client.ApiClient(cfg)
    api.user_agent = "etj-operator/test"
    k = Kube(api)
    sent = answering(k, Answer(201, POD), Answer(403, {"message": "forbidden: no"}))
    asyncio.run(k.create(POD))
    assert sent[0][1] == "https://api.example:6443/api/v1/namespaces/n/pods"
    assert sent.headers[0]["authorization"] == "Bearer t0k"
    assert sent.headers[0]["User-Agent"] == "etj-operator/test"
    assert sent.headers[0]["Content-Type"] == "application/json"
    # An error carries the API server's answer, as the client's own errors do.
    with pytest.raises(ApiException) as refused:
        asyncio.run(k.create(POD))
    assert refused.value.status == 403 and "forbidden: no" in str(refused.value.body)


def test_a_missing_job_is_none_and_other_errors_are_raised():
    k = kube(custom=Recorder(get_namespaced_custom_object=ApiException(status=404)))
    assert asyncio.run(k.get_job("n", "j")) is None
    k = kube(custom=Recorder(get_namespaced_custom_object=ApiException(status=500)))
    with pytest.raises(ApiException):
        asyncio.run(k.get_job("n", "j"))


class Pages:
    """A LIST answered in pages of the ``limit`` asked (raw JSON, continue tokens), each
    call recorded with the thread it ran in; ``expire``: the continue tokens that answer 410
    once."""

    def __init__(self, objects: list[dict[str, Any]], expire: set[str] | None = None) -> None:
        self.objects = objects
        self.expire = expire or set()
        self.calls: list[tuple[dict[str, Any], str]] = []

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append((kwargs, threading.current_thread().name))
        token = kwargs.get("_continue")
        if token in self.expire:
            self.expire.discard(token)
            raise ApiException(status=410, reason="Expired")
        start, limit = int(token or 0), kwargs["limit"]
        rest = start + limit < len(self.objects)
        meta = {"resourceVersion": "42" if start == 0 else "43"}  # a later page's is ignored
        if rest:
            meta["continue"] = str(start + limit)

        class Raw:
            data = json.dumps({"metadata": meta, "items": self.objects[start : start + limit]})

        return Raw()


def test_a_resync_list_is_paged_decoded_in_a_worker_thread_and_kept_as_asked(monkeypatch):
    import etj.controller.kube as module

    monkeypatch.setattr(module, "LIST_PAGE", 2)
    pods = [{"metadata": {"name": f"p{i}"}, "spec": {"big": "x" * 100}} for i in range(5)]
    pages = Pages(pods)
    k = kube()
    k.core.list_pod_for_all_namespaces = pages  # type: ignore[attr-defined]
    k.core.list_namespaced_pod = pages  # type: ignore[attr-defined]

    async def listed(namespace: str | None) -> Any:
        loop_thread = threading.current_thread().name
        got = await k.list_managed_pods(namespace, keep=lambda p: {"metadata": p["metadata"]})
        return got, loop_thread

    (items, version), loop_thread = asyncio.run(listed(None))
    assert [p["metadata"]["name"] for p in items] == [f"p{i}" for i in range(5)]
    assert all("spec" not in p for p in items) and version == "42"
    assert [c[0].get("_continue") for c in pages.calls] == [None, "2", "4"]
    for kwargs, thread in pages.calls:
        assert kwargs["label_selector"] == "app.kubernetes.io/managed-by=etj"
        assert kwargs["_preload_content"] is False and kwargs["limit"] == 2
        assert thread != loop_thread
    assert asyncio.run(listed("n"))[0][0] == items  # one namespace's: the same pages
    jobs = Pages(pods)
    k.custom.list_namespaced_custom_object = jobs  # type: ignore[attr-defined]
    assert len(asyncio.run(k.list_jobs("n"))[0]) == 5 and len(jobs.calls) == 3


def test_a_paged_list_whose_continue_token_expired_starts_again(monkeypatch):
    import etj.controller.kube as module

    monkeypatch.setattr(module, "LIST_PAGE", 2)
    pages = Pages([{"metadata": {"name": f"p{i}"}} for i in range(3)], expire={"2"})
    k = kube()
    k.core.list_namespaced_pod = pages  # type: ignore[attr-defined]
    items, _ = asyncio.run(k.list_managed_pods("n"))
    assert [p["metadata"]["name"] for p in items] == ["p0", "p1", "p2"]  # no duplicates
    assert [c[0].get("_continue") for c in pages.calls] == [None, "2", None, "2"]
    # A 410 on the first page is no expired token: raised.
    first = Pages([], expire={None})  # type: ignore[arg-type]
    k.core.list_namespaced_pod = first  # type: ignore[attr-defined]
    with pytest.raises(ApiException):
        asyncio.run(k.list_managed_pods("n"))


def test_a_lease_replace_is_guarded_by_its_resource_version():
    coordination = Recorder(replace_namespaced_lease=ApiException(status=409))
    k = kube(coordination=coordination)
    assert asyncio.run(k.replace_lease("s", "etj", {"holderIdentity": "a"}, "5")) is False
    ((_, args, _),) = coordination.calls
    assert args[2]["metadata"]["resourceVersion"] == "5"
    k = kube(coordination=Recorder(create_namespaced_lease=ApiException(status=409)))
    assert asyncio.run(k.create_lease("s", "etj", {"holderIdentity": "a"})) is False


def test_a_watch_streams_complete_lines_as_they_come():
    chunks = [b'{"a":', b' 1}\n{"b": 2}\n\n{"c"', b": 3}\n"]
    assert list(watch_lines(chunks)) == [[b'{"a": 1}', b'{"b": 2}'], [b'{"c": 3}']]


class Stream:
    """A watch's raw answer: its chunks, read by another thread; ``shutdown`` (the loop
    stopped listening) ends a read that waits for more."""

    def __init__(self, status: int, chunks: list[bytes], more: bool = False) -> None:
        self.status = status
        self.chunks = chunks
        self.more = more  # after its chunks, wait until shut down (an open watch)
        self.shut = threading.Event()
        self.released = False
        self.reason, self.headers, self.data = "Error", {}, b'{"message": "no"}'

    def stream(self, **_: Any) -> Any:
        yield from self.chunks
        if self.more:
            self.shut.wait(10)
            raise OSError("shut down")

    def read(self) -> bytes:
        return self.data

    def shutdown(self) -> None:
        self.shut.set()

    def close(self) -> None:
        pass

    def release_conn(self) -> None:
        self.released = True


def _event(kind: str, rv: str, **obj: Any) -> bytes:
    return (
        json.dumps({"type": kind, "object": {"metadata": {"resourceVersion": rv}, **obj}}) + "\n"
    ).encode()


async def _drain(k: Kube, namespace: str | None = "n") -> list[tuple[str, str]]:
    return [
        (kind, obj["metadata"]["resourceVersion"])
        async for kind, obj in k.watch_managed_pods(namespace, "5")
    ]


def test_a_pod_watch_yields_plain_events_from_the_version_it_was_given():
    answer = Stream(200, [_event("ADDED", "6"), _event("BOOKMARK", "7") + _event("DELETED", "8")])
    core = Recorder(list_namespaced_pod=answer, list_pod_for_all_namespaces=answer)
    k = kube(core=core)
    assert asyncio.run(_drain(k)) == [("ADDED", "6"), ("BOOKMARK", "7"), ("DELETED", "8")]
    ((name, args, kwargs),) = core.calls
    assert (name, args) == ("list_namespaced_pod", ("n",))
    assert kwargs["label_selector"] == "app.kubernetes.io/managed-by=etj"
    assert (kwargs["watch"], kwargs["allow_watch_bookmarks"]) == (True, True)
    assert (kwargs["resource_version"], kwargs["_preload_content"]) == ("5", False)
    assert answer.released
    answer.chunks = []
    asyncio.run(_drain(k, None))
    assert core.calls[-1][0] == "list_pod_for_all_namespaces"


def test_an_expired_version_and_other_watch_errors_are_raised():
    expired = _event("ERROR", "", code=410, message="too old resource version")
    k = kube(core=Recorder(list_namespaced_pod=Stream(200, [_event("ADDED", "6"), expired])))
    with pytest.raises(WatchExpired):
        asyncio.run(_drain(k))
    k = kube(core=Recorder(list_namespaced_pod=Stream(410, [])))
    with pytest.raises(WatchExpired):
        asyncio.run(_drain(k))
    k = kube(core=Recorder(list_namespaced_pod=Stream(200, [_event("ERROR", "", code=500)])))
    with pytest.raises(ApiException):
        asyncio.run(_drain(k))
    k = kube(core=Recorder(list_namespaced_pod=Stream(403, [])))
    with pytest.raises(ApiException):
        asyncio.run(_drain(k))


def test_leaving_a_watch_ends_its_reading_thread():
    answer = Stream(200, [_event("ADDED", "6")], more=True)
    k = kube(core=Recorder(list_namespaced_pod=answer))

    async def first() -> str:
        async for kind, _ in k.watch_managed_pods("n", "5"):
            return kind  # leaves the watch while its thread waits for more
        return ""

    assert asyncio.run(first()) == "ADDED"
    assert answer.shut.is_set() and answer.released
    wait_for(
        lambda: not any(t.name == "etj-pod-watch" for t in threading.enumerate()),
        120,
        "the watch's thread to end with it",
        every=0.01,
    )


def test_a_connection_lost_before_the_answer_is_tried_once_more_on_a_new_one():
    """Over a real socket (a small HTTP/1.1 server on 127.0.0.1): the first connection is
    closed without an answer, as a server that dropped a kept-alive one would; the create
    goes through on the second."""
    stored = json.dumps({"kind": "Pod", "metadata": {"name": "p", "resourceVersion": "3"}})
    connections: list[bytes] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))  # type: ignore[union-attr]
        await reader.readexactly(length)
        connections.append(head.split(b"\r\n", 1)[0])
        if len(connections) > 1:
            writer.write(
                b"HTTP/1.1 201 Created\r\nContent-Type: application/json\r\n"
                + f"Content-Length: {len(stored)}\r\n\r\n{stored}".encode()
            )
            await writer.drain()
        writer.close()

    async def scenario() -> Any:
        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        cfg = client.Configuration()
        cfg.host = f"http://127.0.0.1:{port}"
        k = Kube(client.ApiClient(cfg))
        try:
            return await k.create(POD)
        finally:
            await k.close()
            server.close()
            await server.wait_closed()

    assert asyncio.run(scenario()) == json.loads(stored)
    assert connections == [b"POST /api/v1/namespaces/n/pods HTTP/1.1"] * 2
