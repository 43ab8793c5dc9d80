"""The ``spec`` of an EmbeddingTrainingJob: what a user writes.

These models are the single source of truth for the API: the CRD's OpenAPI schema is
generated from them (``etj.core.crd``), ``etj validate`` uses them, and the trainer reads the
model/data/training parts from the rendered trainer config. Validation that a schema can
express lives here as field constraints (or as CEL rules under ``x-kubernetes-validations``
for cross-field rules) so the API server rejects a bad job before the operator sees it;
checks only code can make (does the plan fit?) live in ``etj.core.validation``.

Pure: no I/O, no environment, no kopf or Kubernetes client.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from etj.api.architectures import (
    ARCHITECTURE_RULES,
    FIRST_ORDER,
    Architecture,
    DcnV2Spec,
    DeepFmSpec,
    DlrmSpec,
    WideDeepSpec,
    linear_table_name,
)
from etj.api.base import ApiModel, Quantity
from etj.api.constants import MANAGED_BY
from etj.api.custom import CUSTOM_RULES, CustomModel
from etj.api.dynamic import DYNAMIC_MODEL_RULES, DynamicTable, check_key_space
from etj.api.features import MODEL_FEATURE_RULES, Feature, FeatureKind
from etj.api.podtemplate import PodTemplate
from etj.api.rules import Rule, cel_extra, check_rules
from etj.api.warmstart import WARM_START_SPEC_RULES, WarmStartSpec

_cel = cel_extra


class Strategy(StrEnum):
    PARAMETER_SERVER = "ParameterServer"
    MULTI_WORKER_MIRRORED = "MultiWorkerMirrored"
    AUTO = "Auto"


class Optimizer(StrEnum):
    SGD = "sgd"
    ADAGRAD = "adagrad"
    ROWWISE_ADAGRAD = "rowwiseAdagrad"
    FTRL = "ftrl"
    ADAM = "adam"


# Optimizer slot variables of a table: each lives next to its table shard, so it counts
# against the ps memory. A slot is table-shaped ([rows, dimension]) except row-wise
# Adagrad's one accumulator per row ([rows]).
OPTIMIZER_SLOTS: dict[str, int] = {
    "sgd": 0,
    "adagrad": 1,
    "rowwiseAdagrad": 1,
    "ftrl": 2,
    "adam": 2,
}
ROW_SLOT_OPTIMIZERS = frozenset({"rowwiseAdagrad"})

DTYPE_BYTES: dict[str, int] = {"float32": 4, "bfloat16": 2, "float16": 2}
# Optimizer slots are float32 whatever the table's dtype: a bfloat16/float16 table is
# updated in float32 and its rows rounded stochastically to the storage dtype.
SLOT_DTYPE_BYTES = 4


def slot_bytes_per_row(optimizer: str, dimension: int) -> int:
    """Bytes of one slot (each of an optimizer's is the same size) for one table row."""
    if OPTIMIZER_SLOTS[optimizer] == 0:
        return 0
    per_row = 1 if optimizer in ROW_SLOT_OPTIMIZERS else dimension
    return per_row * SLOT_DTYPE_BYTES


def table_row_bytes(dtype: str, optimizer: str, dimension: int) -> int:
    """Bytes of one table row with its optimizer slots: ``dimension x dtype`` for the row,
    ``slots x slot_bytes_per_row`` for its optimizer state (float32)."""
    slots = OPTIMIZER_SLOTS[optimizer] * slot_bytes_per_row(optimizer, dimension)
    return dimension * DTYPE_BYTES[dtype] + slots


def largest_variable_row_bytes(dtype: str, optimizer: str, dimension: int) -> int:
    """Bytes per row of the largest variable of a table shard: the shard or one slot."""
    return max(dimension * DTYPE_BYTES[dtype], slot_bytes_per_row(optimizer, dimension))


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


class ReplicaSpec(ApiModel):
    """How many replicas of one role, and what each gets."""

    replicas: int = Field(default=1, ge=0, le=1024, description="Number of replicas of this role.")
    resources: ResourceRequirements | None = Field(
        default=None, description="Resources of each replica of this role."
    )
    template: PodTemplate | None = Field(
        default=None,
        description=(
            "A Pod template merged over this role's Pods, e.g. to run your own TensorFlow "
            "program (the trainer container's command and args) with sidecars and volumes."
        ),
    )


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
    template: PodTemplate | None = Field(
        default=None,
        description=(
            "A Pod template merged over this role's Pods, e.g. to run your own TensorFlow "
            "program (the trainer container's command and args) with sidecars and volumes."
        ),
    )

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


class EmbeddingTable(ApiModel):
    """One embedding table: one categorical feature's id → vector map."""

    name: str = Field(
        min_length=1,
        max_length=63,
        pattern=r"^[a-z][a-z0-9_]*$",
        description="Table name; also the input feature's name (lowercase, digits, '_').",
    )
    vocabulary_size: int = Field(
        ge=1,
        le=2**40,
        description="Number of rows (distinct ids); ids are taken modulo this size.",
    )
    dimension: int = Field(ge=1, le=8192, description="Embedding vector width.")
    dtype: Literal["float32", "bfloat16", "float16"] = Field(
        default="float32",
        description=(
            "Storage dtype of the table. Its optimizer slots are float32 whatever the dtype: "
            "a bfloat16/float16 table is updated in float32 and its rows are rounded "
            "stochastically to the dtype (unbiased: small steps are not lost)."
        ),
    )
    combiner: Literal["sum", "mean"] = Field(
        default="mean", description="How the vectors of a multi-valued feature are combined."
    )
    ids_per_example: int = Field(
        default=1,
        ge=1,
        le=1024,
        description="Ids per example for this feature (its valency).",
    )
    optimizer: Optimizer | None = Field(
        default=None,
        description=(
            "Optimizer for this table only (default: training.optimizer); rowwiseAdagrad "
            "keeps one accumulator per row instead of one per value."
        ),
    )
    dynamic: DynamicTable | None = Field(
        default=None,
        description=(
            "Make the table collisionless: ids get rows of a pool of dynamic.capacity rows "
            "as they are admitted; vocabularySize rows are then the fallback of the others."
        ),
    )


class ModelSpec(ApiModel):
    """The CTR model: embedding tables, dense features and a tower (an architecture)."""

    model_config = ApiModel.model_config | {
        "json_schema_extra": _cel(
            *MODEL_FEATURE_RULES, *ARCHITECTURE_RULES, *CUSTOM_RULES, *DYNAMIC_MODEL_RULES
        )
    }

    embeddings: list[EmbeddingTable] = Field(
        min_length=1,
        max_length=256,
        description="The embedding tables, one per categorical feature; names are unique.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    dense_features: int = Field(
        default=13,
        ge=0,
        le=10000,
        description="Number of dense inputs (ignored when features are given: their dense ones count).",
    )
    hidden_units: list[Annotated[int, Field(ge=1, le=65536)]] = Field(
        default_factory=lambda: [256, 128],
        max_length=16,
        description=(
            "Widths of the MLP's hidden layers (dlrm: of the top MLP; dcnV2: of the deep "
            "part, which may be empty)."
        ),
    )
    architecture: Architecture = Field(
        default=Architecture.DNN,
        description=(
            "The tower: dnn (an MLP), wideDeep, deepFM, dcnV2 or dlrm; settings of the "
            "last four in the field of the same name."
        ),
    )
    wide_deep: WideDeepSpec | None = Field(
        default=None, description="wideDeep settings (architecture wideDeep only)."
    )
    deep_fm: DeepFmSpec | None = Field(
        default=None, alias="deepFM", description="deepFM settings (architecture deepFM only)."
    )
    dcn_v2: DcnV2Spec | None = Field(
        default=None, alias="dcnV2", description="dcnV2 settings (architecture dcnV2 only)."
    )
    dlrm: DlrmSpec | None = Field(
        default=None, description="dlrm settings (architecture dlrm only)."
    )
    custom: CustomModel | None = Field(
        default=None,
        description=(
            "Your own tower instead of the architecture's: etj imports module, calls "
            "factory(parameters) once and then tower(embeddings, dense, training) -> logits "
            "[batch]. Only with the default architecture (dnn); hiddenUnits is then unused."
        ),
    )

    @field_validator("embeddings")
    @classmethod
    def _unique_names(cls, v: list[EmbeddingTable]) -> list[EmbeddingTable]:
        seen: set[str] = set()
        for t in v:
            if t.name in seen:
                raise ValueError(f"table name {t.name!r} appears twice; names must be unique")
            seen.add(t.name)
        return v

    features: list[Feature] | None = Field(
        default=None,
        max_length=512,
        description=(
            "The input columns (label, dense, categorical) and how each becomes model input. "
            "Without it the files use etj's own layout (<table>_<i> id columns, dense_<i>)."
        ),
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )

    @field_validator("features")
    @classmethod
    def _unique_features(cls, v: list[Feature] | None) -> list[Feature] | None:
        names = [f.name for f in v or []]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"feature {twice[0]!r} appears twice; names must be unique")
        return v

    @model_validator(mode="after")
    def _feature_rules(self) -> ModelSpec:
        check_rules(self, MODEL_FEATURE_RULES)
        check_rules(self, ARCHITECTURE_RULES)
        check_rules(self, CUSTOM_RULES)
        check_rules(self, DYNAMIC_MODEL_RULES)
        check_key_space(self)
        if self.architecture == Architecture.DLRM and self.interaction_inputs < 2:
            raise ValueError(
                "architecture dlrm takes dot products between the embedding inputs and the "
                "bottom MLP's output (present when there are dense features): it needs at "
                "least two of them"
            )
        return self

    @property
    def interaction_inputs(self) -> int:
        """Vectors DLRM's dot interaction takes: one per embedding input, one for the
        bottom MLP when there are dense features."""
        if self.features is None:
            inputs = len(self.embeddings)
        else:
            inputs = sum(1 for f in self.features if f.table is not None)
        return inputs + (1 if self.dense_inputs else 0)

    @property
    def tables(self) -> list[EmbeddingTable]:
        """Every embedding table the trainer creates, in creation (and plan) order:
        ``embeddings``, then, for wideDeep and deepFM, the first-order table (dimension 1,
        same rows, combiner and dtype) of each of them."""
        if self.architecture not in FIRST_ORDER:
            return list(self.embeddings)
        settings = self.wide_deep if self.architecture == Architecture.WIDE_DEEP else self.deep_fm
        optimizer = settings.linear_optimizer if settings is not None else None
        return list(self.embeddings) + [
            t.model_copy(
                update={
                    "name": linear_table_name(t.name),
                    "dimension": 1,
                    "optimizer": Optimizer(optimizer) if optimizer else t.optimizer,
                }
            )
            for t in self.embeddings
        ]

    @property
    def dense_inputs(self) -> int:
        """Width of the dense input: the dense features, else ``denseFeatures``."""
        if self.features is None:
            return self.dense_features
        return sum(1 for f in self.features if f.kind == FeatureKind.DENSE)


