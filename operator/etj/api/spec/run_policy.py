"""``spec.runPolicy``: restarts and their back-off, deadlines, success, clean-up and gang
scheduling.

Pure: no I/O, no environment, no kopf or Kubernetes client.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from etj.api.base import ApiModel, Quantity
from etj.api.constants import DEFAULT_WATCHDOG_SECONDS, MANAGED_BY


class RestartPolicy(StrEnum):
    NEVER = "Never"
    ON_FAILURE = "OnFailure"
    EXIT_CODE = "ExitCode"


class CleanPodPolicy(StrEnum):
    ALL = "All"
    RUNNING = "Running"
    NONE = "None"


class SuccessPolicy(StrEnum):
    """When the job has succeeded (TFJob's ``successPolicy``; its "" is ``Chief`` here)."""

    # The chief exits 0; without a chief, worker 0 (TensorFlow's "chief worker").
    CHIEF = "Chief"
    # Every worker exits 0 (a job without a chief only, as in TFJob).
    ALL_WORKERS = "AllWorkers"


class RestartBackoff(ApiModel):
    """How long a failed replica waits before it is recreated (as batch/v1 Job's back-off)."""

    initial_seconds: int = Field(
        default=10,
        ge=0,
        le=3600,
        description=(
            "Wait before the first restart of a replica; each further consecutive failure "
            "doubles it. 0 restarts at once."
        ),
    )
    max_seconds: int = Field(
        default=300, ge=0, le=86400, description="The longest wait between restarts."
    )
    reset_after_seconds: int = Field(
        default=600,
        ge=0,
        le=604800,
        description=(
            "A replica that ran this long before it failed starts again from initialSeconds."
        ),
    )


class GangScheduler(StrEnum):
    """Who places a job's pods all at once (all-or-nothing)."""

    # Kubernetes' own Workload API (scheduling.k8s.io/v1alpha1; v1.35 with the
    # GenericWorkload and GangScheduling feature gates): kube-scheduler itself.
    WORKLOAD = "Workload"
    # Volcano's PodGroup (scheduling.volcano.sh/v1beta1), scheduler "volcano".
    VOLCANO = "Volcano"
    # scheduler-plugins' coscheduling PodGroup (scheduling.x-k8s.io/v1alpha1).
    SCHEDULER_PLUGINS = "SchedulerPlugins"
    # No gang: only schedulerName and priorityClass apply.
    NONE = "None"


class SchedulingPolicy(ApiModel):
    """Gang scheduling, as TFJob's runPolicy.schedulingPolicy: a job's pods are placed all
    together or not at all, so two half-placed jobs never hold each other's resources."""

    gang_scheduler: GangScheduler | None = Field(
        default=None,
        description=(
            "Workload (Kubernetes' Workload API, v1.35+ with the GenericWorkload and "
            "GangScheduling feature gates), Volcano, SchedulerPlugins (coscheduling) or None "
            "(no gang). Default: the operator's setting."
        ),
    )
    scheduler_name: str | None = Field(
        default=None,
        min_length=1,
        max_length=253,
        description=(
            "The pods' schedulerName (default: volcano for Volcano, "
            "scheduler-plugins-scheduler for SchedulerPlugins, else the cluster's default)."
        ),
    )
    min_available: int | None = Field(
        default=None,
        ge=1,
        description=(
            "Pods that must be placeable at once before any is bound (default, and at most: "
            "every replica of the job, ps from the shard plan included)."
        ),
    )
    queue: str | None = Field(
        default=None,
        min_length=1,
        max_length=253,
        description="The Volcano queue of the PodGroup (Volcano only).",
    )
    priority_class: str | None = Field(
        default=None,
        min_length=1,
        max_length=253,
        description=(
            "PriorityClass of the gang and of every pod (unless podTemplate.priorityClassName "
            "names one)."
        ),
    )
    schedule_timeout_seconds: int | None = Field(
        default=None,
        ge=1,
        le=86400,
        description=(
            "How long the scheduler may hold part of the gang waiting for the rest "
            "(SchedulerPlugins; the v1.35 Workload API waits a fixed 5 minutes, Volcano has "
            "no such timeout)."
        ),
    )


class RunPolicy(ApiModel):
    """Restarts, deadlines and clean-up."""

    restart_policy: RestartPolicy = Field(
        default=RestartPolicy.ON_FAILURE,
        description=(
            "Never; OnFailure (restart failed replicas); ExitCode (exit codes 1-127 are "
            "permanent, 128+ i.e. signals and OOM kills are retried)."
        ),
    )
    backoff_limit: int = Field(
        default=6, ge=0, le=10000, description="Restarts of the job before it is Failed."
    )
    restart_backoff: RestartBackoff = Field(
        default_factory=RestartBackoff,
        description=(
            "Exponential back-off between restarts of a crashing replica. A worker under "
            "ParameterServer whose pod was deleted or evicted (preempted) is replaced at once."
        ),
    )
    watchdog_seconds: int = Field(
        default=DEFAULT_WATCHDOG_SECONDS,
        ge=10,
        le=86400,
        description=(
            "Seconds without a completed training step (after the restore) before the chief "
            "stops with WatchdogTimeout: some worker or ps is hung. Under ParameterServer "
            "every replica then restarts from the last checkpoint; it counts as one restart. "
            "A checkpoint save must end within it: raise it for a state whose save takes "
            "longer (300 s is 10 GB at 36 MB/s)."
        ),
    )
    active_deadline_seconds: int | None = Field(
        default=None, ge=1, description="Fail the job after this long running."
    )
    ttl_seconds_after_finished: int | None = Field(
        default=None, ge=0, description="Delete the finished job after this long."
    )
    suspend: bool = Field(
        default=False,
        description="true deletes the pods and keeps status and checkpoints; false resumes.",
    )
    success_policy: SuccessPolicy = Field(
        default=SuccessPolicy.CHIEF,
        description=(
            "When the job succeeds (TFJob's successPolicy): Chief, when the chief exits 0 "
            "(without a chief, worker 0); AllWorkers, when every worker has exited 0 (a job "
            "without a chief only). The ps are stopped then."
        ),
    )
    clean_pod_policy: CleanPodPolicy = Field(
        default=CleanPodPolicy.RUNNING,
        description="Pods deleted when the job finishes: All, Running (those still running, e.g. ps), or None.",
    )
    managed_by: str = Field(
        default=MANAGED_BY,
        min_length=1,
        max_length=63,
        description=(
            "The controller that runs this job; any other value makes etj leave it alone "
            "(e.g. for MultiKueue). Fixed at creation: the API server rejects a change."
        ),
    )
    max_memory_on_oom: Quantity | None = Field(
        default=None,
        alias="maxMemoryOnOOM",
        description=(
            "An OOM-killed replica is recreated with 1.5x its memory limit, up to this cap "
            "(default: the operator's setting)."
        ),
    )
    scheduling_policy: SchedulingPolicy | None = Field(
        default=None,
        description=(
            "Gang scheduling (TFJob-compatible): the job's pods are placed all at once or "
            "none is; the gang object is created with the job and owned by it."
        ),
    )
