"""The ``status`` of an EmbeddingTrainingJob: what the operator observed and decided.

Written once per reconcile by the operator; read by ``kubectl get etj``. Pure data.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import Field

from etj.api.base import WIRE_STRING, ApiModel
from etj.api.plan import ShardPlan
from etj.api.spec import Strategy
from etj.api.warmstart import WarmStartStatus


class Phase(StrEnum):
    PENDING = "Pending"
    RUNNING = "Running"
    RESTARTING = "Restarting"
    SUSPENDED = "Suspended"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


FINISHED_PHASES = frozenset({Phase.SUCCEEDED, Phase.FAILED})


class PodPhase(StrEnum):
    """A Pod's ``status.phase`` (Kubernetes' own values), as the core reads a replica."""

    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    UNKNOWN = "Unknown"


class ConditionType(StrEnum):
    """The condition types etj sets on a job (``Condition.type``). Each phase but Pending
    has its condition; Created says the pods were made, Scheduled whether the gang could be
    placed (etj.core.reconcile.policies.gang), Scaling whether a change of the worker count
    is being applied (etj.core.reconcile.policies.scale), WarmStarted whether the source of
    spec.warmStart was resolved (False: waiting for it; etj.core.reconcile.policies.warmstart),
    CheckpointStorageFull that a checkpoint save found its volume full (the trainer's
    message: the volume, its size and free bytes, what the last checkpoint took)."""

    CREATED = "Created"
    SCHEDULED = "Scheduled"
    RUNNING = "Running"
    RESTARTING = "Restarting"
    SUSPENDED = "Suspended"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    SCALING = "Scaling"
    WARM_STARTED = "WarmStarted"
    CHECKPOINT_STORAGE_FULL = "CheckpointStorageFull"


# metav1.Condition's reason: a CamelCase word (letters, digits, '_', ',' and ':').
CONDITION_REASON_PATTERN = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"


class Condition(ApiModel):
    """A Kubernetes-shaped condition (as metav1.Condition)."""

    type: str = Field(
        description=(
            "Created, Scheduled, Running, Restarting, Scaling, Suspended, Succeeded, Failed, "
            "WarmStarted or CheckpointStorageFull."
        ),
    )
    status: str = Field(pattern=r"^(True|False|Unknown)$", description="True, False or Unknown.")
    # Required and never empty, as in metav1.Condition: a condition without a reason tells a
    # person nothing they can act on. The pattern is metav1.Condition's.
    reason: str = Field(
        min_length=1,
        max_length=1024,
        pattern=CONDITION_REASON_PATTERN,
        description="CamelCase reason for the last transition (required, never empty).",
    )
    message: str = Field(default="", description="Human-readable details.")
    last_transition_time: str | None = Field(
        default=None, description="When the status last changed (RFC 3339)."
    )
    observed_generation: int | None = Field(
        default=None, description="The spec generation this condition was set from."
    )


class ReplicaStatus(ApiModel):
    """Counts for one role."""

    active: int = Field(default=0, ge=0, description="Pods pending or running.")
    ready: int = Field(default=0, ge=0, description="Pods running.")
    succeeded: int = Field(default=0, ge=0, description="Pods that exited 0.")
    failed: int = Field(default=0, ge=0, description="Pods that failed.")
    restarts: int = Field(
        default=0, ge=0, description="Times a replica of this role was recreated."
    )


class ReplicaStatuses(ApiModel):
    """Counts per role."""

    chief: ReplicaStatus | None = Field(default=None, description="The chief.")
    worker: ReplicaStatus | None = Field(default=None, description="The workers.")
    ps: ReplicaStatus | None = Field(default=None, description="The parameter servers.")
    evaluator: ReplicaStatus | None = Field(default=None, description="The evaluator.")


class DynamicTableStatus(ApiModel):
    """How full one dynamic table (model.embeddings[].dynamic) is, as its trainer counts."""

    name: str = Field(description="The table (model.embeddings[].name).")
    rows_used: int = Field(ge=0, description="Pool rows holding an admitted id.")
    capacity: int = Field(ge=0, description="Pool rows of the table (dynamic.capacity).")
    admitted: int = Field(ge=0, description="Ids given a row so far.")
    evicted: int = Field(ge=0, description="Rows freed as stale so far (evictAfterSteps).")
    fallback_lookups: int = Field(
        ge=0, description="Training lookups of ids without a row (they read the fallback)."
    )


class DiskTableStatus(ApiModel):
    """One disk table (model.embeddings[].storage.disk) as its trainer counts it: the RAM
    cache's hit rate, what its files hold and the rows moving to and from them. The rates
    are of the interval between the trainer's last two reports; the counts since its tables
    were made (the chief's start)."""

    name: str = Field(description="The table (model.embeddings[].name).")
    cache_hit_rate: float = Field(
        ge=0, le=1, description="Looked-up rows found in the RAM cache (recent reports)."
    )
    cached_rows: int = Field(ge=0, description="Rows in the RAM cache, over all shards.")
    cache_rows: int = Field(ge=0, description="Rows the RAM cache holds at most.")
    rows: int = Field(ge=0, description="Rows of the table in its files on the ps' disks.")
    disk_bytes: int = Field(ge=0, description="Bytes of its files (rows with optimizer slots).")
    rows_read_per_second: float = Field(ge=0, description="Rows read from its files per second.")
    rows_written_per_second: float = Field(
        ge=0, description="Rows written to its files per second (dirty rows evicted, restores)."
    )
    lookups: int = Field(ge=0, description="Rows looked up since the chief started.")
    lookup_misses: int = Field(
        ge=0, description="Looked-up rows not in the cache since the chief started."
    )


class InputPositionStatus(ApiModel):
    """Where a following job is in its input (data.files.follow): the position its next
    checkpoint saves."""

    last_file: str | None = Field(default=None, description="The last file trained whole.")
    records: int | None = Field(
        default=None, ge=0, description="Records trained (as the restored tables count them)."
    )


class Progress(ApiModel):
    """Training progress as last reported by the chief."""

    step: int = Field(default=0, ge=0, description="Last completed training step.")
    examples_per_second: float | None = Field(default=None, description="Recent throughput.")
    loss: float | None = Field(default=None, description="Recent training loss.")
    auc: float | None = Field(default=None, description="Recent training AUC.")
    last_checkpoint_step: int | None = Field(
        default=None, description="Step of the newest checkpoint."
    )
    update_time: str | None = Field(default=None, description="When this was read (RFC 3339).")
    finished_time: str | None = Field(
        default=None,
        description=(
            "When the leader reported it had trained every step (RFC 3339, the leader's "
            "clock). The job succeeds when its process exits 0, or is stopped and counted "
            "succeeded if it has not exited a minute later."
        ),
    )
    bad_records: int | None = Field(
        default=None,
        ge=0,
        description="Bad input records skipped so far (allowed by data.maxBadRecords).",
    )
    input: InputPositionStatus | None = Field(
        default=None,
        description="A following job's position in its input: last file trained, records.",
    )
    dynamic_tables: list[DynamicTableStatus] | None = Field(
        default=None,
        description="Per dynamic table: rows used / capacity, admitted, evicted, fallback lookups.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    disk_tables: list[DiskTableStatus] | None = Field(
        default=None,
        description=(
            "Per disk table (storage.disk): cache hit rate, cached rows, rows and bytes on "
            "disk, rows read and written per second."
        ),
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )


class Evaluation(ApiModel):
    """The last held-out evaluation (data.validation), from a checkpoint."""

    step: int = Field(ge=0, description="Training step of the evaluated checkpoint.")
    auc: float | None = Field(default=None, description="Held-out AUC.")
    logloss: float | None = Field(default=None, description="Held-out log-loss.")
    examples: int | None = Field(default=None, ge=0, description="Held-out examples scored.")
    update_time: str | None = Field(default=None, description="When this was read (RFC 3339).")


class DeltaStatus(ApiModel):
    """The newest delta (spec.export.deltaSteps/deltaSeconds), as the leader last reported it."""

    base_version: int = Field(ge=1, description="The version it applies to.")
    sequence: int = Field(
        ge=1,
        description="Its place among that version's deltas (1, 2, ... in the order they apply).",
    )
    step: int = Field(ge=0, description="The training step it brings serving to.")
    time: str | None = Field(
        default=None, description="When it was moved into place (RFC 3339, the leader's clock)."
    )
    rows: int = Field(ge=0, description="Embedding rows it carries (rows changed since the last).")


class ExportStatus(ApiModel):
    """The newest serving version (spec.export), as the leader last reported it."""

    last_version: int = Field(
        ge=1,
        description=(
            "Its directory under location: TensorFlow Serving loads the highest (the Unix "
            "second it was started)."
        ),
    )
    step: int = Field(ge=0, description="The training step it holds.")
    time: str | None = Field(
        default=None,
        description="When it was moved into place (RFC 3339, the leader's clock).",
    )
    location: str | None = Field(
        default=None,
        description="The serving base path (TensorFlow Serving's --model_base_path).",
    )
    last_delta: DeltaStatus | None = Field(
        default=None,
        description=(
            "The newest delta written since a version (spec.export.deltaSteps or "
            "deltaSeconds): its version, sequence, step, time and rows."
        ),
    )
    update_time: str | None = Field(default=None, description="When this was read (RFC 3339).")


class ReplicaBackoff(ApiModel):
    """The restart back-off of one replica (kept in status so an operator restart keeps it)."""

    failures: int = Field(
        default=0, ge=0, description="Consecutive failures of this replica (back-off doubles)."
    )
    next_restart_time: str | None = Field(
        default=None, description="When the replica is recreated (RFC 3339); none: not waiting."
    )


class RetryableRestart(ApiModel):
    """A restart counted against backoffLimit for replicas that exited 138 (a peer
    unavailable), remembered for a node loss' window: a peer of their group seen lost with
    its node within it refunds the restart (etj.core.reconcile.policies.peerloss)."""

    pods: list[str] = Field(default_factory=list, description="The pods that exited 138.")
    time: str = Field(description="When they exited (RFC 3339).")


class EmbeddingTrainingJobStatus(ApiModel):
    """The observed state of a job."""

    phase: Phase | None = Field(default=None, description="Summary of the job's state.")
    strategy: Annotated[Strategy, WIRE_STRING] | None = Field(
        default=None, description="The strategy in use (Auto resolved)."
    )
    workers: str | None = Field(
        default=None, description="Workers ready/desired, as shown by kubectl get."
    )
    # The scale subresource's status (kubectl scale, HorizontalPodAutoscaler, KEDA).
    worker_replicas: int | None = Field(
        default=None, ge=0, description="Worker pods that exist (the scale's status.replicas)."
    )
    worker_selector: str | None = Field(
        default=None,
        description="Label selector of the worker pods (the scale's status.selector).",
    )
    conditions: list[Condition] = Field(
        default_factory=list,
        description="Conditions, one per type.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    replica_statuses: ReplicaStatuses | None = Field(default=None, description="Counts per role.")
    shard_plan: ShardPlan | None = Field(default=None, description="The shard plan in effect.")
    progress: Progress | None = Field(default=None, description="Training progress.")
    evaluation: Evaluation | None = Field(
        default=None, description="The last held-out evaluation (AUC, log-loss) of a checkpoint."
    )
    export: ExportStatus | None = Field(
        default=None,
        description="The newest serving version written (spec.export): number, step, time.",
    )
    warm_start: WarmStartStatus | None = Field(
        default=None,
        description=(
            "The warm start's source (spec.warmStart), pinned before the first pod, and per "
            "table what it carries over."
        ),
    )
    restarts: int = Field(default=0, ge=0, description="Restarts counted against backoffLimit.")
    last_restart_time: str | None = Field(
        default=None,
        description=(
            "When the last restart counted against backoffLimit was decided (RFC 3339): a "
            "replica whose container ended before then failed in that fault, and is not "
            "counted again when its end is seen later."
        ),
    )
    retryable_restarts: list[RetryableRestart] = Field(
        default_factory=list,
        description=(
            "Restarts counted for an exit 138 (a peer unavailable) within the last node-loss "
            "window: a peer of the group seen lost with its node later refunds them."
        ),
    )
    start_time: str | None = Field(
        default=None, description="When the job first started (RFC 3339)."
    )
    completion_time: str | None = Field(
        default=None, description="When the job finished (RFC 3339)."
    )
    observed_generation: int | None = Field(
        default=None, description="The spec generation the status reflects."
    )
    message: str | None = Field(default=None, description="The last notable event, for people.")
    restarting_pods: list[str] = Field(
        default_factory=list,
        description=(
            "Pods the operator deleted to restart and has not recreated yet; kept here so an "
            "operator restart neither loses nor double-counts a restart."
        ),
    )
    memory_limits: dict[str, int] = Field(
        default_factory=dict,
        description="Memory limits (bytes) raised after OOM kills, by pod name.",
    )
    restart_backoff: dict[str, ReplicaBackoff] = Field(
        default_factory=dict,
        description="Restart back-off by pod name: consecutive failures and the next restart.",
    )