class SyntheticData(ApiModel):
    """Generated data: Zipf-distributed ids with a learnable click signal."""

    zipf_exponent: float = Field(
        default=1.1,
        gt=1.0,
        le=5.0,
        description="Skew of id frequencies (Zipf exponent, > 1).",
    )
    seed: int = Field(default=0, ge=0, description="Seed of the generator.")


_FILE_RULES = (
    Rule(
        "!has(self.header) || self.header || has(self.columns)",
        "data.files.columns must name the columns when header is false",
        lambda f: f.header or bool(f.columns),
    ),
    Rule(
        "!has(self.delimiter) || self.delimiter != '\"' || (has(self.quote) && self.quote == 'none')",
        "data.files.delimiter '\"' needs quote: none (the quote cannot also be the delimiter)",
        lambda f: f.delimiter != '"' or f.quote == "none",
    ),
)
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
            s.data.files is None or s.data.files.format != "parquet" or bool(s.model.features)
        ),
    ),
    Rule(
        "!has(self.data) || !has(self.data.files) || !has(self.data.files.format) || self.data.files.format != 'parquet' || !has(self.strategy) || self.strategy != 'ParameterServer'",
        "data.files.format parquet cannot be read under strategy ParameterServer (its workers "
        "cannot run Python readers): use MultiWorkerMirrored or convert the files to TFRecord",
        lambda s: (
            s.data.files is None
            or s.data.files.format != "parquet"
            or s.strategy != "ParameterServer"
        ),
    ),
)


