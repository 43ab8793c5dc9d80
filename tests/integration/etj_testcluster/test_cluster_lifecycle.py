"""Starting and stopping is clean: ``etj cluster up/status/down`` work and leave nothing
behind, and no cluster process survives the end of a test session, whether its test fails
(the fixture's teardown) or the session is killed outright (PR_SET_PDEATHSIG)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from etj_testcluster import K8S_VERSION
from etj_testcluster.cluster import process_alive
from tests.integration.conftest import ROOT, require_binaries, wait_for

pytestmark = pytest.mark.integration
ETJ = str(Path(sys.executable).parent / "etj")


def etj_cluster(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [ETJ, "cluster", *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT
    )


def cluster_pids(state: Path) -> list[int]:
    """The supervisor's and every component's pid, as `etj cluster up` recorded them."""
    components = json.loads((state / "cluster" / "pids.json").read_text())
    assert sorted(components) == sorted(
        ["etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"]
    )
    return [int((state / "supervisor.pid").read_text()), *components.values()]


def test_cli_up_status_down(tmp_path: Path):
    bin_dir = require_binaries()
    state = tmp_path / "state"
    up = etj_cluster("up", "--state-dir", str(state), timeout=240)
    pids: list[int] = []
    try:
        assert up.returncode == 0, up.stderr
        kubeconfig = up.stdout.strip()
        assert kubeconfig == str(state / "cluster" / "kubeconfig")
        assert Path(kubeconfig).is_file()
        pids = cluster_pids(state)
        assert all(process_alive(p) for p in pids)

        status = etj_cluster("status", "--state-dir", str(state))
        assert status.returncode == 0
        assert status.stdout.strip() == f"running: {kubeconfig}"
        # A second `up` finds it running and prints the same path, starting nothing.
        again = etj_cluster("up", "--state-dir", str(state))
        assert again.returncode == 0 and again.stdout.strip() == kubeconfig
        assert cluster_pids(state) == pids

        version = subprocess.run(
            [str(bin_dir / "kubectl"), "--kubeconfig", kubeconfig, "version", "-o", "json"],
            capture_output=True,
            text=True,
            check=True,
        )
        assert json.loads(version.stdout)["serverVersion"]["gitVersion"] == K8S_VERSION
    finally:
        down = etj_cluster("down", "--state-dir", str(state))
    assert down.returncode == 0 and down.stdout.strip() == "stopped", down.stderr
    assert pids and not any(process_alive(p) for p in pids)
    # SIGTERM reached the components: each ended on it, none needed the SIGKILL that follows
    # the grace (exit 137).
    ended = json.loads((state / "cluster" / "stopped.json").read_text())
    assert sorted(ended) == sorted(
        ["etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"]
    )
    assert 137 not in ended.values(), ended
    after = etj_cluster("status", "--state-dir", str(state))
    assert after.returncode == 1 and "not running" in after.stdout
    assert etj_cluster("down", "--state-dir", str(state)).stdout.startswith("not running")


def test_killed_supervisor_takes_the_components_with_it(tmp_path: Path):
    require_binaries()
    state = tmp_path / "state"
    up = etj_cluster("up", "--state-dir", str(state), timeout=240)
    assert up.returncode == 0, up.stderr
    supervisor, *components = cluster_pids(state)
    try:
        os.kill(supervisor, signal.SIGKILL)  # no cleanup code runs
        wait_for(
            lambda: not any(process_alive(p) for p in [supervisor, *components]),
            120,
            "the components to die with their supervisor",
        )
        assert etj_cluster("status", "--state-dir", str(state)).returncode == 1
    finally:
        etj_cluster("down", "--state-dir", str(state))


# Runs in a child pytest session with this directory's conftest loaded as a plugin, so
# it gets the very fixtures (and the failure-report hook) the real suite uses.
FAILING_WITH_FIXTURES = """
import json, os
from pathlib import Path

def test_fails(cluster, namespace):
    Path(os.environ["PIDS_OUT"]).write_text(json.dumps(cluster.pids()))
    assert False, "a failing test"
"""

KILLED_WITHOUT_CLEANUP = """
import json, os
from pathlib import Path
from etj_testcluster import LocalCluster

def test_killed(tmp_path):
    c = LocalCluster(tmp_path / "c").start()
    Path(os.environ["PIDS_OUT"]).write_text(json.dumps(c.pids()))
    os.kill(os.getpid(), 9)
"""


def run_inner_session(
    tmp_path: Path, source: str
) -> tuple[subprocess.CompletedProcess[str], list[int]]:
    (tmp_path / "test_inner.py").write_text(textwrap.dedent(source))
    pids_out = tmp_path / "pids.json"
    env = {
        **os.environ,
        "PIDS_OUT": str(pids_out),
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "tests.integration.conftest",
            "--rootdir",
            str(tmp_path),
            str(tmp_path / "test_inner.py"),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert pids_out.exists(), f"the inner test never got a cluster:\n{run.stdout}\n{run.stderr}"
    pids = json.loads(pids_out.read_text())
    assert len(pids) == 4
    return run, pids


def test_no_process_survives_a_session_whose_test_fails(tmp_path: Path):
    require_binaries()
    run, pids = run_inner_session(tmp_path, FAILING_WITH_FIXTURES)
    assert run.returncode == 1, run.stdout
    assert "1 failed" in run.stdout
    # The failure report carries the tails of the components' logs.
    assert "local cluster logs" in run.stdout
    assert "kube-apiserver.log" in run.stdout
    # The fixture's teardown has stopped (and reaped) every component before exiting.
    assert not any(process_alive(p) for p in pids)


def test_no_process_survives_a_session_that_is_killed(tmp_path: Path):
    require_binaries()
    run, pids = run_inner_session(tmp_path, KILLED_WITHOUT_CLEANUP)
    assert run.returncode == -signal.SIGKILL
    wait_for(
        lambda: not any(process_alive(p) for p in pids),
        120,
        "the cluster's processes to die with the killed session",
    )
