"""Where a warm start's checkpoints are, as the job's pods see them. Pure.

A source job's checkpoints are where its spec put them (``checkpoint_dir``): under a
``gs://`` or shared-path ``checkpoint.uri`` (read there), or on a volume (its
``checkpoint.storage`` claim, or its ``checkpoint.volume``), which the warm-started job
mounts read-only at ``WARM_START_MOUNT``. A source whose checkpoints were in an emptyDir
(the default of a one-pod job) has none left. ``warmStart.checkpoint`` names a location
directly. The trainer config carries the location (``TrainerWarmStart``) and the pods the
read-only volume, both from ``status.warmStart`` once the operator pinned it (or, for a
location, from the spec itself, so ``etj render`` shows it).
"""

from __future__ import annotations

import copy
from typing import Any

from etj.api.job import EmbeddingTrainingJob
from etj.api.warmstart import (
    WARM_START_MOUNT,
    OptimizerState,
    StepCount,
    TrainerWarmStart,
    WarmStartCheckpoint,
    WarmStartStatus,
)


def checkpoint_dir(job: EmbeddingTrainingJob) -> str:
    """The job's checkpoint directory, as its own pods see it."""
    # A per-job directory: one checkpoint volume may serve several jobs, and one bucket
    # prefix (or shared path) several namespaces.
    ckpt = job.spec.checkpoint
    if ckpt.uri is not None:
        return f"{ckpt.uri.rstrip('/')}/{job.namespace}/{job.name}"
    return f"{ckpt.mount_path.rstrip('/')}/{job.name}"


def checkpoint_claim_name(job_name: str) -> str:
    return f"{job_name}-checkpoints"


def _read_only(volume: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(volume)
    for kind in ("persistentVolumeClaim", "nfs", "csi"):
        if isinstance(out.get(kind), dict):
            out[kind]["readOnly"] = True
    return out


def source_of_job(source: EmbeddingTrainingJob) -> tuple[str | None, dict[str, Any] | None]:
    """Where a source job's checkpoints are for another job's pods: (location, volume to
    mount read-only); (None, None) when they were in an emptyDir, gone with its pods."""
    ckpt = source.spec.checkpoint
    if ckpt.uri is not None:
        return checkpoint_dir(source), None
    if ckpt.storage is not None:
        volume: dict[str, Any] = {
            "persistentVolumeClaim": {"claimName": checkpoint_claim_name(source.name)}
        }
    elif ckpt.volume is not None and "emptyDir" not in ckpt.volume:
        volume = ckpt.volume
    else:
        return None, None
    return f"{WARM_START_MOUNT}/{source.name}", _read_only(volume)


def location_status(location: WarmStartCheckpoint, now: str | None) -> WarmStartStatus:
    """The pinned source of a ``warmStart.checkpoint`` location."""
    if location.claim is not None:
        path = (location.path or "").strip("/")
        return WarmStartStatus(
            source=f"claim {location.claim}" + (f", {path}" if path else ""),
            location=f"{WARM_START_MOUNT}/{path}".rstrip("/"),
            volume=_read_only({"persistentVolumeClaim": {"claimName": location.claim}}),
            resolved_time=now,
        )
    assert location.uri is not None
    return WarmStartStatus(source=location.uri, location=location.uri, resolved_time=now)


def resolved_warm_start(job: EmbeddingTrainingJob) -> WarmStartStatus | None:
    """The warm start's source as pinned in the status; a location needs no resolving (so
    ``etj render`` shows it); None: none (yet)."""
    if job.status is not None and job.status.warm_start is not None:
        return job.status.warm_start
    ws = job.spec.warm_start
    if ws is not None and ws.checkpoint is not None:
        return location_status(ws.checkpoint, None)
    return None


def trainer_warm_start(job: EmbeddingTrainingJob) -> TrainerWarmStart | None:
    """The trainer config's warm start: the pinned location and what to keep."""
    ws, resolved = job.spec.warm_start, resolved_warm_start(job)
    if ws is None or resolved is None or resolved.location is None:
        return None
    return TrainerWarmStart(
        location=resolved.location,
        source=resolved.source,
        continue_steps=ws.step_count == StepCount.CONTINUE,
        keep_optimizer=ws.optimizer_state == OptimizerState.KEEP,
        fresh_tables=list(ws.fresh_tables or []),
    )


def warm_start_volume(job: EmbeddingTrainingJob) -> dict[str, Any] | None:
    """The source's volume, mounted read-only at ``WARM_START_MOUNT``; None: no volume."""
    resolved = resolved_warm_start(job)
    return resolved.volume if resolved is not None else None
