"""Builders for reconcile tests: jobs, plans and pods in memory (no cluster)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from etj.api import EmbeddingTrainingJob
from etj.core.planner import build_plan
from etj.core.reconcile import World, decide
from etj.core.reconcile.decision import Decision
from etj.core.reconcile.observe import PodState
from etj.core.render.pod import replica_set
from etj.core.tfconfig import pod_name

T0 = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


def make_job(
    strategy: str = "ParameterServer", workers: int = 2, status: dict | None = None, **spec: Any
) -> EmbeddingTrainingJob:
    body: dict[str, Any] = {
        "strategy": strategy,
        "replicas": {"worker": {"replicas": workers}},
        "model": {"embeddings": [{"name": "user_id", "vocabularySize": 1000, "dimension": 8}]},
        **spec,
    }
    if strategy == "ParameterServer":
        body["replicas"].setdefault("ps", {"replicas": 2})
    manifest = {
        "apiVersion": "training.etj.dev/v1alpha1",
        "kind": "EmbeddingTrainingJob",
        "metadata": {"name": "j", "namespace": "ns", "uid": "u1", "generation": 1},
        "spec": body,
    }
    if status is not None:
        manifest["status"] = status
    return EmbeddingTrainingJob.from_manifest(manifest)


def pod(role: str, index: int, phase: str = "Running", **kw: Any) -> PodState:
    return PodState(name=pod_name("j", role, index), role=role, index=index, phase=phase, **kw)


def all_pods(job: EmbeddingTrainingJob, phase: str = "Running") -> list[PodState]:
    return [pod(r, i, phase) for r, i in replica_set(job, build_plan(job.spec)).tasks()]


def run(job: EmbeddingTrainingJob, pods: list[PodState], now: datetime = T0, **kw: Any) -> Decision:
    """The decision; and the job's status as it was (decide copies it only shallowly, so
    a rule that changed a list, a map or a model of it in place would show here)."""
    before = job.status.model_dump() if job.status is not None else None
    decision = decide(
        World(
            job=job,
            plan=build_plan(job.spec),
            plan_error=None,
            pods=pods,
            has_service=True,
            has_config_map=True,
            now=now,
            **kw,
        )
    )
    assert (job.status.model_dump() if job.status is not None else None) == before
    return decision


def with_status(job: EmbeddingTrainingJob, d: Decision) -> EmbeddingTrainingJob:
    """The job as the API server holds it after the decision's status write."""
    assert d.status is not None
    return job.model_copy(update={"status": d.status})


def later(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)
