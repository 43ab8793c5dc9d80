"""The one module that talks to the Kubernetes API (besides kopf's own watch of the jobs).

A thin, idempotent facade over the official client: reads return plain dicts in the API's
camelCase form, creates treat "already exists" as done, deletes treat "not found" as done,
so a retried or repeated reconcile never duplicates anything. The blocking client runs in
worker threads (``asyncio.to_thread``) so the operator's event loop stays responsive.

The requests of a reconcile's hot path (creates, deletes of pods, status patches, claim
reads) go as plain JSON over aiohttp on the event loop instead (``Kube._request``), with
the client configuration's server, TLS, proxy and credentials: the client's models, urllib3
and a worker thread per request would cost a burst of jobs about a quarter of the
operator's CPU. JSON is decoded (and those requests' bodies encoded) with orjson: the standard
library's decoder takes a tenth of the operator's CPU on a burst
(``benchmarks/operator_burst.py``; ``benchmarks/RESULTS.md``).
No decisions are made here.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from typing import Any

import aiohttp
import orjson
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from etj import __version__
from etj.api.constants import (
    GROUP,
    KUEUE_GROUP,
    KUEUE_POD_FINALIZER,
    KUEUE_RETRIABLE_IN_GROUP_ANNOTATION,
    KUEUE_WORKLOAD_VERSION,
    LABEL_MANAGED_BY,
    MANAGED_BY_VALUE,
    PLURAL,
    VERSION,
)
from etj.core.render.meta import job_selector
from etj.core.render.scheduling import GANG_APIS, GangApi, immutable_gang


def load_config(kubeconfig: str | None = None) -> client.ApiClient:
    """An API client from ``kubeconfig`` when given, else the in-cluster service account,
    else KUBECONFIG / ~/.kube/config (like kubectl). An explicit path always wins: inside a
    pod, ``--kubeconfig`` must not be silently replaced by the pod's own account."""
    cfg = client.Configuration()
    if kubeconfig:
        config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
    else:
        try:
            config.load_incluster_config(client_configuration=cfg)
        except config.ConfigException:
            config.load_kube_config(client_configuration=cfg)
    # The burst benchmark creates hundreds of pods at once: allow parallel connections.
    cfg.connection_pool_maxsize = 32
    api = client.ApiClient(cfg)
    # Its own name in the API server's audit log (not the generator's default).
    api.user_agent = USER_AGENT
    return api


log = logging.getLogger(__name__)

USER_AGENT = f"etj-operator/{__version__}"

# What a paged LIST keeps of each object it decodes (``Kube._paged``).
Keep = Callable[[dict[str, Any]], dict[str, Any]]

# Objects per page of a resync's LISTs: the API server's own default chunk for its
# clients' informers is 500; 1,000 pods are a few MB of JSON per request.
LIST_PAGE = 1000

# A request of the hot path that takes longer fails (and its pass is retried).
REQUEST_TIMEOUT = aiohttp.ClientTimeout(total=60, sock_connect=10)


def ssl_context(cfg: client.Configuration) -> ssl.SSLContext | bool:
    """TLS as the client configuration says (the CA, a client certificate, verification,
    the host name checked); True: the default context, False: no verification."""
    if not cfg.verify_ssl:
        return False
    ctx = ssl.create_default_context(cafile=cfg.ssl_ca_cert, cadata=cfg.ca_cert_data)
    if cfg.cert_file:
        ctx.load_cert_chain(cfg.cert_file, cfg.key_file)
    if cfg.assert_hostname is False:
        ctx.check_hostname = False
    return ctx


async def _call(tolerated: int, fn: Any, *args: Any, **kwargs: Any) -> tuple[bool, Any]:
    """Run a blocking client call in a worker thread: ``(True, result)``, or ``(False,
    None)`` when the API answered ``tolerated`` (404: already gone, 409: already exists or
    changed meanwhile). Any other error is raised."""
    try:
        return True, await asyncio.to_thread(fn, *args, **kwargs)
    except ApiException as exc:
        if exc.status == tolerated:
            return False, None
        raise


async def _tolerate(tolerated: int, request: Awaitable[Any]) -> tuple[bool, Any]:
    """As ``_call``, for a request made on the event loop."""
    try:
        return True, await request
    except ApiException as exc:
        if exc.status == tolerated:
            return False, None
        raise


def _lease(namespace: str, name: str, spec: dict[str, Any], version: str | None = None) -> Any:
    meta = {"name": name, "namespace": namespace}
    if version is not None:
        meta["resourceVersion"] = version
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta, "spec": spec}


