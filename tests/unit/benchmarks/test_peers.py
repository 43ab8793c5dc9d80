"""benchmarks/peers.py's reading of its runs: which rates are a measure, and the ratios to
PyTorch it prints (per CPU-second beside per second)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))

from peers import MIN_RECORDS, MIN_WINDOW_S, no_measure, ratios


def _ps(window_s: float, records: int) -> dict[str, float]:
    return {"eps": 1000.0, "cpu_per_k": 2.0, "window_s": window_s, "records": records}


def test_a_single_process_run_is_always_a_measure() -> None:
    assert no_measure({"eps": 1000.0, "cpu_per_k": 2.0}) == ""


def test_a_short_or_sparse_ps_window_is_no_measure() -> None:
    assert "s (<" in no_measure(_ps(MIN_WINDOW_S - 0.1, MIN_RECORDS + 10))
    assert "progress records" in no_measure(_ps(MIN_WINDOW_S * 4, MIN_RECORDS - 1))
    assert no_measure(_ps(MIN_WINDOW_S, MIN_RECORDS)) == ""


def test_ratios_are_to_pytorch_per_second_and_per_cpu_second() -> None:
    torch = {"eps": 1000.0, "cpu_per_k": 2.0}
    # Twice as fast in wall time but using three times the CPU per example.
    run = {"eps": 2000.0, "cpu_per_k": 6.0}
    assert ratios(run, torch) == ("2.00x torch", "0.33x/CPU-s")
    assert ratios(run, None) == ("", "")
