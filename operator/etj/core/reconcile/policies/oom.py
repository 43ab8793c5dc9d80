"""An OOM-killed replica comes back with a larger memory limit, up to a cap.

Pure.
"""

from __future__ import annotations

import math

OOM_GROWTH = 1.5
_MI = 2**20


def raised_limit(current: int | None, cap: int) -> int | None:
    """The next memory limit after an OOM kill; None when it cannot grow (no limit, or at cap)."""
    if current is None or current >= cap:
        return None
    grown = math.ceil(current * OOM_GROWTH / _MI) * _MI
    return min(grown, cap)
