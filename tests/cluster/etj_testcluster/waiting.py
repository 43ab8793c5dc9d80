"""The one deadline-bounded wait of the tests and benchmarks: poll a condition instead of
sleeping for it.

A deadline here is a safety net against a hang, never a claim about speed: it must be met
with a wide margin by a healthy run under the heaviest load CI puts beside it (two test
lanes, the Go, image and kind builds). To keep that checkable, every wait can be recorded:
with ``ETJ_WAIT_LOG`` set (``tests/cluster/lanes.sh`` sets it for each lane), each
``wait_for`` and each ``wait_exit`` (a process's exit, awaited with a deadline) appends one
JSON line — what was awaited, its deadline, how long it took, whether it was met, and the
test — and ``python -m etj_testcluster.waiting LOG...`` prints the waits that came closest
to their deadlines (CI prints it after the lanes' summaries).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

WAIT_LOG_ENV = "ETJ_WAIT_LOG"
# A wait that used more than this share of its deadline is listed as tight.
TIGHT = 0.5


def record_wait(what: str, timeout: float, elapsed: float, met: bool) -> None:
    """Append one wait to ``$ETJ_WAIT_LOG`` (nothing when it is not set)."""
    path = os.environ.get(WAIT_LOG_ENV)
    if not path:
        return
    line = {
        "what": what,
        "timeout": timeout,
        "elapsed": round(elapsed, 3),
        "met": met,
        "test": os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" (", 1)[0],
    }
    with contextlib.suppress(OSError), open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")


class WaitTimeout(AssertionError):
    """``wait_for``'s deadline passed. An AssertionError (a test's failure); its own class so
    that a helper can turn a missed deadline alone into its own error (an assertion inside
    the predicate is not one)."""


def wait_for(predicate: Callable[[], T], timeout: float, what: str, every: float = 0.2) -> T:
    """Poll ``predicate`` every ``every`` seconds until it returns something truthy (that
    value); fail after ``timeout`` seconds (``WaitTimeout``), saying what was awaited and
    the last answer. What ``predicate`` raises goes through at once (a wait that can
    fail fast: a process that exited)."""
    start = time.monotonic()
    deadline = start + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            record_wait(what, timeout, time.monotonic() - start, True)
            return last
        time.sleep(every)  # poll interval of a deadline-bounded wait
    record_wait(what, timeout, time.monotonic() - start, False)
    raise WaitTimeout(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


def wait_exit(proc: subprocess.Popen[Any], timeout: float, what: str) -> int:
    """``proc.wait(timeout)``, recorded like ``wait_for``; its exit code."""
    start = time.monotonic()
    try:
        code = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        record_wait(what, timeout, time.monotonic() - start, False)
        raise
    record_wait(what, timeout, time.monotonic() - start, True)
    return code


def read_waits(paths: Iterable[Path]) -> list[dict[str, Any]]:
    waits = []
    for path in paths:
        with contextlib.suppress(OSError):
            for line in path.read_text(encoding="utf-8").splitlines():
                with contextlib.suppress(ValueError):
                    waits.append(json.loads(line))
    return waits


def tightest(waits: list[dict[str, Any]], n: int = 15) -> list[dict[str, Any]]:
    """The ``n`` waits that used the largest share of their deadlines (missed ones first)."""
    return sorted(waits, key=lambda w: (w["met"], -w["elapsed"] / max(w["timeout"], 1e-9)))[:n]


def report(waits: list[dict[str, Any]], n: int = 15) -> str:
    if not waits:
        return "no waits recorded"
    lines = [f"{len(waits)} waits; the {min(n, len(waits))} closest to their deadlines:"]
    for w in tightest(waits, n):
        share = w["elapsed"] / max(w["timeout"], 1e-9)
        flag = "MISSED" if not w["met"] else ("tight " if share > TIGHT else "      ")
        lines.append(
            f"  {flag} {share:5.0%} {w['elapsed']:8.1f}s of {w['timeout']:6.0f}s  "
            f"{w['what'][:60]}  [{w['test']}]"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    print(report(read_waits(Path(p) for p in sys.argv[1:])))
