"""The types of one reconcile pass: the observed ``World`` in, the ``Decision`` out and its
``Event`` records; the time format of the status.

Pure: no I/O; the caller passes the time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

from etj.api.job import EmbeddingTrainingJob
from etj.api.plan import ShardPlan
from etj.api.reasons import REASON_INVALID_SPEC
from etj.api.roles import Role
from etj.api.spec import GangScheduler
from etj.api.status import EmbeddingTrainingJobStatus, Evaluation, ExportStatus, Progress
from etj.core.reconcile.observe import PodState
from etj.core.reconcile.progress import WarmStartReport


@dataclass(frozen=True)
class Event:
    type: str  # Normal or Warning
    reason: str
    message: str


@dataclass(frozen=True)
class World:
    """What one reconcile observed."""

    job: EmbeddingTrainingJob
    plan: ShardPlan | None
    plan_error: str | None
    pods: list[PodState]
    has_service: bool
    has_config_map: bool
    now: datetime
    progress: Progress | None = None
    # The chief's last held-out evaluation (data.validation), when it has made one.
    evaluation: Evaluation | None = None
    # The newest serving version the leader reported (spec.export), when it has written one.
    export: ExportStatus | None = None
    # The operator's cap for memory limits raised after OOM kills (bytes).
    default_max_memory: int = 64 * 2**30
    # The operator's tolerationSeconds of the not-ready/unreachable taints for a job whose
    # placement.nodeLossSeconds is not set (its --node-loss-seconds).
    node_loss_seconds: int = 30
    # The job's gang scheduler (etj.core.render.scheduling.gang_scheduler); None: no gang.
    gang: GangScheduler | None = None
    # Its gang object exists as the plan wants it (else it is made or remade).
    gang_current: bool = True
    # The Failed condition's reason when the job cannot run (plan is None): InvalidSpec,
    # or StorageNotShared when the pods cannot share the claims the job names.
    refusal_reason: str = REASON_INVALID_SPEC
    # The uids of the pods Kueue's Workload for the job's group names as its owners, read
    # when a pass needs them (policies.queue.owners_wanted); None: not read or unknown.
    queue_owners: frozenset[str] | None = None
    # The jobs of the job's namespace, listed while its warm start (spec.warmStart) is not
    # resolved yet; None: not listed.
    jobs: list[EmbeddingTrainingJob] | None = None
    # The leader's warm start as it carried it out (its metrics page or log): the source
    # checkpoint's step and each table's decision; None: not read (or none).
    warm_start_report: WarmStartReport | None = None


@dataclass
class Decision:
    """What to do: apply in order — create Service/ConfigMap and the gang, write status,
    mark pods unretriable, delete pods, release pods, create pods, post events, delete the
    job (the status first: it records a failure before the failed pod, the only other
    evidence of it, is deleted)."""

    status: EmbeddingTrainingJobStatus | None = None
    create_service: bool = False
    create_config_map: bool = False
    # Make (or remake, sized from the plan) the job's gang object, before any pod.
    apply_gang: bool = False
    delete_pods: list[str] = field(default_factory=list)
    # Pods of lost nodes, deleted at once (grace 0): no kubelet will finish their deletion.
    force_delete_pods: list[str] = field(default_factory=list)
    create_pods: list[tuple[Role, int]] = field(default_factory=list)
    # Kueue's plain-Pod group (policies.queue): pods to mark unretriable (before any pod
    # is deleted) and pods whose Kueue finalizer etj removes (after the deletions).
    mark_unretriable: list[str] = field(default_factory=list)
    release_pods: list[str] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    delete_job: bool = False
    requeue_after: float | None = None
    skipped: str | None = None  # why nothing was done


def iso(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str | None) -> datetime | None:
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00"))