# Where each kind etj creates is POSTed.
_CREATE_PATHS = {
    "Service": "/api/v1/namespaces/{namespace}/services",
    "ConfigMap": "/api/v1/namespaces/{namespace}/configmaps",
    "PersistentVolumeClaim": "/api/v1/namespaces/{namespace}/persistentvolumeclaims",
    "Pod": "/api/v1/namespaces/{namespace}/pods",
    "NetworkPolicy": "/apis/networking.k8s.io/v1/namespaces/{namespace}/networkpolicies",
}


def watch_lines(chunks: Iterable[bytes]) -> Iterator[list[bytes]]:
    """The complete lines (one JSON event each) of a watch stream's chunks, as they come:
    per chunk, the lines it completes."""
    rest = b""
    for chunk in chunks:
        *lines, rest = (rest + chunk).split(b"\n")
        if complete := [line for line in lines if line.strip()]:
            yield complete


def _selector(labels: dict[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


class WatchExpired(Exception):
    """The resourceVersion a watch started from is too old (410 Gone): list again."""


class ApiRefused(Exception):
    """The API server would not take a write: 403 (not allowed), 404 (not served), 422
    (invalid); ``message`` is its own."""

    def __init__(self, status: int, message: str):
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message


def _refusal(exc: ApiException) -> ApiRefused:
    try:
        message = str(orjson.loads(exc.body or "{}").get("message") or exc.reason)
    except ValueError:
        message = str(exc.reason)
    return ApiRefused(int(exc.status), message)


class Kube:
    """Idempotent operations on a job and its children."""

    def __init__(self, api_client: client.ApiClient):
        self.api_client = api_client
        self.core = client.CoreV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.coordination = client.CoordinationV1Api(api_client)
        # The hot path's aiohttp session, made on first use in the running loop.
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ssl: ssl.SSLContext | bool | None = None
        # Said once: Kueue's Workloads are not readable (queue_workload_owners).
        self._warned_workload_access = False

    async def close(self) -> None:
        """Close the hot path's connections (the operator's cleanup)."""
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _plain(self, obj: Any) -> Any:
        return self.api_client.sanitize_for_serialization(obj)

    # ---- reads -------------------------------------------------------------------------

    async def get_job(self, namespace: str, name: str) -> dict[str, Any] | None:
        found, job = await _call(
            404, self.custom.get_namespaced_custom_object, GROUP, VERSION, namespace, PLURAL, name
        )
        return dict(job) if found else None

    async def list_job_pods(self, namespace: str, job_name: str) -> list[dict[str, Any]]:
        pods = await asyncio.to_thread(
            self.core.list_namespaced_pod,
            namespace,
            label_selector=_selector(job_selector(job_name)),
        )
        return list(self._plain(pods).get("items") or [])

    async def list_jobs(
        self, namespace: str | None, keep: Keep | None = None
    ) -> tuple[list[dict[str, Any]], str]:
        """Every job (of one namespace, or cluster-wide) and the list's resourceVersion,
        each as ``keep`` makes it (see ``_paged``)."""
        if namespace is None:
            return await self._paged(
                self.custom.list_cluster_custom_object, (GROUP, VERSION, PLURAL), {}, keep
            )
        return await self._paged(
            self.custom.list_namespaced_custom_object,
            (GROUP, VERSION, namespace, PLURAL),
            {},
            keep,
        )

    async def list_managed_pods(
        self, namespace: str | None, keep: Keep | None = None
    ) -> tuple[list[dict[str, Any]], str]:
        """Every pod etj made (of one namespace, or cluster-wide) and the list's version,
        each as ``keep`` makes it (see ``_paged``)."""
        query = {"label_selector": _selector({LABEL_MANAGED_BY: MANAGED_BY_VALUE})}
        if namespace is None:
            return await self._paged(self.core.list_pod_for_all_namespaces, (), query, keep)
        return await self._paged(self.core.list_namespaced_pod, (namespace,), query, keep)

    async def _paged(
        self, call: Any, args: tuple[Any, ...], query: dict[str, Any], keep: Keep | None
    ) -> tuple[list[dict[str, Any]], str]:
        """A LIST in pages of ``LIST_PAGE`` objects (limit/continue: one consistent snapshot,
        at the first page's resourceVersion), each page fetched, decoded and passed through
        ``keep`` (the part of each object the caller keeps) in a worker thread: the event
        loop every job's loop shares is free meanwhile, and at most a page of whole objects
        is alive at once (10,000 pods decoded whole are hundreds of MB the process keeps
        as its high-water mark). The raw JSON, not the client's models: building V1Pod
        models for thousands of pods only to turn them back into dicts costs seconds of
        CPU. A continue token that expired meanwhile (410) starts the list again."""

        def page(token: str | None) -> tuple[list[dict[str, Any]], str, str | None]:
            extra = {"_continue": token} if token else {}
            resp = call(*args, **query, limit=LIST_PAGE, _preload_content=False, **extra)
            found = orjson.loads(resp.data)
            meta = found.get("metadata") or {}
            items = found.get("items") or []
            if keep is not None:
                items = [keep(item) for item in items]
            return items, str(meta.get("resourceVersion", "")), meta.get("continue") or None

        for _ in range(3):
            items: list[dict[str, Any]] = []
            version, token = "", None
            try:
                while True:
                    got, page_version, token = await asyncio.to_thread(page, token)
                    items.extend(got)
                    version = version or page_version
                    if token is None:
                        return items, version
            except ApiException as exc:
                if exc.status != 410 or token is None:
                    raise
                log.info("a paged LIST's continue token expired; listing again")
        raise ApiException(status=410, reason="continue tokens kept expiring")

    async def watch_managed_pods(
        self, namespace: str | None, since: str, timeout: int = 300
    ) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        """The watch events ``(type, object)`` of the pods etj made (of one namespace, or
        cluster-wide) after resourceVersion ``since``, bookmarks included, as plain dicts;
        the API server ends the watch after ``timeout`` seconds (the iterator then ends).
        Raises ``WatchExpired`` when ``since`` is too old, ``ApiException`` on any other
        error the API server reports. The blocking stream
        is read in a daemon thread of its own (a watch holds a worker thread for minutes;
        leaving the loop closes its connection, which ends the thread)."""
        query: dict[str, Any] = {
            "label_selector": _selector({LABEL_MANAGED_BY: MANAGED_BY_VALUE}),
            "watch": True,
            "allow_watch_bookmarks": True,
            "resource_version": since,
            "timeout_seconds": timeout,
            "_preload_content": False,
        }
        resp: Any
        if namespace is None:
            resp = await asyncio.to_thread(self.core.list_pod_for_all_namespaces, **query)
        else:
            resp = await asyncio.to_thread(self.core.list_namespaced_pod, namespace, **query)
        if not 200 <= resp.status <= 299:
            await asyncio.to_thread(resp.read)
            resp.release_conn()
            if resp.status == 410:
                raise WatchExpired(since)
            raise ApiException(http_resp=resp)
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[list[dict[str, Any]] | BaseException | None] = asyncio.Queue()

        def post(item: list[dict[str, Any]] | BaseException | None) -> None:
            with contextlib.suppress(RuntimeError):  # the loop is gone: nobody listens
                loop.call_soon_threadsafe(queue.put_nowait, item)

        def read() -> None:
            try:
                for batch in watch_lines(resp.stream(amt=None, decode_content=True)):
                    post([orjson.loads(line) for line in batch])
            except BaseException as exc:  # handed to the loop; a closed connection included
                post(exc)
                return
            post(None)

        threading.Thread(target=read, name="etj-pod-watch", daemon=True).start()
        try:
            while (item := await queue.get()) is not None:
                if isinstance(item, BaseException):
                    raise item
                for event in item:
                    kind, obj = str(event.get("type")), event.get("object") or {}
                    if kind == "ERROR" and obj.get("code") == 410:
                        raise WatchExpired(since)
                    if kind == "ERROR":
                        raise ApiException(status=obj.get("code"), reason=obj.get("message"))
                    yield kind, obj
        finally:
            # Ends the reading thread if the loop stopped listening (cancelled, or an
            # error): its blocking read fails on the shut socket.
            resp.shutdown()
            resp.close()
            resp.release_conn()

    async def exists(self, kind: str, namespace: str, name: str) -> bool:
        read = {
            "Service": self.core.read_namespaced_service,
            "ConfigMap": self.core.read_namespaced_config_map,
        }[kind]
        found, _ = await _call(404, read, name, namespace)
        return found

    async def claim_access_modes(self, namespace: str, name: str) -> list[str] | None:
        """The access modes of a PersistentVolumeClaim (its bound volume's, else those it
        asks for); None when it does not exist."""
        claim = await self.get_claim(namespace, name)
        if claim is None:
            return None
        modes = (claim.get("status") or {}).get("accessModes") or claim["spec"].get("accessModes")
        return list(modes or [])

    async def get_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        """A PersistentVolumeClaim as plain JSON; None when it does not exist."""
        path = _CREATE_PATHS["PersistentVolumeClaim"].format(namespace=namespace) + f"/{name}"
        found, claim = await _tolerate(404, self._request("GET", path))
        return claim if found else None

    async def queue_workload_owners(self, namespace: str, name: str) -> frozenset[str] | None:
        """The uids of the owners of Kueue's Workload ``name`` (a pod group's: its pods);
        None when it does not exist, or Kueue's API is not served or not readable (the
        chart grants ``get``; an older install may not: a warning, once)."""
        api = f"/apis/{KUEUE_GROUP}/{KUEUE_WORKLOAD_VERSION}"
        path = f"{api}/namespaces/{namespace}/workloads/{name}"
        try:
            found, workload = await _tolerate(404, self._request("GET", path))
        except ApiException as exc:
            if exc.status != 403:
                raise
            if not self._warned_workload_access:
                self._warned_workload_access = True
                log.warning(
                    "cannot read Kueue Workloads (%s): a requeued group's last old pod is let "
                    "go without waiting for Kueue to adopt its new pods; grant get on "
                    "workloads.%s",
                    exc.reason,
                    KUEUE_GROUP,
                )
            return None
        if not found:
            return None
        refs = workload["metadata"].get("ownerReferences") or []
        return frozenset(r["uid"] for r in refs if r.get("kind") == "Pod" and r.get("uid"))

    # ---- writes ------------------------------------------------------------------------

    async def create(self, obj: dict[str, Any]) -> dict[str, Any] | None:
        """Create a Service, ConfigMap, PersistentVolumeClaim, NetworkPolicy or Pod: the
        object as stored; None when it already existed."""
        path = _CREATE_PATHS[obj["kind"]].format(namespace=obj["metadata"]["namespace"])
        made, created = await _tolerate(409, self._request("POST", path, obj))
        return created if made else None

    # ---- gang objects (Workload, Volcano or scheduler-plugins PodGroup) ---------------

    async def get_gang(self, api: GangApi, namespace: str, name: str) -> dict[str, Any] | None:
        """The gang object, or None when it does not exist (or its API is not served)."""
        found, obj = await _call(
            404,
            self.custom.get_namespaced_custom_object,
            api.group,
            api.version,
            namespace,
            api.plural,
            name,
        )
        return dict(obj) if found else None

    async def apply_gang(self, obj: dict[str, Any], existing: dict[str, Any] | None) -> None:
        """Make the gang object ``obj``, or bring ``existing`` to its spec: a Workload's pod
        groups are immutable, so it is deleted and made again (the pods find it by name);
        a PodGroup's spec is merge-patched. Raises ``ApiRefused`` on 403 (not allowed), 404
        (its API not served) and 422 (invalid)."""
        try:
            await self._apply_gang(obj, existing)
        except ApiException as exc:
            if exc.status in (403, 404, 422):
                raise _refusal(exc) from None
            raise

    async def _apply_gang(self, obj: dict[str, Any], existing: dict[str, Any] | None) -> None:
        api = next(a for a in GANG_APIS.values() if a.api_version == obj["apiVersion"])
        meta = obj["metadata"]
        args = (api.group, api.version, meta["namespace"], api.plural)
        if existing is not None and not immutable_gang(obj):
            await asyncio.to_thread(
                self.custom.patch_namespaced_custom_object,
                *args,
                meta["name"],
                {"spec": obj["spec"]},
            )
            return
        if existing is not None:
            await _call(404, self.custom.delete_namespaced_custom_object, *args, meta["name"])
        await asyncio.to_thread(self.custom.create_namespaced_custom_object, *args, obj)

    async def _request(
        self,
        method: str,
        path: str,
        body: Any = None,
        query: dict[str, str] | None = None,
        content_type: str = "application/json",
    ) -> dict[str, Any]:
        """One request with a plain JSON body and answer, past the client's models (they
        lag the API: a v1.35 ``spec.workloadRef`` fails their validation before any request
        is made) and off the worker threads. Errors are the client's ``ApiException``s, as
        from its typed calls."""
        cfg = self.api_client.configuration
        headers = {**self.api_client.default_headers, "Accept": "application/json"}
        # The client's own credentials: a token its refresh hook renews, or basic auth.
        for auth in cfg.auth_settings().values():
            headers[auth["key"]] = auth["value"]
        if cfg.username or cfg.password:
            headers["authorization"] = cfg.get_basic_auth_token()
        data = None
        if body is not None:
            data = orjson.dumps(body)
            headers["Content-Type"] = content_type
        status, reason, answer = await self._send(
            method, cfg.host + path, headers, data, query or {}
        )
        if not 200 <= status <= 299:
            exc = ApiException(status=status, reason=reason)
            exc.body = answer.decode("utf-8", "replace")
            raise exc
        return dict(orjson.loads(answer or b"{}"))

    async def _send(
        self,
        method: str,
        url: str,
        headers: dict[str, str],
        data: bytes | None,
        query: dict[str, str],
    ) -> tuple[int, str, bytes]:
        """The HTTP exchange itself: status, reason and body of the answer. A connection
        lost before the answer (a kept-alive one the server had closed, the API server
        restarting) is tried once more on a new one: every request of the hot path may be
        repeated (a create that went through answers 409, a delete 404)."""
        cfg = self.api_client.configuration
        loop = asyncio.get_running_loop()
        if self._session is None or self._session.closed or self._loop is not loop:
            self._ssl = ssl_context(cfg) if url.startswith("https:") else None
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=cfg.connection_pool_maxsize or 32),
                timeout=REQUEST_TIMEOUT,
            )
            self._loop = loop
        for attempt in (1, 2):
            try:
                async with self._session.request(
                    method,
                    url,
                    params=query,
                    data=data,
                    headers=headers,
                    ssl=self._ssl if self._ssl is not None else True,
                    server_hostname=cfg.tls_server_name or None,
                    proxy=cfg.proxy or None,
                    proxy_headers=cfg.proxy_headers or None,
                ) as resp:
                    return resp.status, str(resp.reason or ""), await resp.read()
            except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError):
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    async def delete_pod(self, namespace: str, name: str, force: bool = False) -> bool:
        """Delete a pod; False when it was already gone. ``force``: at once (grace period
        0), for a pod whose node is lost and whose kubelet will never confirm it."""
        query = {"gracePeriodSeconds": "0"} if force else None
        path = f"/api/v1/namespaces/{namespace}/pods/{name}"
        deleted, _ = await _tolerate(404, self._request("DELETE", path, None, query))
        return deleted

    async def mark_pod_unretriable(self, namespace: str, name: str) -> dict[str, Any] | None:
        """Annotate a pod of a Kueue group ``retriable-in-group: "false"``: the pod as
        stored, or None when it is already gone."""
        body = {"metadata": {"annotations": {KUEUE_RETRIABLE_IN_GROUP_ANNOTATION: "false"}}}
        done, pod = await _call(404, self.core.patch_namespaced_pod, name, namespace, body)
        return dict(self._plain(pod)) if done else None

    async def release_pod(self, namespace: str, name: str) -> bool:
        """Remove Kueue's finalizer from a pod (a strategic merge patch deletes just that
        entry of the list); False when the pod is already gone."""
        body = {"metadata": {"$deleteFromPrimitiveList/finalizers": [KUEUE_POD_FINALIZER]}}
        done, _ = await _call(404, self.core.patch_namespaced_pod, name, namespace, body)
        return done

    async def patch_job_status(
        self, namespace: str, name: str, status: dict[str, Any]
    ) -> dict[str, Any]:
        """Merge-patch the job's status subresource; the job as stored afterwards."""
        path = "/".join(("/apis", GROUP, VERSION, "namespaces", namespace, PLURAL, name, "status"))
        return await self._request(
            "PATCH", path, {"status": status}, content_type="application/merge-patch+json"
        )

    async def delete_job(self, namespace: str, name: str) -> None:
        await _call(
            404,
            self.custom.delete_namespaced_custom_object,
            GROUP,
            VERSION,
            namespace,
            PLURAL,
            name,
            propagation_policy="Background",
        )

    # ---- the leader Lease --------------------------------------------------------------

    async def get_lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        found, lease = await _call(404, self.coordination.read_namespaced_lease, name, namespace)
        return dict(self._plain(lease)) if found else None

    async def create_lease(self, namespace: str, name: str, spec: dict[str, Any]) -> bool:
        """False when another candidate created it first."""
        made, _ = await _call(
            409, self.coordination.create_namespaced_lease, namespace, _lease(namespace, name, spec)
        )
        return made

    async def replace_lease(
        self, namespace: str, name: str, spec: dict[str, Any], resource_version: str
    ) -> bool:
        """Replace the Lease if it is still at ``resource_version``; False when it changed."""
        body = _lease(namespace, name, spec, resource_version)
        replaced, _ = await _call(
            409, self.coordination.replace_namespaced_lease, name, namespace, body
        )
        return replaced
