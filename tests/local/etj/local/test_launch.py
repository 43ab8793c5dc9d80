"""etj.local.launch: a local process's termination message, read as a kubelet reads
``terminationMessagePath`` with ``FallbackToLogsOnError`` (real short-lived processes)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from etj.api.constants import TERMINATION_LOG_ENV
from etj.local.launch import Proc, start

WRITE_AND_EXIT = """
import os, sys
print("some log line", flush=True)
if sys.argv[1] != "-":
    with open(os.environ["{env}"], "w") as f:
        f.write(sys.argv[1])
sys.exit(int(sys.argv[2]))
""".replace("{env}", TERMINATION_LOG_ENV)


def _run(tmp_path: Path, message: str, code: int) -> Proc:
    proc = start(
        "p",
        [sys.executable, "-c", WRITE_AND_EXIT, message, str(code)],
        dict(os.environ),
        tmp_path / "logs" / "p.log",
        tmp_path,
    )
    proc.popen.wait(timeout=120)
    return proc


def test_the_written_message_is_read_back(tmp_path: Path) -> None:
    proc = _run(tmp_path, "WatchdogTimeout: no step for 20s", 138)
    assert proc.exit_code == 138
    assert proc.termination_message() == "WatchdogTimeout: no step for 20s"


def test_a_failure_with_nothing_written_falls_back_to_the_log(tmp_path: Path) -> None:
    proc = _run(tmp_path, "-", 1)
    assert proc.termination_message() == "some log line"


def test_a_success_with_nothing_written_has_no_message(tmp_path: Path) -> None:
    assert _run(tmp_path, "-", 0).termination_message() is None


def test_a_restart_does_not_inherit_the_last_message(tmp_path: Path) -> None:
    assert _run(tmp_path, "DataError: no files", 2).termination_message() == "DataError: no files"
    # Same name, same log: a new start gets a fresh termination log, as a container does.
    assert _run(tmp_path, "-", 0).termination_message() is None
