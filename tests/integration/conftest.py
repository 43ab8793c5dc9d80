"""Fixtures for tests against the real local control plane (``etj_testcluster``).

``cluster`` (session): a LocalCluster in a temp dir (never the developer's
    ``~/.cache/etj/cluster``), stopped at the end of the session whatever happens.
``crds`` (session): the same cluster with the repository's ``crds/*.yaml`` applied and
    Established.
``namespace``: a fresh, uniquely named namespace per test (its default ServiceAccount
    ready), deleted afterwards.
``api_client`` (session): a ``kubernetes.client.ApiClient`` for the cluster.
``kube`` (session): an ``etj.controller.kube.Kube`` for the cluster.

Helpers: ``wait_for(predicate, timeout, what)`` polls with a deadline; ``apply_crds(cluster)``
and ``create_namespace(cluster, labels)`` do for another cluster what the fixtures do;
``get_json(cluster, *args)`` is ``kubectl get -o json``; ``apply_invalid(cluster, manifest)``
creates a manifest with a server-side dry run and returns the API server's error text.

A failing test that used the cluster gets the tails of every component's log in its
report. Without binaries the tests skip with a reason naming ``make binaries``, except in
CI (``CI`` set), where ``make test`` builds them first and their absence is a failure.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from etj_testcluster import LocalCluster, default_bin_dir, missing_binaries
from etj_testcluster.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
T = TypeVar("T")


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() not in ("", "0", "false", "no")


def require_binaries() -> Path:
    """The binaries' directory; skip (or, in CI, fail) the test when they are missing."""
    bin_dir = default_bin_dir()
    missing = missing_binaries(bin_dir)
    if missing:
        message = (
            f"no {', '.join(missing)} in {bin_dir}: run `make binaries` "
            "(or point ETJ_K8S_BIN_DIR at a directory that has them)"
        )
        if in_ci():
            pytest.fail(f"CI: {message}", pytrace=False)
        pytest.skip(message)
    return bin_dir


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    c = LocalCluster(tmp_path_factory.mktemp("cluster"), require_binaries())
    c.start()
    try:
        yield c
    finally:
        c.stop()


def apply_crds(cluster: LocalCluster) -> LocalCluster:
    """Apply the repository's ``crds/*.yaml`` and wait until they are Established."""
    paths = sorted((ROOT / "crds").glob("*.yaml"))
    assert paths, "no CRDs in crds/"
    cluster.apply_crds(paths)
    return cluster


@pytest.fixture(scope="session")
def crds(cluster: LocalCluster) -> LocalCluster:
    return apply_crds(cluster)


def create_namespace(
    cluster: LocalCluster,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> str:
    """A fresh, uniquely named namespace (with ``labels`` and ``annotations``) whose default
    ServiceAccount exists."""
    name = f"t-{uuid.uuid4().hex[:8]}"
    manifest = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": labels or {}, "annotations": annotations or {}},
    }
    cluster.kubectl("create", "-f", "-", input=json.dumps(manifest))
    # Pods need the namespace's default ServiceAccount, made by the controller-manager.
    wait_for(
        lambda: (
            cluster.kubectl("get", "serviceaccount", "default", "-n", name, check=False).returncode
            == 0
        ),
        120,
        "the default ServiceAccount",
    )
    return name


@pytest.fixture
def namespace(cluster: LocalCluster) -> Iterator[str]:
    name = create_namespace(cluster)
    yield name
    # Not waited for: the namespace controller finishes it in the background.
    cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture(scope="session")
def api_client(cluster: LocalCluster) -> Iterator[Any]:
    client = cluster.api_client()
    try:
        yield client
    finally:
        client.close()


@pytest.fixture(scope="session")
def kube(cluster: LocalCluster):  # type: ignore[no-untyped-def]
    from etj.controller.kube import Kube, load_config

    return Kube(load_config(str(cluster.kubeconfig)))


def get_json(cluster: LocalCluster, *args: str) -> dict[str, Any]:
    return json.loads(cluster.kubectl("get", *args, "-o", "json").stdout)


def apply_invalid(
    cluster: LocalCluster, manifest: dict[str, Any], namespace: str | None = None
) -> str:
    """Create ``manifest`` with a server-side dry run (nothing is stored).

    Returns the API server's own error text, or '' if the server accepted it. The
    manifest's namespace (else "default") is used unless ``namespace`` is given.
    """
    doc = dict(manifest)
    if namespace is not None:
        doc["metadata"] = {**manifest.get("metadata", {}), "namespace": namespace}
    result = cluster.kubectl(
        "create", "--dry-run=server", "-f", "-", input=json.dumps(doc), check=False
    )
    return result.stderr.strip() if result.returncode != 0 else ""


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    outcome = yield
    report = outcome.get_result()
    if not report.failed:
        return
    c = getattr(item, "funcargs", {}).get("cluster")
    if c is None:
        # The test used ``crds`` only, or failed in setup after the cluster came up.
        c = next(
            (v for v in getattr(item, "funcargs", {}).values() if isinstance(v, LocalCluster)), None
        )
    if isinstance(c, LocalCluster):
        report.sections.append(("local cluster logs", c.all_log_tails()))


@pytest.fixture
def operator(crds: LocalCluster, namespace: str, tmp_path: Path) -> Iterator[Any]:
    """The operator as a process, watching ``namespace`` (a module may define its own)."""
    from .operator_helpers import OperatorProcess  # it imports this module

    op = OperatorProcess(crds, namespace, tmp_path / "operator.log").start()
    try:
        yield op
    finally:
        op.stop()


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory every pod of the process node sees at the same path (checkpoint.uri,
    data patterns): not under /tmp, which the node maps to each pod's own /tmp as a
    container's /tmp is its own emptyDir, so not under pytest's tmp_path either."""
    d = Path(tempfile.mkdtemp(prefix="etj-shared-", dir="/var/tmp"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def node(crds: LocalCluster, namespace: str, tmp_path: Path) -> Iterator[Path]:
    """The process-backed node running ``namespace``'s pods; its state directory."""
    from .operator_helpers import process_node  # it imports this module

    with process_node(crds, tmp_path / "node", [namespace], tmp_path / "node.log") as state:
        yield state
