"""The one deadline-bounded wait of the tests and benchmarks: poll a condition instead of
sleeping for it."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def wait_for(predicate: Callable[[], T], timeout: float, what: str, every: float = 0.2) -> T:
    """Poll ``predicate`` every ``every`` seconds until it returns something truthy (that
    value); fail after ``timeout`` seconds, saying what was awaited and the last answer."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(every)  # poll interval of a deadline-bounded wait
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")
