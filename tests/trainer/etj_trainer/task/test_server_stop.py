"""A ps, or a worker under ParameterServer, stops at once on SIGTERM and exits 143, also
as PID 1 of its own PID namespace, as in a container. There the kernel drops a signal the
process has no handler for, so a server blocked in ``server.join()`` sat out the pod's
grace period (60 s) until the kubelet's SIGKILL: every finished job's ps, every deleted
worker (the real-node e2e showed ~55 s per job)."""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

import pytest
from harness import LocalJob, job_spec, trainer_config, wait_for

from etj_trainer import exitcodes

pytestmark = pytest.mark.trainer

# Far below the grace period a dropped SIGTERM would wait out.
STOP_SECONDS = 20
PID_NAMESPACE = ("unshare", "--pid", "--fork", "--kill-child")


def _trainer_pid(launcher: int, wrapped: bool) -> int:
    """The trainer's pid as seen from here: under unshare, its only child."""
    if not wrapped:
        return launcher
    children = Path(f"/proc/{launcher}/task/{launcher}/children")
    return int(wait_for(lambda: children.read_text().split(), 120, "unshare's child")[0])


@pytest.mark.parametrize("pid1", [False, True], ids=["process", "pid-1-of-a-namespace"])
def test_servers_stop_on_sigterm_with_143(tmp_path: Path, pid1: bool) -> None:
    if pid1 and (os.geteuid() != 0 or shutil.which("unshare") is None):
        pytest.skip("a PID namespace of its own needs root and unshare")
    job = LocalJob(trainer_config(job_spec()), tmp_path, workers=1, ps=1)
    with job:
        wrapper = PID_NAMESPACE if pid1 else ()
        procs = {role: job.start(role, 0, wrapper) for role in ("ps", "worker")}
        for role in procs:
            wait_for(
                lambda role=role: any(e["event"] == "serving" for e in job.events(role, 0)),
                120,
                f"the {role} to serve",
            )
        for proc in procs.values():
            os.kill(_trainer_pid(proc.pid, pid1), signal.SIGTERM)
        for role, proc in procs.items():
            assert proc.wait(timeout=STOP_SECONDS) == exitcodes.TERMINATED, role
            stopping = [e for e in job.events(role, 0) if e["event"] == "stopping"]
            assert [e["signal"] for e in stopping] == ["SIGTERM"], role