class FileData(ApiModel):
    """Training data read from files (a mounted volume or any TensorFlow filesystem path)."""

    model_config = ApiModel.model_config | {"json_schema_extra": _cel(*_FILE_RULES)}

    pattern: str = Field(
        min_length=1, description="Glob of the input files, e.g. /data/train-*.tfrecord."
    )
    format: Literal["tfrecord", "csv", "parquet"] = Field(
        default="tfrecord",
        description=(
            "tfrecord (tf.train.Example records), csv (delimited text: any one-character "
            "delimiter, e.g. tab for Criteo) or parquet (needs model.features; list columns "
            "feed multi-valued features; not under strategy ParameterServer)."
        ),
    )
    delimiter: str = Field(
        default=",", min_length=1, max_length=1, description="csv: the field delimiter."
    )
    header: bool = Field(
        default=True, description="csv: whether the first line of every file names the columns."
    )
    columns: list[Annotated[str, Field(min_length=1, max_length=128)]] | None = Field(
        default=None,
        max_length=4096,
        description="csv without a header: the column names, in file order.",
    )
    quote: Literal['"', "none"] = Field(
        default='"',
        description=(
            "csv: the quote character (RFC 4180: a field quoted whole may hold the delimiter, "
            '"" inside it is one quote; a quoted field ends on its line), or none for files '
            'that use " as data.'
        ),
    )
    compression: Literal["auto", "none", "gzip"] = Field(
        default="auto", description="auto (gzip when a file name ends in .gz), none or gzip."
    )

    @model_validator(mode="after")
    def _rules(self) -> FileData:
        check_rules(self, _FILE_RULES)
        return self

    label_key: str = Field(default="label", min_length=1, description="Name of the label column.")
    volume: dict[str, Any] | None = Field(
        default=None,
        description="A Pod volume source holding the files, mounted read-only at /data.",
    )


