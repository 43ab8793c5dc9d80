"""ttlSecondsAfterFinished: a finished job is deleted after this long. Pure."""

from __future__ import annotations

from datetime import datetime, timedelta


def ttl_expired(finished: datetime | None, ttl: int | None, now: datetime) -> bool:
    return finished is not None and ttl is not None and now >= finished + timedelta(seconds=ttl)


def seconds_to_expiry(finished: datetime | None, ttl: int | None, now: datetime) -> float | None:
    if finished is None or ttl is None:
        return None
    return max(0.0, (finished + timedelta(seconds=ttl) - now).total_seconds())
