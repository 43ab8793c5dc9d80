"""Starting and stopping is clean: `etj cluster up/status/down`, and no cluster process
survives the end of a test session — even one whose test fails, or that is killed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from etj.localcluster import default_bin_dir

from .conftest import ROOT, wait_for

pytestmark = pytest.mark.integration
ETJ = [str(Path(sys.executable).parent / "etj")]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return "State:\tZ" not in Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False


def test_cli_up_status_down(cluster, tmp_path):  # the session cluster proves binaries exist
    state = tmp_path / "state"
    up = subprocess.run(
        [*ETJ, "cluster", "up", "--state-dir", str(state)],
        capture_output=True,
        text=True,
        timeout=240,
    )
    try:
        assert up.returncode == 0, up.stderr
        kubeconfig = up.stdout.strip()
        assert kubeconfig.endswith("kubeconfig") and Path(kubeconfig).exists()
        status = subprocess.run(
            [*ETJ, "cluster", "status", "--state-dir", str(state)], capture_output=True, text=True
        )
        assert status.returncode == 0 and kubeconfig in status.stdout
        version = subprocess.run(
            [
                str(default_bin_dir() / "kubectl"),
                "--kubeconfig",
                kubeconfig,
                "get",
                "--raw",
                "/version",
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        assert json.loads(version.stdout)["gitVersion"].startswith("v1.")
        pids = [
            int((state / "supervisor.pid").read_text()),
            *json.loads((state / "cluster" / "pids.json").read_text()).values(),
        ]
        assert all(alive(p) for p in pids)
    finally:
        down = subprocess.run(
            [*ETJ, "cluster", "down", "--state-dir", str(state)],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert down.returncode == 0
    assert not any(alive(p) for p in pids)
    after = subprocess.run(
        [*ETJ, "cluster", "status", "--state-dir", str(state)], capture_output=True, text=True
    )
    assert after.returncode == 1 and "not running" in after.stdout


INNER = """
import json, os
from pathlib import Path
from etj.localcluster import LocalCluster

def test_fails(tmp_path):
    c = LocalCluster(tmp_path / "c").start()
    Path(os.environ["PIDS_OUT"]).write_text(json.dumps(c.pids()))
    {ending}
"""


@pytest.mark.parametrize(
    ("ending", "how"),
    [
        ("assert False, 'a failing test'", "fails"),
        ("os.kill(os.getpid(), 9)", "is killed"),
    ],
)
def test_no_process_survives_a_session_that(cluster, tmp_path, ending, how):
    test_file = tmp_path / "test_inner.py"
    # The inner session fails (or dies) without calling stop(): the cluster's processes
    # must still be gone when it is (PR_SET_PDEATHSIG + session-scoped teardown).
    test_file.write_text(textwrap.dedent(INNER.format(ending=ending)))
    pids_out = tmp_path / "pids.json"
    env = {**os.environ, "PIDS_OUT": str(pids_out)}
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test_file)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode != 0, f"the inner session should have {how}"
    pids = json.loads(pids_out.read_text())
    assert len(pids) == 4
    wait_for(
        lambda: not any(alive(p) for p in pids),
        20,
        f"cluster processes to end after a session that {how}",
    )


def test_sigterm_to_supervisor_stops_components(tmp_path):
    if not (default_bin_dir() / "kube-apiserver").exists():
        pytest.skip("no binaries")
    state = tmp_path / "s"
    up = subprocess.run(
        [*ETJ, "cluster", "up", "--state-dir", str(state)],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=ROOT,
    )
    assert up.returncode == 0, up.stderr
    sup = int((state / "supervisor.pid").read_text())
    comps = list(json.loads((state / "cluster" / "pids.json").read_text()).values())
    os.kill(sup, signal.SIGTERM)
    wait_for(
        lambda: not any(alive(p) for p in [sup, *comps]), 30, "supervisor and components to stop"
    )