class ValidationData(ApiModel):
    """Held-out files scored after each checkpoint (AUC and log-loss in status.evaluation)."""

    pattern: str = Field(
        min_length=1,
        description="Glob of the held-out files; same format and columns as data.files.",
    )
    max_examples: int = Field(
        default=100_000,
        ge=1,
        description="Examples scored per evaluation (the first ones, the same every time).",
    )


class DataSpec(ApiModel):
    """Where training examples come from."""

    model_config = ApiModel.model_config | {
        "json_schema_extra": _cel(
            (
                "self.source != 'files' || has(self.files)",
                "data.files is required when source is files",
            ),
            (
                "!has(self.validation) || has(self.files)",
                "data.validation needs data.files (its format and columns)",
            ),
        )
    }

    source: Literal["synthetic", "files"] = Field(
        default="synthetic", description="synthetic (generated) or files."
    )
    synthetic: SyntheticData | None = Field(
        default=None, description="Settings of the synthetic generator."
    )
    files: FileData | None = Field(default=None, description="Settings of file input.")
    validation: ValidationData | None = Field(
        default=None,
        description="Held-out data for AUC and log-loss after each checkpoint (files only).",
    )
    max_bad_records: int = Field(
        default=0,
        ge=0,
        description=(
            "Records that do not parse which training may skip (counted in status.progress); "
            "0 stops the job at the first with DataError: <file>:<line>: <what>."
        ),
    )

    @model_validator(mode="after")
    def _files_given(self) -> DataSpec:
        if self.source == "files" and self.files is None:
            raise ValueError("data.files is required when data.source is 'files'")
        if self.validation is not None and self.files is None:
            raise ValueError("data.validation needs data.files (its format and columns)")
        return self


