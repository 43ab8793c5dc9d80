"""The progress record between the trainer and the operator: the leader's metric names, the
status fields they fill, the JSON lines ``etj run`` reads, and the termination message a
leader that trained every step ends with.

The record itself is status.progress / status.evaluation in their wire form (camelCase
field names of ``Progress`` and ``Evaluation``): the trainer writes it as a JSON line
``{"event": EVENT_PROGRESS, "step": ..., "loss": ...}`` on its stdout (``etj run`` reads
the leader's log) and in the completion message; the operator reads either with
etj.core.reconcile.progress (``progress_record``, ``evaluation_record``).

The trainer (and a job's own program through ``etj_trainer.sdk``) serves the gauges named
here on its metrics page; the operator scrapes them into ``status.progress``,
``status.evaluation`` and ``status.export`` (its ``lastDelta`` too) (etj.core.reconcile.progress). The metric names are the contract: a
name changed on one side only would leave the job's progress empty.

Pure: no I/O.
"""

from __future__ import annotations

import json
from typing import Any

from etj.api.trainer_reasons import REASON_COMPLETED

METRIC_STEP = "etj_trainer_step"
METRIC_EXAMPLES_PER_SECOND = "etj_trainer_examples_per_second"
METRIC_LOSS = "etj_trainer_loss"
METRIC_AUC = "etj_trainer_auc"
METRIC_LAST_CHECKPOINT_STEP = "etj_trainer_last_checkpoint_step"
METRIC_BAD_RECORDS = "etj_trainer_bad_records"
# Not read by the operator: how often this trainer process resumed from a checkpoint.
METRIC_RESTARTS_SEEN = "etj_trainer_restarts_seen"
METRIC_EVAL_STEP = "etj_trainer_eval_step"
METRIC_EVAL_AUC = "etj_trainer_eval_auc"
METRIC_EVAL_LOGLOSS = "etj_trainer_eval_logloss"
METRIC_EVAL_EXAMPLES = "etj_trainer_eval_examples"
# Set once, when the leader has trained every step and written its last checkpoint, export
# and completion record: the Unix time it did (status.progress.finishedTime). A leader's
# process leaves right after; one that does not is stopped by the operator
# (etj.core.reconcile.policies.completion.LEADER_EXIT_GRACE_SECONDS).
METRIC_FINISHED_TIME = "etj_trainer_finished_time_seconds"

# The newest serving version (spec.export): its number, the step it holds and the Unix time
# it was moved into place (status.export; 0 until the first).
METRIC_EXPORT_VERSION = "etj_trainer_export_version"
METRIC_EXPORT_STEP = "etj_trainer_export_step"
METRIC_EXPORT_TIME = "etj_trainer_export_time_seconds"

# The newest delta (spec.export.deltaSteps/deltaSeconds): the version it applies to, its
# sequence, the step it holds, the Unix time it was moved into place and the rows it carries
# (status.export.lastDelta; 0 until the first).
METRIC_DELTA_BASE_VERSION = "etj_trainer_delta_base_version"
METRIC_DELTA_SEQUENCE = "etj_trainer_delta_sequence"
METRIC_DELTA_STEP = "etj_trainer_delta_step"
METRIC_DELTA_TIME = "etj_trainer_delta_time_seconds"
METRIC_DELTA_ROWS = "etj_trainer_delta_rows"

# A following job's input position (status.progress.input): the records trained, and the
# last file trained whole as the label ``INPUT_FILE_LABEL`` of a series valued 1.
METRIC_INPUT_RECORDS = "etj_trainer_input_records"
METRIC_INPUT_LAST_FILE = "etj_trainer_input_last_file"
INPUT_FILE_LABEL = "lastFile"
# The progress line's key of the position (status.progress.input's wire form).
INPUT_KEY = "input"

# Metric name -> status.progress field (Progress, by Python name).
PROGRESS_METRICS: dict[str, str] = {
    METRIC_STEP: "step",
    METRIC_EXAMPLES_PER_SECOND: "examples_per_second",
    METRIC_LOSS: "loss",
    METRIC_AUC: "auc",
    METRIC_LAST_CHECKPOINT_STEP: "last_checkpoint_step",
    METRIC_BAD_RECORDS: "bad_records",
}
# Metric name -> status.evaluation field (Evaluation, by Python name).
EVALUATION_METRICS: dict[str, str] = {
    METRIC_EVAL_STEP: "step",
    METRIC_EVAL_AUC: "auc",
    METRIC_EVAL_LOGLOSS: "logloss",
    METRIC_EVAL_EXAMPLES: "examples",
}

# Metric name -> status.export field (ExportStatus, by Python name; the time is Unix
# seconds on the page, RFC 3339 in the status).
EXPORT_METRICS: dict[str, str] = {
    METRIC_EXPORT_VERSION: "last_version",
    METRIC_EXPORT_STEP: "step",
    METRIC_EXPORT_TIME: "time",
}

# Metric name -> status.export.lastDelta field (DeltaStatus, by Python name; the time as
# for EXPORT_METRICS).
DELTA_METRICS: dict[str, str] = {
    METRIC_DELTA_BASE_VERSION: "base_version",
    METRIC_DELTA_SEQUENCE: "sequence",
    METRIC_DELTA_STEP: "step",
    METRIC_DELTA_TIME: "time",
    METRIC_DELTA_ROWS: "rows",
}

