"""etj_testcluster.waiting: each wait recorded when ETJ_WAIT_LOG is set, and the report
lists the waits that came closest to their deadlines, missed ones first."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from etj_testcluster.waiting import (
    WAIT_LOG_ENV,
    WaitTimeout,
    read_waits,
    report,
    wait_exit,
    wait_for,
)


def test_waits_are_recorded_met_and_missed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    log = tmp_path / "waits"
    monkeypatch.setenv(WAIT_LOG_ENV, str(log))
    answers = iter([0, 0, 7])
    assert wait_for(lambda: next(answers), 60, "the third answer", every=0.01) == 7
    with pytest.raises(AssertionError, match=r"timed out after 0\.05s waiting for never"):
        wait_for(lambda: None, 0.05, "never", every=0.01)
    waits = read_waits([log])
    assert [(w["what"], w["met"]) for w in waits] == [("the third answer", True), ("never", False)]
    assert waits[1]["elapsed"] >= 0.05
    assert "test_waits_are_recorded_met_and_missed" in waits[0]["test"]


def test_a_missed_deadline_is_its_own_error_and_the_predicates_go_through():
    with pytest.raises(WaitTimeout):
        wait_for(lambda: False, 0.05, "never", every=0.01)

    def failing() -> bool:
        raise RuntimeError("the component exited")

    with pytest.raises(RuntimeError, match="exited"):
        wait_for(failing, 60, "a component", every=0.01)

    def asserting() -> bool:
        raise AssertionError("inside the predicate")

    with pytest.raises(AssertionError) as caught:
        wait_for(asserting, 60, "an assertion", every=0.01)
    assert not isinstance(caught.value, WaitTimeout)


def test_a_process_exit_is_recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    log = tmp_path / "waits"
    monkeypatch.setenv(WAIT_LOG_ENV, str(log))
    proc = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    assert wait_exit(proc, 120, "python to exit") == 3
    slow = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            wait_exit(slow, 0.1, "a sleeper to exit")
    finally:
        slow.kill()
        slow.wait()
    assert [(w["what"], w["met"]) for w in read_waits([log])] == [
        ("python to exit", True),
        ("a sleeper to exit", False),
    ]


def test_nothing_is_written_without_the_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv(WAIT_LOG_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    wait_for(lambda: True, 1, "at once")
    assert list(tmp_path.iterdir()) == []


def test_the_report_puts_missed_then_the_largest_share_first():
    waits = [
        {"what": "roomy", "timeout": 100, "elapsed": 5, "met": True, "test": "t1"},
        {"what": "tight", "timeout": 10, "elapsed": 8, "met": True, "test": "t2"},
        {"what": "missed", "timeout": 10, "elapsed": 10, "met": False, "test": "t3"},
    ]
    lines = report(waits).splitlines()
    assert lines[0].startswith("3 waits")
    assert [line.split("  ")[-2].strip() for line in lines[1:]] == ["missed", "tight", "roomy"]
    assert "MISSED" in lines[1] and "tight" in lines[2]
    assert report([]) == "no waits recorded"
