"""Which checkpoint a warm-started job starts from (``spec.warmStart``). Pure.

Resolved once, before the job's first pod, from the jobs of its namespace as listed, and
pinned in ``status.warmStart`` (later passes, restarts and an operator restart read the
pin, never resolve again: a newer job succeeding later changes nothing). Three outcomes:

- **resolved**: the source's checkpoint location (and the volume to mount read-only), its
  step when its status says, and per table what is carried over (``table_decisions``,
  from the source job's spec; a location's tables are checked by the trainer);
- **waiting** (no pod is made; looked at again every ``RECHECK_SECONDS``): ``fromJob``
  does not exist yet or has not finished, or no Succeeded job matches the selector, under
  ``ifNoSource: Wait``;
- **refused** (the job fails with a message naming what to change): the source Failed, its
  checkpoints were in an emptyDir, a table cannot be carried over (its vocabularySize
  changed, ...), or ``ifNoSource: Fail``.

Must not: read the API, render objects or decide anything but the source.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from etj.api.job import EmbeddingTrainingJob
from etj.api.status import Phase
from etj.api.warmstart import (
    IfNoSource,
    OptimizerState,
    TableAction,
    WarmStartSpec,
    WarmStartStatus,
    decision_line,
    table_decisions,
    table_infos,
)
from etj.core.render.warmstart import location_status, source_of_job

# Seconds between looks at the namespace's jobs while a warm start waits for its source.
RECHECK_SECONDS = 10.0


@dataclass(frozen=True)
class Resolution:
    """One of: ``status`` (resolved), ``wait`` (why it waits), ``refusal`` (why it fails)."""

    status: WarmStartStatus | None = None
    wait: str | None = None
    refusal: str | None = None
    # One line per decision, for the job's Events (after the status write).
    lines: list[str] = field(default_factory=list)


def _no_source(ws: WarmStartSpec, why: str, now: str) -> Resolution:
    if ws.if_no_source == IfNoSource.START_FRESH:
        text = f"{why}: starting fresh (warmStart.ifNoSource StartFresh)"
        return Resolution(
            status=WarmStartStatus(source=f"none ({why})", resolved_time=now), lines=[text]
        )
    if ws.if_no_source == IfNoSource.FAIL:
        return Resolution(refusal=f"{why} (warmStart.ifNoSource Fail)")
    return Resolution(
        wait=f"{why}: waiting for it (warmStart.ifNoSource StartFresh trains from scratch instead)"
    )


def _finished_at(job: EmbeddingTrainingJob) -> tuple[str, str, str]:
    st = job.status
    return (
        (st.completion_time if st else None) or "",
        job.metadata.creationTimestamp or "",
        job.name,
    )


def newest_succeeded(
    ws: WarmStartSpec, job: EmbeddingTrainingJob, jobs: Sequence[EmbeddingTrainingJob]
) -> EmbeddingTrainingJob | None:
    """The newest Succeeded job (by completion time) of ``job``'s namespace matching the
    selector, other than ``job`` itself."""
    assert ws.selector is not None
    found = [
        j
        for j in jobs
        if j.namespace == job.namespace
        and j.name != job.name
        and j.status is not None
        and j.status.phase == Phase.SUCCEEDED
        and ws.selector.matches(j.metadata.labels)
    ]
    return max(found, key=_finished_at, default=None)


def from_source_job(
    job: EmbeddingTrainingJob, source: EmbeddingTrainingJob, how: str, now: str
) -> Resolution:
    """The pinned source for a Succeeded source job, or why it cannot be one."""
    ws = job.spec.warm_start
    assert ws is not None
    location, volume = source_of_job(source)
    if location is None:
        return Resolution(
            refusal=(
                f"warm start from job {source.name} ({how}): its checkpoints were in an "
                "emptyDir (it set no checkpoint.storage, uri or volume) and went with its "
                "pods; give the source job shared checkpoints, or name a location in "
                "warmStart.checkpoint"
            )
        )
    tables, problems = table_decisions(
        table_infos(source.spec.model, source.spec.training.optimizer),
        table_infos(job.spec.model, job.spec.training.optimizer),
        ws.fresh_tables or [],
        ws.optimizer_state == OptimizerState.KEEP,
    )
    if problems:
        return Resolution(
            refusal=f"warm start from job {source.name} ({how}): " + "; ".join(problems)
        )
    progress = source.status.progress if source.status else None
    step = None
    if progress is not None:
        step = progress.last_checkpoint_step if progress.last_checkpoint_step else progress.step
    status = WarmStartStatus(
        source=f"job {source.name} ({how})",
        source_job=source.name,
        source_uid=source.metadata.uid,
        location=location,
        volume=volume,
        step=step,
        tables=tables,
        resolved_time=now,
    )
    return Resolution(status=status, lines=summary_lines(status))


# What an Event's message holds (etj.controller.handlers cuts it there).
EVENT_MESSAGE_CHARS = 1000


def event_message(lines: list[str]) -> str:
    """One Event for a warm start's decisions: a line each, as many as fit; the rest are
    counted and found in status.warmStart.tables."""
    text = "\n".join(lines)
    if len(text) <= EVENT_MESSAGE_CHARS:
        return text
    out: list[str] = []
    for i, line in enumerate(lines):
        more = f"... and {len(lines) - i} more: see status.warmStart.tables"
        if len("\n".join([*out, line, more])) > EVENT_MESSAGE_CHARS:
            return "\n".join([*out, more])
        out.append(line)
    return text


def summary_lines(status: WarmStartStatus) -> list[str]:
    """The Event lines of a pinned source: where from, then one line per table."""
    at = f" at step {status.step}" if status.step is not None else ""
    head = f"warm start from {status.source}{at}: {status.location}"
    counts = {a: sum(1 for t in status.tables if t.action == a) for a in TableAction}
    if status.tables:
        head += (
            f" ({counts[TableAction.RESTORED]} tables restored, "
            f"{counts[TableAction.STARTED_FRESH]} started fresh, "
            f"{counts[TableAction.DROPPED]} dropped)"
        )
    else:
        head += " (the trainer decides table by table when it reads the checkpoint)"
    return [head, *(decision_line(t) for t in status.tables)]


def resolve(
    job: EmbeddingTrainingJob, jobs: Sequence[EmbeddingTrainingJob] | None, now: str
) -> Resolution:
    """The warm start of ``job`` from ``jobs`` (its namespace's, as listed; None: not
    listed, which only a location source does without)."""
    ws = job.spec.warm_start
    assert ws is not None
    if ws.checkpoint is not None:
        status = location_status(ws.checkpoint, now)
        return Resolution(status=status, lines=summary_lines(status))
    if jobs is None:
        return Resolution(wait="the namespace's jobs were not read yet")
    if ws.from_job is not None:
        if ws.from_job == job.name:
            return Resolution(
                refusal="warmStart.fromJob names this job itself: a job resumes from its own "
                "checkpoints anyway; name another job"
            )
        source = next(
            (j for j in jobs if j.namespace == job.namespace and j.name == ws.from_job), None
        )
        if source is None:
            return _no_source(ws, f"job {ws.from_job} does not exist in {job.namespace}", now)
        phase = source.status.phase if source.status else None
        if phase == Phase.FAILED:
            return Resolution(
                refusal=(
                    f"warm start from job {source.name}: it Failed, so its last checkpoint "
                    "is of a run that did not finish; to start from it anyway, name its "
                    "checkpoint location in warmStart.checkpoint"
                )
            )
        if phase != Phase.SUCCEEDED:
            return Resolution(
                wait=f"waiting for job {source.name} to succeed (it is {phase or Phase.PENDING})"
            )
        return from_source_job(job, source, "fromJob", now)
    assert ws.selector is not None
    found = newest_succeeded(ws, job, jobs)
    if found is None:
        return _no_source(ws, f"no Succeeded job matches selector {ws.selector.text()}", now)
    return from_source_job(job, found, f"newest Succeeded of {ws.selector.text()}", now)
