"""Fixtures for tests against the real local control plane.

``cluster`` (session): a LocalCluster in a temp dir, stopped at the end whatever happens.
``crds`` (session): the repository's CRDs applied and Established.
``namespace``: a fresh namespace per test (with its default ServiceAccount ready).
``kube``: an ``etj.k8s.Kube`` for the cluster. A failing test gets the tails of every
component's log in its report. Without binaries, tests skip, except in CI (CI=true),
where `make test` builds them first and their absence is a failure.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from etj.localcluster import LocalCluster, default_bin_dir, missing_binaries

ROOT = Path(__file__).resolve().parents[2]
T = TypeVar("T")


def wait_for(predicate: Callable[[], T], timeout: float, what: str, every: float = 0.2) -> T:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(every)  # poll interval of a deadline-bounded wait
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    bin_dir = default_bin_dir()
    missing = missing_binaries(bin_dir)
    if missing:
        message = f"no {', '.join(missing)} in {bin_dir}: run `make binaries`"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    c = LocalCluster(tmp_path_factory.mktemp("cluster"), bin_dir)
    c.start()
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="session")
def crds(cluster: LocalCluster) -> LocalCluster:
    for path in sorted((ROOT / "crds").glob("*.yaml")):
        cluster.kubectl("apply", "--server-side", "-f", str(path))
    cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")
    return cluster


@pytest.fixture
def namespace(cluster: LocalCluster) -> Iterator[str]:
    name = f"t-{uuid.uuid4().hex[:8]}"
    cluster.kubectl("create", "namespace", name)
    # Pods need the namespace's default ServiceAccount, made by the controller-manager.
    wait_for(
        lambda: (
            cluster.kubectl("get", "serviceaccount", "default", "-n", name, check=False).returncode
            == 0
        ),
        30,
        "the default ServiceAccount",
    )
    yield name
    cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture(scope="session")
def kube(cluster: LocalCluster):  # type: ignore[no-untyped-def]
    from etj.k8s import Kube, load_config

    return Kube(load_config(str(cluster.kubeconfig)))


def get_json(cluster: LocalCluster, *args: str) -> dict[str, Any]:
    return json.loads(cluster.kubectl("get", *args, "-o", "json").stdout)


def apply_invalid(cluster: LocalCluster, manifest: dict[str, Any], namespace: str) -> str:
    """Create ``manifest`` with a server-side dry run; the API server's error text ('' if accepted)."""
    doc = {**manifest, "metadata": {**manifest.get("metadata", {}), "namespace": namespace}}
    result = cluster.kubectl(
        "create", "--dry-run=server", "-f", "-", input=json.dumps(doc), check=False
    )
    return result.stderr.strip() if result.returncode != 0 else ""


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    outcome = yield
    report = outcome.get_result()
    if report.failed and "cluster" in getattr(item, "fixturenames", ()):
        c = item.funcargs.get("cluster") if hasattr(item, "funcargs") else None
        if isinstance(c, LocalCluster):
            report.sections.append(("local cluster logs", c.all_log_tails()))
