"""The kind end-to-end suite: opt-in (`make e2e-kind`), skipped without docker and kind.

It creates a kind cluster from ``kind-config.yaml``, builds and loads both images, installs
the chart with helm and runs jobs on real kubelets. Every command it runs is also covered
by the local-cluster tests, which run everywhere.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = os.environ.get("ETJ_KIND_CLUSTER", "etj-e2e")


def _missing() -> str | None:
    for tool in ("docker", "kind", "kubectl", "helm"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    probe = subprocess.run(["docker", "info"], capture_output=True, text=True)
    if probe.returncode != 0:
        return "no Docker engine is running (docker info failed)"
    return None


# The tests that need the built images, run after everything else: `make test` builds the
# images beside the suite (tests/cluster/images-in-background.sh) and these wait for it.
NEEDS_IMAGES = (ROOT / "tests" / "images", ROOT / "tests" / "e2e")


def _needs_images(item: pytest.Item) -> bool:
    return any(item.path.is_relative_to(d) for d in NEEDS_IMAGES)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    items[:] = [i for i in items if not _needs_images(i)] + [i for i in items if _needs_images(i)]
    kind_items = [i for i in items if i.path.name == "test_kind.py"]
    if not kind_items:  # test_real_node.py decides for itself
        return
    reason = _missing()
    if reason is None:
        return
    skip = pytest.mark.skip(
        reason=f"kind e2e suite skipped: {reason}; run `make e2e-kind` where Docker and kind exist"
    )
    for item in kind_items:
        item.add_marker(skip)


def sh(
    *args: str, check: bool = True, input: str | None = None, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args, check=check, capture_output=True, text=True, input=input, timeout=timeout, cwd=ROOT
    )


def wait_for(predicate, timeout: float, what: str, every: float = 2.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)  # polling interval of a deadline-bounded wait
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


@pytest.fixture(scope="session")
def kind_cluster() -> Iterator[str]:
    sh(
        "kind",
        "create",
        "cluster",
        "--name",
        CLUSTER,
        "--config",
        "kind-config.yaml",
        "--wait",
        "120s",
    )
    try:
        sh(
            "docker",
            "build",
            "-f",
            "operator/Dockerfile",
            "-t",
            "etj-operator:e2e",
            ".",
            timeout=1800,
        )
        sh(
            "docker",
            "build",
            "-f",
            "trainer_image/Dockerfile",
            "-t",
            "etj-trainer:e2e",
            ".",
            timeout=3600,
        )
        for image in ("etj-operator:e2e", "etj-trainer:e2e"):
            sh("kind", "load", "docker-image", image, "--name", CLUSTER)
        yield f"kind-{CLUSTER}"
    finally:
        sh("kind", "delete", "cluster", "--name", CLUSTER, check=False)
