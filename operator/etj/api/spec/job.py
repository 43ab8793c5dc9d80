"""``EmbeddingTrainingJobSpec``: the whole spec, and the rules that join its sections (the
chief rules, epochs and data, data schemes, the immutable ``managedBy``).

Pure: no I/O, no environment, no kopf or Kubernetes client.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from etj.api.base import ApiModel
from etj.api.constants import MANAGED_BY
from etj.api.disk import DISK_SPEC_RULES
from etj.api.rules import Rule, cel_extra, check_rules
from etj.api.spec.checkpoint import CheckpointSpec
from etj.api.spec.data import (
    UNSUPPORTED_SCHEME_REASON,
    UNSUPPORTED_SCHEMES,
    DataSpec,
    FileFormat,
)
from etj.api.spec.export import ExportSpec, TensorBoardSpec
from etj.api.spec.model import ModelSpec
from etj.api.spec.pod import Placement, PodTemplateOverrides
from etj.api.spec.replicas import ReplicasSpec
from etj.api.spec.run_policy import RunPolicy, SuccessPolicy
from etj.api.spec.strategy import Strategy
from etj.api.spec.training import ShardingSpec, TrainingSpec
from etj.api.warmstart import WARM_START_SPEC_RULES, WarmStartSpec

_cel = cel_extra

_EPOCH_RULES = (
    Rule(
        "!has(self.training) || !has(self.training.epochs) || (has(self.data) && has(self.data.source) && self.data.source == 'files')",
        "training.epochs needs data.source files (synthetic data has no epochs)",
        lambda s: s.training.epochs is None or s.data.source == "files",
    ),
    # (and the other rules joining data with the rest of the spec)
    Rule(
        "!has(self.data) || !has(self.data.files) || !has(self.data.files.format) || self.data.files.format != 'parquet' || has(self.model.features)",
        "data.files.format parquet needs model.features (the columns to read)",
        lambda s: (
            s.data.files is None
            or s.data.files.format != FileFormat.PARQUET
            or bool(s.model.features)
        ),
    ),
    Rule(
        "!has(self.data) || !has(self.data.files) || !has(self.data.files.format) || self.data.files.format != 'parquet' || !has(self.strategy) || self.strategy != 'ParameterServer'",
        "data.files.format parquet cannot be read under strategy ParameterServer (its workers "
        "cannot run Python readers): use MultiWorkerMirrored or convert the files to TFRecord",
        lambda s: (
            s.data.files is None
            or s.data.files.format != FileFormat.PARQUET
            or s.strategy != Strategy.PARAMETER_SERVER
        ),
    ),
)

_FOLLOWS = "has(self.data) && has(self.data.files) && has(self.data.files.follow)"


def _follows(s: EmbeddingTrainingJobSpec) -> bool:
    return s.data.files is not None and s.data.files.follow is not None


def _training_processes(s: EmbeddingTrainingJobSpec) -> int:
    """Processes that train under MultiWorkerMirrored: the chief (none by default) and the
    workers."""
    return (_chief_count(s) or 0) + s.replicas.worker.replicas


# Rules of a job that follows its files (data.files.follow). FOLLOW_STRATEGY_RULES hold for
# the strategy Auto chooses too (etj.core.validation checks them again after the plan).
FOLLOW_STRATEGY_RULES = (
    Rule(
        f"!({_FOLLOWS}) || self.strategy != 'MultiWorkerMirrored' || "
        "((has(self.replicas) && has(self.replicas.chief) ? self.replicas.chief.replicas : 0) + "
        "(has(self.replicas) && has(self.replicas.worker) ? self.replicas.worker.replicas : 2)) == 1",
        "data.files.follow under MultiWorkerMirrored takes one training process (a chief or "
        "one worker): its collectives need every worker to run the same steps, and the files "
        "that land do not divide into equal shares; use strategy ParameterServer for more",
        lambda s: (
            not _follows(s)
            or s.strategy != Strategy.MULTI_WORKER_MIRRORED
            or _training_processes(s) == 1
        ),
    ),
    Rule(
        "!has(self.data) || !has(self.data.kafka) || self.strategy != 'MultiWorkerMirrored' || "
        "((has(self.replicas) && has(self.replicas.chief) ? self.replicas.chief.replicas : 0) + "
        "(has(self.replicas) && has(self.replicas.worker) ? self.replicas.worker.replicas : 2)) == 1",
        "data.kafka under MultiWorkerMirrored takes one training process (a chief or one "
        "worker): its collectives need every worker to run the same steps, and the messages "
        "that arrive do not divide into equal shares; use strategy ParameterServer for more",
        lambda s: (
            s.data.kafka is None
            or s.strategy != Strategy.MULTI_WORKER_MIRRORED
            or _training_processes(s) == 1
        ),
    ),
)
_FOLLOW_RULES = (
    Rule(
        f"!({_FOLLOWS}) || !has(self.training) || !has(self.training.epochs)",
        "training.epochs cannot be used with data.files.follow (a followed location has no "
        "end to count passes over); give training.steps or leave both out",
        lambda s: not _follows(s) or s.training.epochs is None,
    ),
    *FOLLOW_STRATEGY_RULES,
    Rule(
        "!has(self.data) || !has(self.data.kafka) || has(self.model.features)",
        "data.kafka needs model.features (each message is one row of the job's feature schema)",
        lambda s: s.data.kafka is None or bool(s.model.features),
    ),
)

_DATA_SCHEME_RULES = (
    Rule(
        "!has(self.data) || !has(self.data.files) || !(self.data.files.pattern.startsWith('s3://') || self.data.files.pattern.startsWith('hdfs://'))",
        f"data.files.pattern: {UNSUPPORTED_SCHEME_REASON}; use gs:// or a ReadOnlyMany volume "
        "(data.files.volume)",
        lambda s: s.data.files is None or not s.data.files.pattern.startswith(UNSUPPORTED_SCHEMES),
    ),
    Rule(
        "!has(self.data) || !has(self.data.validation) || !(self.data.validation.pattern.startsWith('s3://') || self.data.validation.pattern.startsWith('hdfs://'))",
        f"data.validation.pattern: {UNSUPPORTED_SCHEME_REASON}; use gs:// or a ReadOnlyMany "
        "volume (data.files.volume)",
        lambda s: (
            s.data.validation is None
            or not s.data.validation.pattern.startswith(UNSUPPORTED_SCHEMES)
        ),
    ),
)


def _managed_by(obj: str) -> str:
    """CEL: the effective runPolicy.managedBy of ``obj`` (the default when not given)."""
    return (
        f"(has({obj}.runPolicy) && has({obj}.runPolicy.managedBy) "
        f"? {obj}.runPolicy.managedBy : '{MANAGED_BY}')"
    )


# The Kubernetes convention (Job, JobSet): managedBy is fixed at creation, so two controllers
# never take turns on one job. A transition rule on the spec, not on the field: a rule on
# the field runs only when old and new both have it, so a job created without runPolicy
# could gain a managedBy later.
IMMUTABLE_MANAGED_BY = {
    "rule": f"{_managed_by('self')} == {_managed_by('oldSelf')}",
    "message": "runPolicy.managedBy is immutable: it is fixed when the job is created",
    "fieldPath": ".runPolicy.managedBy",
}


def _workers_run_own_program(spec: EmbeddingTrainingJobSpec) -> bool:
    template = spec.replicas.worker.template
    return template is not None and template.runs_own_program


def _chief_count(spec: EmbeddingTrainingJobSpec) -> int | None:
    """The chiefs the job asks for; None: the default (one under ParameterServer)."""
    chief = spec.replicas.chief
    return chief.replicas if chief is not None else None


# Who may lead a job. etj's own trainer under ParameterServer is ParameterServerStrategy's
# coordinator model: the chief runs the training loop, so it needs exactly one. A job whose
# workers run their own command follows TFJob's rules instead (dist-mnist's between-graph
# replication: PS + Worker and no Chief, worker 0 is the chief; etj.core.tfconfig's leader rule).
# CEL cannot see into a template's Pod spec (it preserves unknown fields), so the API server
# admits a chief-less ParameterServer job whose workers have a template at all, and the
# model checks that the template gives a command or an image (etj validate, and the
# operator marks the job Failed/InvalidSpec otherwise).
CHIEF_RULES = (
    Rule(
        "!(self.strategy == 'ParameterServer' && has(self.replicas) && has(self.replicas.chief) && self.replicas.chief.replicas != 1 && !(self.replicas.chief.replicas == 0 && has(self.replicas.worker) && has(self.replicas.worker.template)))",
        "strategy ParameterServer with etj's trainer needs exactly one chief "
        "(ParameterServerStrategy's coordinator runs the training loop); a job whose workers "
        "run their own command (replicas.worker.template) may have none, as a TFJob: worker 0 "
        "is then the chief",
        lambda s: (
            s.strategy != Strategy.PARAMETER_SERVER
            or _chief_count(s) in (None, 1)
            or (_chief_count(s) == 0 and _workers_run_own_program(s))
        ),
    ),
    Rule(
        "!(has(self.runPolicy) && has(self.runPolicy.successPolicy) && self.runPolicy.successPolicy == 'AllWorkers') || (has(self.replicas) && has(self.replicas.chief) ? self.replicas.chief.replicas == 0 : self.strategy == 'MultiWorkerMirrored')",
        "runPolicy.successPolicy AllWorkers is for a job without a chief (as in TFJob, a "
        "chief's exit decides the job): set replicas.chief.replicas to 0 or leave "
        "successPolicy out",
        lambda s: (
            s.run_policy.success_policy != SuccessPolicy.ALL_WORKERS
            or (
                _chief_count(s) == 0
                if _chief_count(s) is not None
                else s.strategy == Strategy.MULTI_WORKER_MIRRORED
            )
        ),
    ),
)


class EmbeddingTrainingJobSpec(ApiModel):
    """The desired training job."""

    model_config = ApiModel.model_config | {
        "json_schema_extra": _cel(
            *_EPOCH_RULES,
            *_DATA_SCHEME_RULES,
            *_FOLLOW_RULES,
            (
                "!(self.strategy == 'MultiWorkerMirrored' && has(self.replicas) && has(self.replicas.ps))",
                "replicas.ps is only for strategy ParameterServer (or Auto); remove it for MultiWorkerMirrored",
            ),
            *CHIEF_RULES,
            *WARM_START_SPEC_RULES,
            *DISK_SPEC_RULES,
            (
                "!(self.strategy == 'ParameterServer' && has(self.replicas) && has(self.replicas.worker) && self.replicas.worker.replicas < 1)",
                "strategy ParameterServer needs at least one worker",
            ),
            extra=[IMMUTABLE_MANAGED_BY],
        )
    }

    strategy: Strategy = Field(
        default=Strategy.AUTO,
        description=(
            "ParameterServer (tables sharded over ps), MultiWorkerMirrored (tables mirrored on "
            "every worker), or Auto (chosen from the table sizes)."
        ),
    )
    image: str | None = Field(
        default=None, min_length=1, description="Trainer image (default: the operator's setting)."
    )
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] | None = Field(
        default=None, description="Image pull policy of every replica."
    )
    replicas: ReplicasSpec = Field(
        default_factory=ReplicasSpec,
        description="Replicas per role.",
        json_schema_extra={"default": {}},  # so replicas.worker's default applies
    )
    model: ModelSpec = Field(description="The model to train.")
    data: DataSpec = Field(default_factory=DataSpec, description="Training data.")
    training: TrainingSpec = Field(
        default_factory=TrainingSpec, description="Training loop settings."
    )
    sharding: ShardingSpec = Field(
        default_factory=ShardingSpec, description="Embedding sharding over parameter servers."
    )
    checkpoint: CheckpointSpec = Field(default_factory=CheckpointSpec, description="Checkpointing.")
    export: ExportSpec | None = Field(
        default=None,
        description=(
            "Serving versions written while the job trains (everySteps or everySeconds), "
            "for TensorFlow Serving: <checkpoint directory>/serving/<version>/, the last "
            "keep kept. Without it: only the final export at the end."
        ),
    )
    tensorboard: TensorBoardSpec | None = Field(
        default=None,
        description=(
            "Where the leader's TensorBoard summaries go (default: <checkpoint "
            "directory>/tensorboard)."
        ),
    )
    run_policy: RunPolicy = Field(
        default_factory=RunPolicy, description="Restarts, deadlines, clean-up."
    )
    pod_template: PodTemplateOverrides | None = Field(
        default=None, description="Overrides merged into every replica's Pod."
    )
    placement: Placement = Field(
        default_factory=Placement,
        description="Spreading replicas over nodes; how fast a lost node's replicas are replaced.",
    )
    warm_start: WarmStartSpec | None = Field(
        default=None,
        description=(
            "Start from another job's checkpoint (fromJob, the newest Succeeded job of a "
            "selector, or a location): its tables and tower restored into this job's layout, "
            "then trained on this job's data. A restart of this job resumes from its own "
            "checkpoints once it has one."
        ),
    )

    @model_validator(mode="after")
    def _strategy_replicas(self) -> EmbeddingTrainingJobSpec:
        check_rules(self, _EPOCH_RULES)
        r = self.replicas
        if self.strategy == Strategy.MULTI_WORKER_MIRRORED and r.ps is not None:
            raise ValueError(
                "replicas.ps is only for strategy ParameterServer (or Auto); "
                "remove it for MultiWorkerMirrored"
            )
        check_rules(self, CHIEF_RULES)
        if self.strategy == Strategy.PARAMETER_SERVER and r.worker.replicas < 1:
            raise ValueError("strategy ParameterServer needs at least one worker")
        check_rules(self, _DATA_SCHEME_RULES)
        check_rules(self, _FOLLOW_RULES)
        check_rules(self, WARM_START_SPEC_RULES)
        check_rules(self, DISK_SPEC_RULES)
        return self
