"""A benchmark's docstring says what it measures and how to run it; its results live in
``benchmarks/RESULTS.md``.

Dated measurements in a docstring grow with every session until the docstring is a lab
notebook nobody can read as a description of the code. So each benchmark's module
docstring stays within ``MAX_LINES`` lines, and ``benchmarks/RESULTS.md`` names every
benchmark in a heading (one table per benchmark: date, commit, load, command, figures).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
BENCHMARKS = ROOT / "benchmarks"
RESULTS = BENCHMARKS / "RESULTS.md"
MAX_LINES = 40


def docstring_lines(source: str) -> int:
    """Lines the module docstring spans in the file, its quotes included (0: none)."""
    tree = ast.parse(source)
    if ast.get_docstring(tree) is None:
        return 0
    node = tree.body[0]
    return (node.end_lineno or node.lineno) - node.lineno + 1


def _benchmarks() -> list[Path]:
    return sorted(p for p in BENCHMARKS.glob("*.py") if not p.name.startswith("_"))


def test_every_benchmark_docstring_is_short():
    long = {p.name: n for p in _benchmarks() if (n := docstring_lines(p.read_text())) > MAX_LINES}
    assert not long, (
        f"benchmark docstrings over {MAX_LINES} lines (move dated results to "
        f"benchmarks/RESULTS.md): {long}"
    )


def test_every_benchmark_has_a_docstring():
    missing = [p.name for p in _benchmarks() if not docstring_lines(p.read_text())]
    assert not missing, f"benchmarks without a docstring saying what they measure: {missing}"


def test_results_name_every_benchmark_in_a_heading():
    headings = "\n".join(re.findall(r"^#+ .*$", RESULTS.read_text(), re.MULTILINE))
    missing = [p.name for p in _benchmarks() if p.name not in headings]
    assert not missing, f"benchmarks/RESULTS.md has no heading for {missing}"


def test_the_check_counts_a_docstrings_lines():
    assert docstring_lines('"""One line."""\nx = 1\n') == 1
    assert docstring_lines('"""Title.\n\nMore.\n"""\n') == 4
    assert docstring_lines("x = 1\n") == 0
    long = '"""Title.\n' + "a line\n" * MAX_LINES + '"""\n'
    assert docstring_lines(long) > MAX_LINES
