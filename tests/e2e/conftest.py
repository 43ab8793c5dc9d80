"""Shared helpers of the end-to-end suites, and the kind suite's cluster.

The kind suite (test_kind.py) runs on the local 3-node kind cluster of kind-config.yaml
(tests/cluster/kind-up.sh: a private Docker engine, a node image built offline, cached by
input hash). As root the session fixture brings it up itself, after the images are built
(both cached: a warm `make test` finds the cluster its background kind-up started,
tests/cluster/kind-in-background.sh); a failure there is a test failure. Not root, it
skips saying why, unless ``ETJ_KIND_KUBECONFIG`` names a cluster to use as it is.
"""

from __future__ import annotations

import functools
import os
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from etj_testcluster.waiting import wait_for as _wait_for

if TYPE_CHECKING:
    from .kindlib import Kind

ROOT = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("ETJ_CACHE", Path.home() / ".cache" / "etj"))
KIND_KUBECONFIG = Path(os.environ.get("ETJ_KIND_KUBECONFIG", CACHE / "kind" / "kubeconfig"))
KIND_BIN_DIR = CACHE / "bin" / "v1.35.4"


def kind_missing() -> str | None:
    """Why the kind suite cannot run here, or None (root can bring the cluster up)."""
    if "ETJ_KIND_KUBECONFIG" not in os.environ and os.geteuid() != 0:
        return (
            "not root: the kind cluster needs root (a private Docker engine, privileged node "
            "containers); run as root, or name a cluster in ETJ_KIND_KUBECONFIG"
        )
    return None


def kind_answers(kubeconfig: Path) -> str | None:
    """Why the cluster at ``kubeconfig`` cannot be used, or None."""
    for tool in ("kubectl", "helm"):
        if not (KIND_BIN_DIR / tool).exists():
            return f"no {KIND_BIN_DIR / tool}: run `make binaries`"
    if not kubeconfig.exists():
        return f"no kind cluster ({kubeconfig} is missing): run `make kind-up`"
    probe = subprocess.run(
        [str(KIND_BIN_DIR / "kubectl"), f"--kubeconfig={kubeconfig}", "get", "--raw", "/readyz"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    if probe.returncode != 0:
        return f"the kind cluster does not answer ({probe.stderr.strip()[:200]})"
    return None


def kind_is_ours() -> bool:
    """The suite brought the local kind cluster up (root, no ETJ_KIND_KUBECONFIG): it may
    stop its nodes and delete it."""
    return "ETJ_KIND_KUBECONFIG" not in os.environ and os.geteuid() == 0


def run_script(script: str, timeout: float) -> None:
    """Run tests/cluster/<script> (cached steps: seconds warm); fail with its log's end."""
    t0 = time.monotonic()
    got = subprocess.run(
        ["bash", str(ROOT / "tests" / "cluster" / script)],
        capture_output=True, text=True, timeout=timeout, cwd=ROOT,
    )  # fmt: skip
    out = (got.stdout + got.stderr)[-4000:]
    assert got.returncode == 0, f"tests/cluster/{script} failed ({got.returncode}):\n{out}"
    print(f"tests/cluster/{script}: {time.monotonic() - t0:.0f} s", flush=True)


# The tests that need the built images, run after everything else: `make test` builds the
# images beside the suite (tests/cluster/images-in-background.sh) and these wait for it.
NEEDS_IMAGES = (ROOT / "tests" / "images", ROOT / "tests" / "e2e")


def _needs_images(item: pytest.Item) -> bool:
    return any(item.path.is_relative_to(d) for d in NEEDS_IMAGES)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    items[:] = [i for i in items if not _needs_images(i)] + [i for i in items if _needs_images(i)]


def sh(
    *args: str, check: bool = True, input: str | None = None, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    got = subprocess.run(
        args, capture_output=True, text=True, input=input, timeout=timeout, cwd=ROOT
    )
    if check and got.returncode != 0:
        raise AssertionError(
            f"{' '.join(args)[:300]} failed ({got.returncode}): {got.stderr[-2000:]}"
        )
    return got


# The tests' one wait; here every poll is a kubectl call, so every 2 s unless told.
wait_for = functools.partial(_wait_for, every=2.0)


# Why the cluster could not be brought up, once it could not: pytest sets a session
# fixture up again for every test that asks for it after it raised, and each try of a
# bring-up that failed costs up to the test's whole timeout (cold CI: five e2e tests, five
# 900 s timeouts, after the background kind-up had failed already).
_BRING_UP_FAILED: list[str] = []


@pytest.fixture(scope="session")
def kind_kubeconfig() -> str:
    """The kind cluster's kubeconfig: as root, the images built and the cluster brought up
    (or found up) first; elsewhere the cluster ETJ_KIND_KUBECONFIG names, else a skip."""
    reason = kind_missing()
    if reason:
        pytest.skip(f"kind e2e suite skipped: {reason}")
    if _BRING_UP_FAILED:
        pytest.fail(f"the kind cluster did not come up (first e2e test): {_BRING_UP_FAILED[0]}")
    if kind_is_ours():
        # Both wait for the background runs `make test` started, then find them done.
        try:
            run_script("build-images.sh", timeout=3600)
            run_script("kind-up.sh", timeout=3600)
        except BaseException as e:  # pytest-timeout's Failed is a BaseException
            _BRING_UP_FAILED.append(f"{type(e).__name__}: {str(e)[-1500:]}")
            raise
    reason = kind_answers(KIND_KUBECONFIG)
    if reason:
        if kind_is_ours():
            pytest.fail(f"kind-up.sh succeeded but {reason}", pytrace=False)
        pytest.skip(f"kind e2e suite skipped: {reason}")
    return str(KIND_KUBECONFIG)


@pytest.fixture(scope="module")
def kind(kind_kubeconfig: str) -> Kind:
    """The kind cluster's kubectl and helm (kindlib.Kind), its three nodes checked."""
    from .kindlib import Kind

    k = Kind(kind_kubeconfig)
    nodes = k.kubectl("get", "nodes", "-o", "jsonpath={.items[*].metadata.name}").stdout.split()
    assert len(nodes) == 3, nodes
    return k