# stepsPerExecution when a job leaves it out, by resolved strategy: under ParameterServer
# each scheduled function costs its worker ~25 ms of dispatch besides its steps (timed in
# benchmarks/trainer_throughput.py): 10 steps a closure ran ~a fifth slower than 50 there,
# and 50 is only where its chunks start (TrainerConfig.sized_by_time: then sized by time).
# MultiWorkerMirrored runs its chunks in the workers' own loop: nothing to amortise.
DEFAULT_STEPS_PER_EXECUTION = {Strategy.PARAMETER_SERVER: 50, Strategy.MULTI_WORKER_MIRRORED: 10}
# The most a chunk runs, given or sized by time.
MAX_STEPS_PER_EXECUTION = 10_000


class TrainingSpec(ApiModel):
    """The training loop."""

    batch_size_per_replica: int = Field(
        default=1024, ge=1, le=1 << 20, description="Examples per step per worker."
    )
    steps: int = Field(
        default=1000, ge=1, description="Total training steps (unless epochs is given)."
    )
    epochs: int | None = Field(
        default=None,
        ge=1,
        le=100000,
        description=(
            "Train for this many passes over data.files instead of steps: the steps are "
            "epochs x records / (batchSizePerReplica x workers), counted before training. "
            "Under ParameterServer an epoch is that many examples, not each record exactly "
            "once (workers run at their own pace; a failed worker's chunk may be re-run)."
        ),
    )
    optimizer: Optimizer = Field(
        default=Optimizer.ADAGRAD,
        description=(
            "sgd, adagrad, rowwiseAdagrad (one accumulator per table row, the mean of the "
            "row's squared gradients: a float32 table needs half the memory of adagrad's; the "
            "dense layers then use adagrad), ftrl, or adam (a lazy Adam that only updates the "
            "rows in the batch)."
        ),
    )
    learning_rate: float = Field(default=0.05, gt=0, le=100, description="Learning rate.")
    steps_per_execution: int | None = Field(
        default=None,
        ge=1,
        le=MAX_STEPS_PER_EXECUTION,
        description=(
            "Steps run per scheduled function (fewer round-trips to the workers). Default "
            "under ParameterServer, where each scheduled function costs its worker a "
            "dispatch to the ps (~25 ms): sized as training goes so each takes about a "
            "second on its worker (50 steps until the first are timed); 10 otherwise."
        ),
    )
    seed: int = Field(default=0, ge=0, description="Seed for initialisers and the data order.")


class ShardingSpec(ApiModel):
    """How embedding tables are split over parameter servers."""

    max_shard_bytes: Quantity = Field(
        default="512Mi",
        description="Largest shard, counting its optimizer slots.",
    )
    ps_memory_headroom: float = Field(
        default=1.3,
        ge=1.0,
        le=10.0,
        description="Factor over the shard bytes a ps requests (for copies during updates and checkpoints).",
    )
    ps_base_memory: Quantity = Field(
        default="768Mi",
        description="Memory of a ps process before any shard (the TensorFlow runtime).",
    )
    default_ps_memory: Quantity = Field(
        default="4Gi",
        description="Memory budget of a ps when replicas.ps.resources gives none.",
    )
    mirrored_max_bytes: Quantity = Field(
        default="1Gi",
        description="strategy Auto picks MultiWorkerMirrored when all tables fit in this; else ParameterServer.",
    )


# Why s3:// and hdfs:// are refused (checkpoint.uri, data patterns): TensorFlow 2.21 builds
# in local paths and gs:// only; the others moved to tensorflow-io in TF 2.6, and
# tensorflow-io's last release (0.37) pins tensorflow<2.17.
UNSUPPORTED_SCHEMES = ("s3://", "hdfs://")
UNSUPPORTED_SCHEME_REASON = (
    "s3:// and hdfs:// are not built into TensorFlow 2.21 (they moved to tensorflow-io, "
    "whose last release supports TensorFlow 2.16 at most)"
)
# Where a checkpoint.credentialsSecret is mounted (GOOGLE_APPLICATION_CREDENTIALS names the
# key file under it).
GCS_CREDENTIALS_MOUNT = "/var/run/secrets/etj/gcs"


