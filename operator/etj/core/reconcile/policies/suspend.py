"""spec.runPolicy.suspend: true deletes the pods (status and checkpoints stay); false
recreates them and training resumes from the last checkpoint. Pure.

``status.startTime`` follows the Kubernetes Job convention: resuming sets it to the moment
of the resume. ``activeDeadlineSeconds`` counts from ``startTime`` (policies/deadline), so
time spent suspended (say, waiting in a Kueue queue) never counts against the deadline.
While suspended the old value stays (the status is written as a merge patch, which cannot
drop a field; the deadline is not checked while suspended anyway).
"""

from __future__ import annotations

from collections.abc import Iterable

from etj.core.reconcile.observe import PodState


def pods_to_suspend(pods: Iterable[PodState]) -> list[str]:
    return sorted(p.name for p in pods if not p.terminating)


def start_time_on_resume(now: str) -> str:
    """A resumed job starts again now: the deadline's clock restarts here."""
    return now
