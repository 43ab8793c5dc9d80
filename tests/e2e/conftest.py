"""Shared helpers of the end-to-end suites, and the kind suite's cluster.

The kind suite (test_kind.py) runs on the local kind cluster that ``make kind-up`` brings up
(tests/cluster/kind-up.sh: root, a private Docker engine, a node image built offline),
or on the cluster ``ETJ_KIND_KUBECONFIG`` names. It never creates one itself (minutes to
hours cold): without a cluster it skips, saying why.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("ETJ_CACHE", Path.home() / ".cache" / "etj"))
KIND_KUBECONFIG = Path(os.environ.get("ETJ_KIND_KUBECONFIG", CACHE / "kind" / "kubeconfig"))
KIND_BIN_DIR = CACHE / "bin" / "v1.35.4"


def kind_missing() -> str | None:
    """Why the kind suite cannot run here, or None."""
    if "ETJ_KIND_KUBECONFIG" not in os.environ and os.geteuid() != 0:
        return "not root: `make kind-up` needs root (or name a cluster in ETJ_KIND_KUBECONFIG)"
    if not KIND_KUBECONFIG.exists():
        return f"no kind cluster ({KIND_KUBECONFIG} is missing): run `make images kind-up`"
    for tool in ("kubectl", "helm"):
        if not (KIND_BIN_DIR / tool).exists():
            return f"no {KIND_BIN_DIR / tool}: run `make binaries`"
    probe = subprocess.run(
        [str(KIND_BIN_DIR / "kubectl"), f"--kubeconfig={KIND_KUBECONFIG}", "get", "--raw", "/readyz"],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    if probe.returncode != 0:
        return (
            f"the kind cluster does not answer ({probe.stderr.strip()[:200]}): run `make kind-up`"
        )
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
    reason = kind_missing()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=f"kind e2e suite skipped: {reason}")
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
def kind_kubeconfig() -> str:
    """The kind cluster's kubeconfig (skips when there is none: see kind_missing)."""
    reason = kind_missing()
    if reason:
        pytest.skip(reason)
    return str(KIND_KUBECONFIG)
