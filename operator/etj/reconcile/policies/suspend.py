"""spec.runPolicy.suspend: true deletes the pods (status and checkpoints stay); false
recreates them and training resumes from the last checkpoint. Pure."""

from __future__ import annotations

from collections.abc import Iterable

from etj.reconcile.observe import PodState


def pods_to_suspend(pods: Iterable[PodState]) -> list[str]:
    return sorted(p.name for p in pods if not p.terminating)