# The ``event`` of the trainer's JSON lines that carry the record.
EVENT_PROGRESS = "progress"
EVENT_EVALUATION = "evaluation"
# A serving version moved into place: status.export's wire fields (lastVersion, step, time,
# location).
EVENT_EXPORTED = "exported"
# A delta moved into place: status.export.lastDelta's wire fields (baseVersion, sequence,
# step, time, rows); a failed one.
EVENT_DELTA_EXPORTED = "deltaExported"
EVENT_DELTA_FAILED = "deltaFailed"

# Only in the trainer's progress lines (not in status): how often this process resumed.
RESTARTS_SEEN_KEY = "restartsSeen"

# Only in the trainer's progress lines and metrics (not in the termination message): the
# dynamic tables' stats per table, under this key.
DYNAMIC_TABLES_KEY = "dynamicTables"

# A dynamic table's stats (``ShardedDynamicTable.stats``): its gauges and what they say.
DYNAMIC_GAUGES = (
    ("rowsUsed", "etj_trainer_dynamic_rows_used", "Pool rows holding an admitted id."),
    ("capacity", "etj_trainer_dynamic_capacity", "Pool rows of the table (dynamic.capacity)."),
    ("admitted", "etj_trainer_dynamic_admitted", "Ids given a row so far."),
    ("evicted", "etj_trainer_dynamic_evicted", "Rows freed as stale so far."),
    (
        "fallbackLookups",
        "etj_trainer_dynamic_fallback_lookups",
        "Training lookups of ids without a row (read the fallback).",
    ),
)

# Only in the trainer's progress lines and metrics (not in the termination message): the
# disk tables' (model.embeddings[].storage.disk) stats per table, under this key
# (``etj.api.disk.disk_table_stats`` computes them from the kernels' counters).
DISK_TABLES_KEY = "diskTables"

# A disk table's stats: its gauges and what they say. The rates are of the interval since
# the trainer's report before (the first report: since its tables were made).
DISK_GAUGES = (
    (
        "cacheHitRate",
        "etj_trainer_disk_cache_hit_rate",
        "Looked-up rows found in the RAM cache, of the rows looked up since the last report.",
    ),
    ("cachedRows", "etj_trainer_disk_cached_rows", "Rows in the RAM cache now."),
    ("cacheRows", "etj_trainer_disk_cache_rows", "Rows the RAM cache holds at most."),
    ("rows", "etj_trainer_disk_rows", "Rows of the table in its files on the ps' disks."),
    ("diskBytes", "etj_trainer_disk_bytes", "Bytes of the table's files (rows with slots)."),
    (
        "rowsReadPerSecond",
        "etj_trainer_disk_rows_read_per_second",
        "Rows read from the files per second (cache misses of rows written before).",
    ),
    (
        "rowsWrittenPerSecond",
        "etj_trainer_disk_rows_written_per_second",
        "Rows written to the files per second (dirty rows evicted, restores).",
    ),
    ("lookups", "etj_trainer_disk_lookups", "Rows looked up since the tables were made."),
    (
        "lookupMisses",
        "etj_trainer_disk_lookup_misses",
        "Looked-up rows not in the cache since the tables were made.",
    ),
)

# A warm start (spec.warmStart) as the trainer carried it out: one series per table of the
# job and each table it left behind, labelled with the decision (``WarmStartTable``'s wire
# fields ``name``, ``action``, ``optimizerState``, ``reason``), and the source checkpoint's
# step. The operator copies them into status.warmStart when it could not decide them
# itself (a location source: it cannot read the checkpoint); the ``warmStarted`` line says
# the same for ``etj run``.
METRIC_WARM_START_TABLE = "etj_trainer_warm_start_table"
METRIC_WARM_START_SOURCE_STEP = "etj_trainer_warm_start_source_step"
WARM_START_TABLE_LABELS = ("name", "action", "optimizerState", "reason")
EVENT_WARM_STARTED = "warmStarted"

COMPLETION_PREFIX = f"{REASON_COMPLETED}: "


def progress_fields(
    step: int,
    *,
    loss: float | None,
    auc: float | None,
    examples_per_second: float,
    last_checkpoint_step: int | None,
    bad_records: int | None = None,
) -> dict[str, Any]:
    """One progress record as the trainer and the SDK report it (status.progress's wire
    names; a None is left out when written)."""
    return {
        "step": int(step),
        "loss": loss,
        "auc": auc,
        "examplesPerSecond": round(examples_per_second, 1),
        "lastCheckpointStep": last_checkpoint_step,
        "badRecords": bad_records,
    }


def completion_json(
    progress: dict[str, Any],
    evaluation: dict[str, Any] | None = None,
    export: dict[str, Any] | None = None,
) -> str:
    """What follows ``REASON_COMPLETED`` in the leader's termination message once it trained
    every step: the final progress (and held-out evaluation, and last serving version),
    status field names."""
    doc: dict[str, Any] = {"progress": progress}
    if evaluation is not None:
        doc["evaluation"] = evaluation
    if export is not None:
        doc["export"] = export
    return json.dumps(doc, separators=(",", ":"))


def completion_record(message: str | None) -> dict[str, Any] | None:
    """The ``{"progress": ..., "evaluation": ...}`` of a termination message
    ``REASON_COMPLETED: <completion_json>``; None for any other message or a malformed one."""
    if not message or not message.startswith(COMPLETION_PREFIX):
        return None
    try:
        doc = json.loads(message[len(COMPLETION_PREFIX) :])
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None
