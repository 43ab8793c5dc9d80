"""tests/cluster/build-binaries.sh: its version matches the Python side, it honours a
directory of existing binaries, and a warm run rebuilds nothing."""

from __future__ import annotations

import fcntl
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from etj_testcluster import K8S_VERSION, default_bin_dir
from etj_testcluster.cluster import CONTROL_PLANE_BINARIES, cache_dir, k8s_version
from tests.integration.conftest import ROOT, require_binaries

SCRIPT = ROOT / "tests" / "cluster" / "build-binaries.sh"


# A deadline against a hang, not a speed check: a warm run is file checks (seconds), a
# cold one builds for minutes and is never run here.
def run_script(env: dict[str, str], timeout: float = 600) -> subprocess.CompletedProcess[str]:
    clean = {
        k: v for k, v in os.environ.items() if k not in ("ETJ_K8S_BIN_DIR", "KUBEBUILDER_ASSETS")
    }
    return subprocess.run(
        ["bash", str(SCRIPT)],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def fake_bin_dir(path: Path, names: tuple[str, ...]) -> Path:
    path.mkdir()
    for name in names:
        (path / name).write_text("#!/bin/sh\nexit 0\n")
        (path / name).chmod(0o755)
    return path


def test_script_and_python_agree_on_the_version():
    match = re.search(r'K8S_VERSION="\$\{ETJ_K8S_VERSION:-(v[0-9.]+)\}"', SCRIPT.read_text())
    assert match, "K8S_VERSION default not found in build-binaries.sh"
    assert match.group(1) == K8S_VERSION


def test_a_complete_bin_dir_is_used_and_nothing_is_built(tmp_path: Path):
    bins = fake_bin_dir(tmp_path / "bins", (*CONTROL_PLANE_BINARIES, "helm"))
    cache = tmp_path / "cache"
    run = run_script({"ETJ_K8S_BIN_DIR": str(bins), "ETJ_CACHE": str(cache)})
    assert run.returncode == 0, run.stderr
    assert "not building them" in run.stdout
    assert not cache.exists()


def test_a_warm_run_takes_no_lock(tmp_path: Path):
    """A cold CI run builds the kind node's binaries (kind-binaries.sh) under the build lock
    for minutes beside the test lanes; a warm check waited for it and timed out."""
    cache = tmp_path / "cache"
    (cache / "bin").mkdir(parents=True)
    bins = fake_bin_dir(cache / "bin" / K8S_VERSION, (*CONTROL_PLANE_BINARIES, "helm", "kubelet"))
    with (cache / "bin" / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # held until the script is done
        run = run_script({"ETJ_CACHE": str(cache), "ETJ_WITH_KUBELET": "1"})
    assert run.returncode == 0, run.stderr
    for name in (*CONTROL_PLANE_BINARIES, "helm", "kubelet"):
        assert f"{name}: cached" in run.stdout
    assert "nothing to build" in run.stdout
    assert sorted(p.name for p in bins.iterdir()) == sorted(
        (*CONTROL_PLANE_BINARIES, "helm", "kubelet")
    )


def test_default_bin_dir_takes_only_a_complete_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("ETJ_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("ETJ_K8S_BIN_DIR", raising=False)
    # envtest's assets: no controller-manager or scheduler, so they are not used.
    envtest = fake_bin_dir(tmp_path / "envtest", ("etcd", "kube-apiserver", "kubectl"))
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(envtest))
    assert default_bin_dir() == tmp_path / "cache" / "bin" / K8S_VERSION
    complete = fake_bin_dir(tmp_path / "complete", CONTROL_PLANE_BINARIES)
    monkeypatch.setenv("ETJ_K8S_BIN_DIR", str(complete))
    assert default_bin_dir() == complete


@pytest.mark.integration
def test_a_warm_run_rebuilds_nothing():
    bin_dir = require_binaries()
    if bin_dir != cache_dir() / "bin" / k8s_version():
        pytest.skip(f"binaries come from {bin_dir}, not the build's cache")
    before = {p.name: p.stat().st_mtime_ns for p in bin_dir.iterdir() if p.is_file()}
    run = run_script({})
    assert run.returncode == 0, run.stderr
    # Nothing rebuilt is what the messages and the unchanged files show; how long the
    # cache checks take depends on the machine's load (a cold CI run, with the kind cluster
    # building beside it, took 13 s), and timings belong in benchmarks/.
    for name in (*CONTROL_PLANE_BINARIES, "helm"):
        assert f"{name}: cached" in run.stdout
    # Only what was there before: in a cold CI run the kind lane builds its own artefacts
    # (coredns-kind, pause) into this directory at the same time, which is no rebuild.
    after = {name: (bin_dir / name).stat().st_mtime_ns for name in before}
    assert after == before


@pytest.mark.parametrize(("ci", "outcome"), [("true", "1 error"), ("", "1 skipped")])
def test_missing_binaries_skip_by_hand_and_fail_in_ci(tmp_path: Path, ci: str, outcome: str):
    (tmp_path / "test_inner.py").write_text("def test_needs_a_cluster(cluster):\n    pass\n")
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("ETJ_K8S_BIN_DIR", "KUBEBUILDER_ASSETS", "CI")
    }
    env |= {
        "ETJ_CACHE": str(tmp_path / "empty-cache"),
        "CI": ci,
        "PYTHONPATH": os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]),
    }
    run = subprocess.run(
        [
            *(sys.executable, "-m", "pytest", "-rs", "-p", "no:cacheprovider"),
            *("-p", "tests.integration.conftest", "--rootdir", str(tmp_path)),
            str(tmp_path / "test_inner.py"),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert outcome in run.stdout, run.stdout
    # A setup error fails the session: CI cannot go green without the cluster tests.
    assert run.returncode == (1 if ci else 0)
    assert "run `make binaries`" in run.stdout
    assert "kube-apiserver" in run.stdout
