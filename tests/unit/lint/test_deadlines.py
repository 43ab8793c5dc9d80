"""No test that runs processes or talks to a cluster has a deadline a busy machine can miss.

A deadline in those tests (``wait_for``'s, a ``timeout=`` of a subprocess or a process's
``wait``) is a net against a hang, never a claim about speed (timing claims live in
``benchmarks/``). CI runs three test lanes beside the Go, image and kind builds on two
cores (load 8-12), which stretches an operation of a few seconds five- to tenfold; a
60 s bound on a warm cache check that waited on a build's lock, and on a leader's exit,
failed a cold CI run (issue 36). So no literal deadline there is below ``FLOOR``; what
each wait really took under that load is printed after every CI run
(``etj_testcluster.waiting``: the waits closest to their deadlines).

Left out: ``urlopen``'s ``timeout`` (one request's socket timeout, inside a retried
check), a Kafka consumer's ``consume`` (one poll's wait, likewise) and a thread's ``join``; and the one bound that is a claim of its own, listed in
``CLAIMS`` with its reason.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
TREES = ("tests/integration", "tests/trainer", "tests/local", "tests/e2e", "tests/images")
FLOOR = 120
NOT_DEADLINES = {"urlopen", "consume", "join"}
# (file, the call's source text) -> why its bound is below the floor.
CLAIMS = {
    ("tests/trainer/harness.py", "self.wait_exit(*self.chief_key, timeout=60)"): (
        "a leader that wrote `done` leaves at once (etj_trainer.ending; 0.1 s measured under "
        "load 10, where the old teardown took 11-32 s): the bound is issue 36's claim"
    ),
    ("tests/trainer/etj_trainer/test_ending.py", "proc.wait(timeout=20)"): (
        "not a deadline but a watch on a negative (the process must NOT exit): load only makes "
        "the hang it watches longer, never shorter"
    ),
}


def _name(func: ast.expr) -> str:
    if isinstance(func, ast.Name):
        return func.id
    return func.attr if isinstance(func, ast.Attribute) else ""


def short_deadlines(path: Path, name: str) -> list[tuple[int, str]]:
    """(line, call) of each literal deadline below FLOOR in one file (``name``: its path
    from the root, for ``CLAIMS``), claims left out."""
    source = path.read_text()
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call) or _name(node.func) in NOT_DEADLINES:
            continue
        values = [kw.value for kw in node.keywords if kw.arg == "timeout"]
        if _name(node.func) == "wait_for" and len(node.args) >= 2:
            values.append(node.args[1])
        for value in values:
            if (
                isinstance(value, ast.Constant)
                and isinstance(value.value, int | float)
                and value.value < FLOOR
            ):
                call = ast.get_source_segment(source, node) or ""
                if (name, call) not in CLAIMS:
                    found.append((value.lineno, " ".join(call.split())[:100]))
    return found


def test_no_deadline_below_the_floor():
    short = [
        f"{path.relative_to(ROOT)}:{line}: {call}"
        for tree in TREES
        for path in sorted((ROOT / tree).rglob("*.py"))
        for line, call in short_deadlines(path, str(path.relative_to(ROOT)))
    ]
    assert not short, f"deadlines below {FLOOR} s (a hang's net, not a stopwatch):\n" + "\n".join(
        short
    )


def test_the_check_finds_a_short_deadline(tmp_path: Path):
    sample = tmp_path / "sample.py"
    sample.write_text(
        "wait_for(ready, 30, 'x')\nwait_for(ready, 300, 'x')\n"
        "subprocess.run(cmd, timeout=60)\nurlopen(url, timeout=2)\nt.join(timeout=5)\n"
        "self.wait_exit(*self.chief_key, timeout=60)\n"
    )
    assert [line for line, _ in short_deadlines(sample, "sample.py")] == [1, 3, 6]
    assert [line for line, _ in short_deadlines(sample, "tests/trainer/harness.py")] == [1, 3]


def test_every_claim_is_still_in_its_file():
    for (file, call), reason in CLAIMS.items():
        assert reason.strip()
        assert call in (ROOT / file).read_text(), f"{file} no longer has {call}"
