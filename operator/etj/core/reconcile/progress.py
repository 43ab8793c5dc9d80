"""Read the trainer's progress and held-out evaluation out of its Prometheus metrics text.
Pure (prometheus_client's text parser only; no I/O).

The trainer's chief serves the gauges ``etj.api.progress`` names (``etj_trainer_step``,
``_loss``, ...: status.progress; after a held-out evaluation ``etj_trainer_eval_step``,
``_eval_auc``, ...: status.evaluation; one series per dynamic table, labelled ``table``:
status.progress.dynamicTables, which its progress line carries as ``{table: {rowsUsed:
...}}`` under ``DYNAMIC_TABLES_KEY``; likewise one per disk table: status.progress.diskTables,
``DISK_TABLES_KEY``).

The newest serving version (spec.export) is three gauges, ``etj_trainer_export_version``,
``_export_step`` and ``_export_time_seconds`` (status.export; ``exported`` lines for ``etj
run``); the newest delta five more, ``etj_trainer_delta_*`` (status.export.lastDelta;
``deltaExported`` lines).

A chief that trained every step says the same once more in its termination message
(``REASON_COMPLETED``): the final values, which the last scrape may have missed.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

from prometheus_client.parser import text_string_to_metric_families
from pydantic import ValidationError

from etj.api.progress import (
    DELTA_METRICS,
    DISK_GAUGES,
    DISK_TABLES_KEY,
    DYNAMIC_GAUGES,
    DYNAMIC_TABLES_KEY,
    EVALUATION_METRICS,
    EXPORT_METRICS,
    INPUT_FILE_LABEL,
    METRIC_FINISHED_TIME,
    METRIC_INPUT_LAST_FILE,
    METRIC_INPUT_RECORDS,
    METRIC_WARM_START_SOURCE_STEP,
    METRIC_WARM_START_TABLE,
    PROGRESS_METRICS,
    WARM_START_TABLE_LABELS,
    completion_record,
)
from etj.api.status import (
    DeltaStatus,
    DiskTableStatus,
    DynamicTableStatus,
    Evaluation,
    ExportStatus,
    InputPositionStatus,
    Progress,
)
from etj.api.warmstart import WarmStartTable

_PROGRESS = PROGRESS_METRICS
_EVALUATION = EVALUATION_METRICS
_INTS = {"step", "last_checkpoint_step", "bad_records", "examples"}
# Per kind of table, its stats' gauges and status model (``{table: {stat: value}}`` in a
# progress line, one series per table on the page).
_TABLE_KINDS: dict[str, tuple[tuple[tuple[str, str, str], ...], Any]] = {
    DYNAMIC_TABLES_KEY: (DYNAMIC_GAUGES, DynamicTableStatus),
    DISK_TABLES_KEY: (DISK_GAUGES, DiskTableStatus),
}


def _families(text: str) -> list[Any]:
    try:
        return list(text_string_to_metric_families(text))
    except ValueError:
        return []  # not a metrics page (a proxy's error page, a half-written response)


def _values(families: list[Any], fields: dict[str, str]) -> dict[str, float | int]:
    """The finite values of the named gauges (the first sample of each)."""
    out: dict[str, float | int] = {}
    for family in families:
        field = fields.get(family.name)
        if field is None or not family.samples:
            continue
        value = float(family.samples[0].value)
        if math.isnan(value) or math.isinf(value):
            continue
        out[field] = int(value) if field in _INTS else round(value, 6)
    return out


def _table_series(families: list[Any], kind: str) -> dict[str, dict[str, float]]:
    """The gauges of a kind of table (``_TABLE_KINDS``) as the progress line has them:
    ``{table: {stat: value}}``."""
    stats = {metric: stat for stat, metric, _ in _TABLE_KINDS[kind][0]}
    tables: dict[str, dict[str, float]] = {}
    for family in families:
        stat = stats.get(family.name)
        if stat is None:
            continue
        for sample in family.samples:
            table = sample.labels.get("table")
            if table and math.isfinite(sample.value):
                tables.setdefault(table, {})[stat] = sample.value
    return tables


def table_stats(doc: Any, kind: str) -> list[Any] | None:
    """status.progress.dynamicTables or .diskTables (``kind``: their progress line key), by
    name, from ``{table: {stat: ..., ...}}`` (a progress line's entry, or the metrics page's
    series); a table with a stat missing or bad is left out (not the progress); None
    without any table."""
    if not isinstance(doc, dict):
        return None
    gauges, model = _TABLE_KINDS[kind]
    out = []
    for name, stats in sorted(doc.items()):
        if not isinstance(stats, dict):
            continue
        try:
            out.append(model(name=name, **{stat: stats.get(stat) for stat, *_ in gauges}))
        except ValidationError:
            continue
    return out or None


def dynamic_tables(doc: Any) -> list[DynamicTableStatus] | None:
    """status.progress.dynamicTables (``table_stats``)."""
    return table_stats(doc, DYNAMIC_TABLES_KEY)


def disk_tables(doc: Any) -> list[DiskTableStatus] | None:
    """status.progress.diskTables (``table_stats``)."""
    return table_stats(doc, DISK_TABLES_KEY)


def parse_progress(text: str, now: str) -> Progress | None:
    """Progress from a metrics page; None when it has no step."""
    families = _families(text)
    values = _values(families, _PROGRESS)
    if "step" not in values:
        return None
    if not values.get("bad_records"):
        values.pop("bad_records", None)
    return Progress(
        update_time=now,
        dynamic_tables=dynamic_tables(_table_series(families, DYNAMIC_TABLES_KEY)),
        disk_tables=disk_tables(_table_series(families, DISK_TABLES_KEY)),
        finished_time=_finished_time(families),
        input=_input_position(families),
        **values,
    )


def _input_position(families: list[Any]) -> InputPositionStatus | None:
    """A following job's position from its gauges; None for a job that does not follow."""
    records: int | None = None
    last_file: str | None = None
    for family in families:
        if family.name == METRIC_INPUT_RECORDS and family.samples:
            value = float(family.samples[0].value)
            records = int(value) if math.isfinite(value) and value >= 0 else None
        elif family.name == METRIC_INPUT_LAST_FILE:
            named = [s.labels.get(INPUT_FILE_LABEL) for s in family.samples if s.value == 1]
            last_file = named[0] if named else None
    # Every trainer serves the records gauge (0 unless it follows): nothing trained, no position.
    if last_file is None and not records:
        return None
    return InputPositionStatus(last_file=last_file, records=records)