class CheckpointStorage(ApiModel):
    """A ReadWriteMany claim etj creates for the job's checkpoints."""

    storage_class_name: str | None = Field(
        default=None,
        min_length=1,
        max_length=253,
        description=(
            "A StorageClass that can provision ReadWriteMany volumes (NFS, EFS, Filestore, "
            "Azure Files, CephFS). Default: the operator's setting, else the cluster's default."
        ),
    )
    size: Quantity = Field(default="10Gi", description="The claim's requested size.")
    retain: bool = Field(
        default=False,
        description=(
            "false: the claim is owned by the job and deleted with it; true: it outlives the "
            "job (no owner reference, labelled training.etj.dev/job-name) for a later job."
        ),
    )


class SecretKey(ApiModel):
    """One key of a Secret in the job's namespace."""

    name: str = Field(min_length=1, max_length=253, description="The Secret's name.")
    key: str = Field(default="key.json", min_length=1, description="The key holding the file.")


_CHECKPOINT_RULES = (
    Rule(
        "(has(self.uri) ? 1 : 0) + (has(self.volume) ? 1 : 0) + (has(self.storage) ? 1 : 0) <= 1",
        "checkpoint: set at most one of uri, volume and storage",
        lambda c: sum(x is not None for x in (c.uri, c.volume, c.storage)) <= 1,
    ),
    Rule(
        "!has(self.uri) || !(self.uri.startsWith('s3://') || self.uri.startsWith('hdfs://'))",
        f"checkpoint.uri: {UNSUPPORTED_SCHEME_REASON}; use gs://bucket/prefix or a "
        "ReadWriteMany volume (checkpoint.storage)",
        lambda c: c.uri is None or not c.uri.startswith(UNSUPPORTED_SCHEMES),
    ),
    Rule(
        "!has(self.uri) || self.uri.startsWith('gs://') || self.uri.startsWith('/')",
        "checkpoint.uri must be gs://bucket/prefix or an absolute path that every replica "
        "sees (a shared volume its pod template mounts)",
        lambda c: c.uri is None or c.uri.startswith(("gs://", "/")),
    ),
    Rule(
        "!has(self.uri) || !(self.uri == '/tmp' || self.uri.startsWith('/tmp/'))",
        "checkpoint.uri: /tmp is each replica's own (an emptyDir etj mounts): use a path on a "
        "volume every replica mounts",
        lambda c: c.uri is None or not (c.uri == "/tmp" or c.uri.startswith("/tmp/")),
    ),
)


