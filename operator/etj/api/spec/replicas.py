"""``spec.replicas``: how many replicas of each role, and what each gets.

Pure: no I/O, no environment, no kopf or Kubernetes client.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from etj.api.base import ApiModel, Quantity
from etj.api.podtemplate import PodTemplate
from etj.api.roles import Role
from etj.api.rules import cel_extra
from etj.api.spec.run_policy import RestartPolicy

_cel = cel_extra


class ResourceRequirements(ApiModel):
    """Compute resources of one replica, as in a Pod's container ``resources``."""

    requests: dict[str, Quantity] | None = Field(
        default=None, description="Minimum resources (cpu, memory, ...) the scheduler reserves."
    )
    limits: dict[str, Quantity] | None = Field(
        default=None,
        description="Maximum resources; exceeding the memory limit OOM-kills the replica.",
    )

    def memory(self) -> Quantity | None:
        """The memory limit, else the memory request, else None."""
        for source in (self.limits, self.requests):
            if source and "memory" in source:
                return source["memory"]
        return None


# The fields every role's spec has (ReplicaSpec and PsSpec), declared once.
RoleTemplate = Annotated[
    PodTemplate | None,
    Field(
        description=(
            "A Pod template merged over this role's Pods, e.g. to run your own TensorFlow "
            "program (the trainer container's command and args) with sidecars and volumes."
        ),
    ),
]
RoleRestartPolicy = Annotated[
    RestartPolicy | None,
    Field(
        description=(
            "This role's restart policy (a TFJob replica's restartPolicy): Never, OnFailure "
            "or ExitCode, as runPolicy.restartPolicy, which it overrides for this role "
            "(default: that one)."
        ),
    ),
]


class ReplicaSpec(ApiModel):
    """How many replicas of one role, and what each gets."""

    replicas: int = Field(default=1, ge=0, le=1024, description="Number of replicas of this role.")
    resources: ResourceRequirements | None = Field(
        default=None, description="Resources of each replica of this role."
    )
    template: RoleTemplate = None
    restart_policy: RoleRestartPolicy = None


class ChiefSpec(ReplicaSpec):
    """The chief: the coordinator under ParameterServer, worker 0's peer under MultiWorkerMirrored."""

    replicas: int = Field(default=1, ge=0, le=1, description="0 or 1 chief.")


# Most ps a job may have (``etj.core.planner`` says why); the schema's maximum for both fields.
MAX_PS = 1024


class PsSpec(ApiModel):
    """Parameter servers: they hold the embedding table shards."""

    replicas: int | Literal["auto"] = Field(
        default="auto",
        description=(
            "Number of parameter servers, or 'auto' for the fewest whose memory holds the "
            "shard plan."
        ),
        json_schema_extra={"x-etj-int-or-auto": True, "minimum": 1, "maximum": MAX_PS},
    )
    max_replicas: int = Field(
        default=64,
        ge=1,
        le=MAX_PS,
        description="Upper bound for 'auto'.",
    )
    resources: ResourceRequirements | None = Field(
        default=None,
        description=(
            "Resources of each ps. Its memory limit (else request) is the memory budget the "
            "planner fits shards into; the memory request is raised to what the plan needs."
        ),
    )
    template: RoleTemplate = None
    restart_policy: RoleRestartPolicy = None

    @field_validator("replicas")
    @classmethod
    def _replicas_non_negative(cls, v: int | str) -> int | str:
        if isinstance(v, int) and v < 1:
            raise ValueError(
                "must be 'auto' or an integer >= 1 (leave replicas.ps out for a job without ps)"
            )
        if isinstance(v, int) and v > MAX_PS:
            raise ValueError(f"must be 'auto' or an integer <= {MAX_PS}")
        return v


class ReplicasSpec(ApiModel):
    """Replicas per role."""

    model_config = ApiModel.model_config | {
        "json_schema_extra": _cel(
            (
                "(has(self.chief) && self.chief.replicas > 0) || !has(self.worker) || self.worker.replicas > 0",
                "a job needs a chief or at least one worker",
            ),
        )
    }

    chief: ChiefSpec | None = Field(
        default=None, description="The chief (default: one; required by ParameterServer)."
    )
    worker: ReplicaSpec = Field(
        default_factory=lambda: ReplicaSpec(replicas=2),
        description="The workers (kubectl scale etj/NAME --replicas=N sets their count).",
        # The API server fills it in as the model does, so the scale subresource reads the
        # count a job that leaves it out runs.
        json_schema_extra={"default": {"replicas": 2}},
    )
    ps: PsSpec | None = Field(
        default=None,
        description="Parameter servers (ParameterServer strategy only; default: auto).",
    )
    evaluator: ReplicaSpec | None = Field(
        default=None,
        description="An optional side-car evaluator (0 or 1) reading checkpoints.",
    )

    @model_validator(mode="after")
    def _someone_trains(self) -> ReplicasSpec:
        if (self.chief is None or self.chief.replicas == 0) and self.worker.replicas == 0:
            raise ValueError("a job needs a chief or at least one worker")
        return self

    @field_validator("evaluator")
    @classmethod
    def _one_evaluator(cls, v: ReplicaSpec | None) -> ReplicaSpec | None:
        if v is not None and v.replicas > 1:
            raise ValueError("at most one evaluator is supported")
        return v

    def restart_policy_of(self, role: Role, default: RestartPolicy) -> RestartPolicy:
        """``role``'s restart policy: its own, else ``default`` (runPolicy.restartPolicy)."""
        own = {
            Role.CHIEF: self.chief,
            Role.WORKER: self.worker,
            Role.PS: self.ps,
            Role.EVALUATOR: self.evaluator,
        }[role]
        return own.restart_policy if own is not None and own.restart_policy else default
