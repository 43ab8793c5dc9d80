"""A replica's threads: from its CPU budget (``etj run``'s share, a container's quota)."""

from __future__ import annotations

from pathlib import Path

import pytest

from etj_trainer.task.threads import Threads, cgroup_cpus, cpu_budget, thread_counts


@pytest.fixture(autouse=True)
def _no_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("ETJ_CPUS", "ETJ_INTRA_OP_THREADS", "ETJ_INTER_OP_THREADS"):
        monkeypatch.delenv(name, raising=False)


def test_without_a_budget_tensorflow_keeps_its_defaults_and_spins() -> None:
    assert thread_counts(cores=2, budget=None) == Threads(None, None, spin=True)


def test_a_share_of_shared_cores_gets_that_many_threads_and_no_spinning() -> None:
    # Five processes on two cores (etj run's PS job): one op thread each, two inter-op
    # (one would deadlock a server's send/recv), no spinning.
    assert thread_counts(cores=2, budget=0.4) == Threads(1, 2, spin=False)
    assert thread_counts(cores=64, budget=2.5) == Threads(3, 3, spin=False)


def test_a_budget_of_every_core_spins_as_before() -> None:
    assert thread_counts(cores=4, budget=4.0) == Threads(4, 4, spin=True)


def test_explicit_thread_counts_win(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ETJ_INTRA_OP_THREADS", "3")
    monkeypatch.setenv("ETJ_INTER_OP_THREADS", "1")
    assert thread_counts(cores=2, budget=0.4) == Threads(3, 2, spin=False)


def _cgroup(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_cgroup_v2_quota(tmp_path: Path) -> None:
    assert cgroup_cpus(_cgroup(tmp_path, {"cpu.max": "150000 100000\n"})) == 1.5


def test_cgroup_v2_without_a_limit(tmp_path: Path) -> None:
    assert cgroup_cpus(_cgroup(tmp_path, {"cpu.max": "max 100000\n"})) is None


def test_cgroup_v1_quota(tmp_path: Path) -> None:
    # This project's own hosts (and kind on them) run cgroup v1.
    root = _cgroup(
        tmp_path, {"cpu/cpu.cfs_quota_us": "50000\n", "cpu/cpu.cfs_period_us": "100000\n"}
    )
    assert cgroup_cpus(root) == 0.5


def test_cgroup_v1_without_a_limit(tmp_path: Path) -> None:
    root = _cgroup(tmp_path, {"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"})
    assert cgroup_cpus(root) is None


def test_nothing_readable_is_no_limit(tmp_path: Path) -> None:
    assert cgroup_cpus(tmp_path) is None


def test_etj_run_share_comes_before_the_cgroup(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    root = _cgroup(tmp_path, {"cpu.max": "400000 100000\n"})
    assert cpu_budget(root) == 4.0
    monkeypatch.setenv("ETJ_CPUS", "0.4")
    assert cpu_budget(root) == 0.4
    monkeypatch.setenv("ETJ_CPUS", "not a number")
    assert cpu_budget(root) == 4.0