class CheckpointSpec(ApiModel):
    """Where and how often training state is saved.

    A job with more than one pod needs checkpoints every pod sees (each ps writes its
    own shards, the chief the index, every worker restores): ``storage``, ``uri`` or a
    shared ``volume``. One pod alone may keep the default, an emptyDir."""

    model_config = ApiModel.model_config | {"json_schema_extra": _cel(*_CHECKPOINT_RULES)}

    uri: str | None = Field(
        default=None,
        min_length=1,
        max_length=1024,
        description=(
            "gs://bucket/prefix, or an absolute path on a volume every replica mounts: "
            "checkpoints go to <uri>/<namespace>/<job name>. s3:// and hdfs:// are not supported "
            "(not built into TensorFlow 2.21)."
        ),
    )
    volume: dict[str, Any] | None = Field(
        default=None,
        description=(
            "A Pod volume source (e.g. {persistentVolumeClaim: {claimName: ckpt}}) mounted on "
            "every replica; a job with several pods needs a ReadWriteMany claim (not an "
            "emptyDir or a hostPath). Default (no uri, volume or storage): an emptyDir, for "
            "one-pod jobs only."
        ),
    )
    storage: CheckpointStorage | None = Field(
        default=None,
        description=(
            "A ReadWriteMany PersistentVolumeClaim <job>-checkpoints etj creates, kept across "
            "restarts and suspend."
        ),
    )
    credentials_secret: SecretKey | None = Field(
        default=None,
        description=(
            "A Secret holding a Google service-account key for gs:// paths (checkpoints and "
            "data): mounted read-only, GOOGLE_APPLICATION_CREDENTIALS names it. Leave it out "
            "with workload identity."
        ),
    )
    mount_path: str = Field(
        default="/var/lib/etj/checkpoints",
        pattern=r"^/.*",
        description="Where the volume (or the claim of storage) is mounted in every replica.",
    )
    every_steps: int = Field(default=1000, ge=1, description="Checkpoint interval in steps.")
    keep: int = Field(default=3, ge=1, le=1000, description="Checkpoints kept.")

    @model_validator(mode="after")
    def _one_place(self) -> CheckpointSpec:
        check_rules(self, _CHECKPOINT_RULES)
        return self

    @property
    def shared(self) -> bool:
        """A place several pods may share was chosen (a volume's kind is checked later)."""
        return self.uri is not None or self.storage is not None or self.volume is not None


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
        default=600,
        ge=10,
        le=86400,
        description=(
            "Seconds without a completed training step (after the restore) before the chief "
            "stops with WatchdogTimeout: some worker or ps is hung. Under ParameterServer "
            "every replica then restarts from the last checkpoint; it counts as one restart."
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


class EnvVar(ApiModel):
    """An environment variable added to every replica."""

    name: str = Field(
        min_length=1, pattern=r"^[-._a-zA-Z][-._a-zA-Z0-9]*$", description="Variable name."
    )
    value: str | None = Field(default=None, description="Literal value.")
    value_from: dict[str, Any] | None = Field(
        default=None, description="A Kubernetes EnvVarSource."
    )


class PodTemplateOverrides(ApiModel):
    """Fields merged into every replica's Pod."""

    labels: dict[str, str] | None = Field(default=None, description="Extra labels.")
    annotations: dict[str, str] | None = Field(default=None, description="Extra annotations.")
    node_selector: dict[str, str] | None = Field(default=None, description="Node selector.")
    tolerations: list[dict[str, Any]] | None = Field(default=None, description="Tolerations.")
    affinity: dict[str, Any] | None = Field(default=None, description="Affinity rules.")
    priority_class_name: str | None = Field(default=None, description="Priority class.")
    service_account_name: str | None = Field(
        default=None, description="Service account of the pods."
    )
    image_pull_secrets: list[dict[str, Any]] | None = Field(
        default=None, description="Image pull secrets."
    )
    env: list[EnvVar] | None = Field(default=None, description="Extra environment variables.")


# The one line that refuses checkpoints a multi-pod job's pods cannot share, said by
# ``etj.api.storage.sharing_problems`` after planning (which resolves strategy Auto and
# the ps count) in ``etj validate`` and the operator; not in the model itself, which
# ``etj run`` (one host, one work directory) and the trainer also parse.
CHECKPOINT_NOT_SHARED = (
    "checkpoint: this job reads and writes checkpoints from several pods (each ps its "
    "shards, the chief the index, every worker restores) and the default emptyDir is each "
    "pod's own: set checkpoint.storage (a ReadWriteMany claim etj creates), checkpoint.uri "
    "(gs://bucket/prefix, or a path every pod mounts) or checkpoint.volume (a ReadWriteMany "
    "claim)"
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


class Placement(ApiModel):
    """Where replicas go, and how fast a lost node's replicas are replaced."""

    spread: bool = Field(
        default=True,
        description=(
            "Spread the replicas of each role over nodes (a topologySpreadConstraint on "
            "kubernetes.io/hostname, ScheduleAnyway), so one node's loss takes one ps, not "
            "all. A role template's topologySpreadConstraints replace it."
        ),
    )
    node_loss_seconds: int | None = Field(
        default=None,
        ge=0,
        le=3600,
        description=(
            "How long a replica stays bound to a node that is NotReady or unreachable before "
            "it is evicted and replaced (its tolerationSeconds; Kubernetes' default is 300). "
            "Default: the operator's setting (30)."
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
            (
                "!(self.strategy == 'MultiWorkerMirrored' && has(self.replicas) && has(self.replicas.ps))",
                "replicas.ps is only for strategy ParameterServer (or Auto); remove it for MultiWorkerMirrored",
            ),
            *CHIEF_RULES,
            *WARM_START_SPEC_RULES,
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
        check_rules(self, WARM_START_SPEC_RULES)
        return self
