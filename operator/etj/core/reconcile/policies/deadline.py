"""activeDeadlineSeconds: a job running longer fails. Pure.

``start`` is ``status.startTime``: the job's first start, or its last resume (see
policies/suspend), so suspended time does not count.
"""

from __future__ import annotations

from datetime import datetime, timedelta


def deadline_exceeded(start: datetime | None, seconds: int | None, now: datetime) -> bool:
    return start is not None and seconds is not None and now >= start + timedelta(seconds=seconds)


def seconds_to_deadline(start: datetime | None, seconds: int | None, now: datetime) -> float | None:
    if start is None or seconds is None:
        return None
    return max(0.0, (start + timedelta(seconds=seconds) - now).total_seconds())