def _finished_time(families: list[Any]) -> str | None:
    """``METRIC_FINISHED_TIME`` (Unix seconds, 0 until set) as RFC 3339; None when unset."""
    for family in families:
        if family.name == METRIC_FINISHED_TIME and family.samples:
            value = float(family.samples[0].value)
            if math.isfinite(value) and value > 0:
                return _rfc3339(value)
    return None


def parse_evaluation(text: str, now: str) -> Evaluation | None:
    """The last held-out evaluation from a metrics page; None before the first one."""
    values = _values(_families(text), _EVALUATION)
    # The gauges read 0 until the first evaluation has scored examples.
    if not values.get("examples") or "step" not in values:
        return None
    return Evaluation(update_time=now, **values)


def _rfc3339(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_export(text: str, now: str) -> ExportStatus | None:
    """The newest serving version from a metrics page; None before the first one (its
    gauges read 0 until then). The location is the operator's to add (it knows the job)."""
    families = _families(text)
    values = _gauges(families, EXPORT_METRICS)
    version, step = values.get("last_version", 0), values.get("step")
    if version < 1 or step is None or step < 0:
        return None
    when = values.get("time")
    return ExportStatus(
        last_version=int(version),
        step=int(step),
        time=_rfc3339(when) if when and when > 0 else None,
        last_delta=_last_delta(_gauges(families, DELTA_METRICS)),
        update_time=now,
    )


def _gauges(families: list[Any], fields: dict[str, str]) -> dict[str, float]:
    """The finite first sample of each gauge named in ``fields``, by field."""
    values: dict[str, float] = {}
    for family in families:
        field = fields.get(family.name)
        if field is not None and family.samples:
            value = float(family.samples[0].value)
            if math.isfinite(value):
                values[field] = value
    return values


def _last_delta(values: dict[str, float]) -> DeltaStatus | None:
    """status.export.lastDelta from the delta gauges; None before the first delta (0)."""
    base, sequence = values.get("base_version", 0), values.get("sequence", 0)
    step, rows = values.get("step"), values.get("rows")
    if base < 1 or sequence < 1 or step is None or step < 0 or rows is None or rows < 0:
        return None
    when = values.get("time")
    return DeltaStatus(
        base_version=int(base),
        sequence=int(sequence),
        step=int(step),
        time=_rfc3339(when) if when and when > 0 else None,
        rows=int(rows),
    )


def export_record(doc: Any, now: str) -> ExportStatus | None:
    """status.export from an export record (an ``exported`` line, a completion message's
    ``export``: ExportStatus's wire fields); None when it is not one."""
    if not isinstance(doc, dict):
        return None
    aliases = {f.alias or n for n, f in ExportStatus.model_fields.items()}
    fields = {k: v for k, v in doc.items() if k in aliases and k != "updateTime"}
    try:
        return ExportStatus.model_validate({**fields, "updateTime": now})
    except ValidationError:
        return None


def delta_record(doc: Any) -> DeltaStatus | None:
    """status.export.lastDelta from a ``deltaExported`` line (DeltaStatus's wire fields and
    more); None when it is not one."""
    if not isinstance(doc, dict):
        return None
    aliases = {f.alias or n for n, f in DeltaStatus.model_fields.items()}
    try:
        return DeltaStatus.model_validate({k: v for k, v in doc.items() if k in aliases})
    except ValidationError:
        return None


def completion_export(message: str | None, now: str) -> ExportStatus | None:
    """The last serving version from a chief's ``TrainingComplete: {...}`` termination
    message; None when it names none (no spec.export) or is no such message."""
    doc = completion_record(message)
    return export_record(doc.get("export"), now) if doc is not None else None


def _model_fields(doc: Any, model: type[Progress] | type[Evaluation]) -> dict[str, Any] | None:
    """The entries of ``doc`` the model knows (by alias), or None when it is not a mapping:
    a newer trainer may say more than this operator reads. The dynamic tables are read
    and disk tables are read apart (``table_stats``): a bad one must not cost the rest of
    the record."""
    if not isinstance(doc, dict):
        return None
    aliases = {f.alias or n for n, f in model.model_fields.items()}
    skip = ("updateTime", *_TABLE_KINDS)
    return {k: v for k, v in doc.items() if k in aliases and k not in skip}


def parse_completion(message: str | None, now: str) -> tuple[Progress | None, Evaluation | None]:
    """The final progress and evaluation from a chief's ``TrainingComplete: {...}``
    termination message; (None, None) for any other message or a malformed one."""
    doc = completion_record(message)
    if doc is None:
        return None, None
    return progress_record(doc.get("progress"), now), evaluation_record(doc.get("evaluation"), now)


def progress_record(doc: Any, now: str) -> Progress | None:
    """status.progress from a progress record (a trainer's ``progress`` line, a completion
    message's ``progress``); None without a step or with a bad value."""
    progress = _parsed(doc, Progress, now)
    if progress is None:
        return None
    return progress.model_copy(
        update={
            "dynamic_tables": dynamic_tables(doc.get(DYNAMIC_TABLES_KEY)),
            "disk_tables": disk_tables(doc.get(DISK_TABLES_KEY)),
        }
    )


def evaluation_record(doc: Any, now: str) -> Evaluation | None:
    """status.evaluation from an evaluation record (``evaluation`` line or message part)."""
    return _parsed(doc, Evaluation, now)


def _parsed(doc: Any, model: Any, now: str) -> Any:
    """``model`` from the entries of ``doc`` it knows, or None (no step, a bad value)."""
    fields = _model_fields(doc, model)
    if not fields or "step" not in fields:
        return None
    try:
        return model(update_time=now, **fields)
    except ValidationError:
        return None


# A warm start as the trainer carried it out: the source checkpoint's step (None: not
# said) and its decision for each table.
WarmStartReport = tuple[int | None, list[WarmStartTable]]


def parse_warm_start(text: str) -> WarmStartReport | None:
    """The trainer's warm-start decisions from a metrics page; None when it has none."""
    step: int | None = None
    rows: list[dict[str, Any]] = []
    for family in _families(text):
        if family.name == METRIC_WARM_START_SOURCE_STEP and family.samples:
            value = family.samples[0].value
            step = int(value) if math.isfinite(value) and value >= 0 else None
        elif family.name == METRIC_WARM_START_TABLE:
            rows += [
                {k: s.labels.get(k) or None for k in WARM_START_TABLE_LABELS}
                for s in family.samples
            ]
    return warm_start_record(step, rows)


def warm_start_record(step: Any, rows: Any) -> WarmStartReport | None:
    """A warm-start report from its parts (a metrics page's series, or the trainer's
    ``warmStarted`` line: ``sourceStep`` and ``tables``); a bad table is left out; None
    without any table."""
    tables = []
    for row in rows if isinstance(rows, list) else []:
        try:
            tables.append(WarmStartTable.model_validate(row))
        except ValidationError:
            continue
    if not tables:
        return None
    return (step if isinstance(step, int) and step >= 0 else None), tables
