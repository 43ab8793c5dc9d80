"""``spec.data``: where training examples come from (synthetic, files or a Kafka topic,
held-out files), and the storage schemes TensorFlow cannot read.

Pure: no I/O, no environment, no kopf or Kubernetes client.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from etj.api.base import ApiModel, inline_enum
from etj.api.rules import Rule, cel_extra, check_rules

_cel = cel_extra


class SyntheticData(ApiModel):
    """Generated data: Zipf-distributed ids with a learnable click signal."""

    zipf_exponent: float = Field(
        default=1.1,
        gt=1.0,
        le=5.0,
        description="Skew of id frequencies (Zipf exponent, > 1).",
    )
    seed: int = Field(default=0, ge=0, description="Seed of the generator.")


class FollowFiles(ApiModel):
    """Follow the location of ``data.files.pattern``: files that land under it are trained
    as they arrive, each once, in the order of their names."""

    poll_seconds: int = Field(
        default=60,
        ge=1,
        le=86_400,
        description="Seconds between two listings of the pattern while no new file is there.",
    )
    stop_after_idle_seconds: int | None = Field(
        default=None,
        ge=1,
        description=(
            "End the job (Succeeded) when no new file has landed for this long; without it "
            "the job follows until it is suspended or deleted (or reaches training.steps)."
        ),
    )


class FileFormat(StrEnum):
    """How the files of ``data.files`` are read (``data.files.format``)."""

    TFRECORD = "tfrecord"
    CSV = "csv"
    PARQUET = "parquet"


_FOLLOW_FORMATS = (FileFormat.TFRECORD, FileFormat.CSV)

_FILE_RULES = (
    Rule(
        "!has(self.follow) || !has(self.format) || self.format != 'parquet'",
        "data.files.follow reads tfrecord or csv files (parquet's Python reader cannot take "
        "files that land while it reads)",
        lambda f: f.follow is None or f.format in _FOLLOW_FORMATS,
    ),
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
    Rule(
        "!has(self.nullValues) || (has(self.format) && self.format != 'tfrecord')",
        "data.files.nullValues reads csv or parquet files (tfrecord values are typed: a "
        "missing value is an absent feature)",
        lambda f: f.null_values is None or f.format != FileFormat.TFRECORD,
    ),
)


class FileData(ApiModel):
    """Training data read from files (a mounted volume or any TensorFlow filesystem path)."""

    model_config = ApiModel.model_config | {"json_schema_extra": _cel(*_FILE_RULES)}

    pattern: str = Field(
        min_length=1, description="Glob of the input files, e.g. /data/train-*.tfrecord."
    )
    format: Annotated[FileFormat, inline_enum(FileFormat)] = Field(
        default=FileFormat.TFRECORD,
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
            "csv: the quote character (RFC 4180: a field quoted whole may hold the delimiter "
            'and line breaks, "" inside it is one quote), or none for files that use " as '
            "data."
        ),
    )
    compression: Literal["auto", "none", "gzip"] = Field(
        default="auto", description="auto (gzip when a file name ends in .gz), none or gzip."
    )
    null_values: list[Annotated[str, Field(min_length=1, max_length=64)]] | None = Field(
        default=None,
        max_length=256,
        description=(
            "csv and parquet: tokens that mean a missing value (compared with the field's "
            "surrounding spaces removed, in every column), e.g. [NA, 'N/A', 'null']: read as "
            "an empty field, so a dense feature takes its default, an id the reserved row, "
            "and a label is a bad record (see maxBadRecords)."
        ),
    )

    @model_validator(mode="after")
    def _rules(self) -> FileData:
        check_rules(self, _FILE_RULES)
        return self

    label_key: str = Field(default="label", min_length=1, description="Name of the label column.")
    follow: FollowFiles | None = Field(
        default=None,
        description=(
            "Follow the pattern's location: train the files that land under it as they "
            "arrive (ordered by name; a file must be complete when its name appears: write "
            "it aside and rename it into place), each exactly once across restarts (the "
            "last file trained is saved in the checkpoint with the tables). "
            "training.steps may then be left out."
        ),
    )
    volume: dict[str, Any] | None = Field(
        default=None,
        description="A Pod volume source holding the files, mounted read-only at /data.",
    )


# A Kafka topic name (the broker's own rule: at most 249 of these characters).
KAFKA_TOPIC_PATTERN = r"^[a-zA-Z0-9._-]{1,249}$"
# host:port[,host:port...] (librdkafka's bootstrap.servers).
KAFKA_SERVERS_PATTERN = r"^[^,\s:]+:[0-9]{1,5}(,[^,\s:]+:[0-9]{1,5})*$"


class KafkaData(ApiModel):
    """Training data read from a Kafka topic as it arrives (the online path): each message
    is one row of the job's feature schema (``model.features``), delimited text. The
    offsets trained are saved in the checkpoint with the tables, never taken from the
    consumer group's commits: after any failure the job resumes from the offsets of the
    checkpoint it restored."""

    bootstrap_servers: str = Field(
        pattern=KAFKA_SERVERS_PATTERN,
        max_length=4096,
        description="The brokers to bootstrap from: host:port, comma-separated.",
    )
    topic: str = Field(pattern=KAFKA_TOPIC_PATTERN, description="The topic to train from.")
    consumer_group: str | None = Field(
        default=None,
        min_length=1,
        max_length=249,
        description=(
            "The consumers' group.id (default: etj-<job name>). Offsets are never committed "
            "to it nor read from it: every partition is assigned explicitly and read from "
            "the checkpoint's offsets (the earliest one on a first start)."
        ),
    )
    format: Literal["csv"] = Field(
        default="csv",
        description="csv: each message is one row of delimited text (no header).",
    )
    delimiter: str = Field(
        default=",", min_length=1, max_length=1, description="csv: the field delimiter."
    )
    columns: list[Annotated[str, Field(min_length=1, max_length=128)]] | None = Field(
        default=None,
        max_length=4096,
        description=(
            "csv: the fields of a message, in order (default: the columns of "
            "model.features, in the order they are declared)."
        ),
    )
    quote: Literal['"', "none"] = Field(
        default='"',
        description='csv: the quote character (RFC 4180), or none for rows that use " as data.',
    )
    stop_after_idle_seconds: int | None = Field(
        default=None,
        ge=1,
        description=(
            "End the job (Succeeded) when no message has arrived for this long while a "
            "broker answered (time with no broker answering, e.g. one restarting, does not "
            "count); without it the job trains until it is suspended or deleted (or reaches "
            "training.steps)."
        ),
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


_DATA_RULES = (
    Rule(
        "self.source != 'files' || has(self.files)",
        "data.files is required when source is files",
        lambda d: d.source != "files" or d.files is not None,
    ),
    Rule(
        "!has(self.validation) || has(self.files)",
        "data.validation needs data.files (its format and columns)",
        lambda d: d.validation is None or d.files is not None,
    ),
    Rule(
        "!has(self.kafka) || !has(self.files)",
        "data.kafka and data.files are exclusive: a job trains from one source",
        lambda d: d.kafka is None or d.files is None,
    ),
    Rule(
        "self.source != 'kafka' || has(self.kafka)",
        "data.kafka is required when source is kafka",
        lambda d: d.source != "kafka" or d.kafka is not None,
    ),
    Rule(
        "!has(self.kafka) || self.source == 'kafka'",
        "data.kafka needs data.source kafka",
        lambda d: d.kafka is None or d.source == "kafka",
    ),
)


class DataSpec(ApiModel):
    """Where training examples come from."""

    model_config = ApiModel.model_config | {"json_schema_extra": _cel(*_DATA_RULES)}

    source: Literal["synthetic", "files", "kafka"] = Field(
        default="synthetic", description="synthetic (generated), files or kafka."
    )
    synthetic: SyntheticData | None = Field(
        default=None, description="Settings of the synthetic generator."
    )
    files: FileData | None = Field(default=None, description="Settings of file input.")
    kafka: KafkaData | None = Field(
        default=None,
        description=(
            "Settings of Kafka input (a topic followed as it arrives; needs model.features)."
        ),
    )
    validation: ValidationData | None = Field(
        default=None,
        description="Held-out data for AUC and log-loss after each checkpoint (files only).",
    )
    max_bad_records: int = Field(
        default=0,
        ge=0,
        description=(
            "Records that do not parse which training may skip (counted in status.progress); "
            "0 stops the job at the first with DataError: <file>:<line>: <what> "
            "(<topic>/<partition>@<offset> for Kafka)."
        ),
    )

    @model_validator(mode="after")
    def _rules(self) -> DataSpec:
        check_rules(self, _DATA_RULES)
        return self


# Why s3:// and hdfs:// are refused (checkpoint.uri, data patterns): TensorFlow 2.21 builds
# in local paths and gs:// only; the others moved to tensorflow-io in TF 2.6, and
# tensorflow-io's last release (0.37) pins tensorflow<2.17.
UNSUPPORTED_SCHEMES = ("s3://", "hdfs://")
UNSUPPORTED_SCHEME_REASON = (
    "s3:// and hdfs:// are not built into TensorFlow 2.21 (they moved to tensorflow-io, "
    "whose last release supports TensorFlow 2.16 at most)"
)
