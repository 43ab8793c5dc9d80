"""The ``spec`` of an EmbeddingTrainingJob: what a user writes, one module per section.

These models are the single source of truth for the API: the CRD's OpenAPI schema is
generated from them (``etj.core.crd``), ``etj validate`` uses them, and the trainer reads the
model/data/training parts from the rendered trainer config. Validation that a schema can
express lives in the section's module as field constraints (or as CEL rules under
``x-kubernetes-validations`` for cross-field rules) so the API server rejects a bad job
before the operator sees it; checks only code can make (does the plan fit?) live in
``etj.core.validation``.

The sections: ``strategy``, ``replicas``, ``model``, ``data``, ``training`` (and sharding), ``checkpoint``,
``export`` (serving versions and TensorBoard),
``run_policy``, ``pod`` (pod overrides and placement) and ``job`` (the whole spec and the
rules that join its sections). This package re-exports every public name, and those of
``etj.api.sizing`` (optimizers, dtypes and the bytes of a table row: outside the package,
as ``etj.api.warmstart``, which the spec imports, needs them too), so ``from etj.api.spec
import X`` reads any of them.

Pure: no I/O, no environment, no kopf or Kubernetes client.
"""

from etj.api.sizing import (
    DTYPE_BYTES,
    OPTIMIZER_SLOTS,
    ROW_SLOT_OPTIMIZERS,
    SLOT_DTYPE_BYTES,
    Dtype,
    Optimizer,
    largest_variable_row_bytes,
    slot_bytes_per_row,
    table_row_bytes,
)
from etj.api.spec.checkpoint import (
    CHECKPOINT_NOT_SHARED,
    GCS_CREDENTIALS_MOUNT,
    CheckpointSpec,
    CheckpointStorage,
    SecretKey,
)
from etj.api.spec.data import (
    UNSUPPORTED_SCHEME_REASON,
    UNSUPPORTED_SCHEMES,
    DataSpec,
    FileData,
    FileFormat,
    FollowFiles,
    KafkaData,
    SyntheticData,
    ValidationData,
)
from etj.api.spec.export import ExportSpec, TensorBoardSpec
from etj.api.spec.job import (
    CHIEF_RULES,
    FOLLOW_STRATEGY_RULES,
    IMMUTABLE_MANAGED_BY,
    EmbeddingTrainingJobSpec,
)
from etj.api.spec.model import EmbeddingTable, ModelSpec
from etj.api.spec.pod import EnvVar, Placement, PodTemplateOverrides
from etj.api.spec.replicas import (
    MAX_PS,
    ChiefSpec,
    PsSpec,
    ReplicaSpec,
    ReplicasSpec,
    ResourceRequirements,
)
from etj.api.spec.run_policy import (
    CleanPodPolicy,
    GangScheduler,
    RestartBackoff,
    RestartPolicy,
    RunPolicy,
    SchedulingPolicy,
    SuccessPolicy,
)
from etj.api.spec.strategy import Strategy
from etj.api.spec.training import (
    DEFAULT_STEPS,
    DEFAULT_STEPS_PER_EXECUTION,
    MAX_STEPS_PER_EXECUTION,
    ShardingSpec,
    TrainingSpec,
    step_limit,
)

__all__ = [
    "CHECKPOINT_NOT_SHARED",
    "CHIEF_RULES",
    "DEFAULT_STEPS",
    "DEFAULT_STEPS_PER_EXECUTION",
    "DTYPE_BYTES",
    "FOLLOW_STRATEGY_RULES",
    "GCS_CREDENTIALS_MOUNT",
    "IMMUTABLE_MANAGED_BY",
    "MAX_PS",
    "MAX_STEPS_PER_EXECUTION",
    "OPTIMIZER_SLOTS",
    "ROW_SLOT_OPTIMIZERS",
    "SLOT_DTYPE_BYTES",
    "UNSUPPORTED_SCHEMES",
    "UNSUPPORTED_SCHEME_REASON",
    "CheckpointSpec",
    "CheckpointStorage",
    "ChiefSpec",
    "CleanPodPolicy",
    "DataSpec",
    "Dtype",
    "EmbeddingTable",
    "EmbeddingTrainingJobSpec",
    "EnvVar",
    "ExportSpec",
    "FileData",
    "FileFormat",
    "FollowFiles",
    "GangScheduler",
    "KafkaData",
    "ModelSpec",
    "Optimizer",
    "Placement",
    "PodTemplateOverrides",
    "PsSpec",
    "ReplicaSpec",
    "ReplicasSpec",
    "ResourceRequirements",
    "RestartBackoff",
    "RestartPolicy",
    "RunPolicy",
    "SchedulingPolicy",
    "SecretKey",
    "ShardingSpec",
    "Strategy",
    "SuccessPolicy",
    "SyntheticData",
    "TensorBoardSpec",
    "TrainingSpec",
    "ValidationData",
    "largest_variable_row_bytes",
    "slot_bytes_per_row",
    "step_limit",
    "table_row_bytes",
]
