"""Read the trainer's progress and held-out evaluation out of its Prometheus metrics text.
Pure (prometheus_client's text parser only; no I/O).

The trainer's chief serves the gauges ``etj.api.progress`` names (``etj_trainer_step``,
``_loss``, ...: status.progress; after a held-out evaluation ``etj_trainer_eval_step``,
``_eval_auc``, ...: status.evaluation).

A chief that trained every step says the same once more in its termination message
(``REASON_COMPLETED``): the final values, which the last scrape may have missed.
"""

from __future__ import annotations

import math
from typing import Any

from prometheus_client.parser import text_string_to_metric_families
from pydantic import ValidationError

from etj.api.progress import EVALUATION_METRICS, PROGRESS_METRICS, completion_record
from etj.api.status import Evaluation, Progress

_PROGRESS = PROGRESS_METRICS
_EVALUATION = EVALUATION_METRICS
_INTS = {"step", "last_checkpoint_step", "bad_records", "examples"}


def _values(text: str, fields: dict[str, str]) -> dict[str, float | int]:
    """The finite values of the named gauges (the first sample of each)."""
    out: dict[str, float | int] = {}
    try:
        families = list(text_string_to_metric_families(text))
    except ValueError:
        return out  # not a metrics page (a proxy's error page, a half-written response)
    for family in families:
        field = fields.get(family.name)
        if field is None or not family.samples:
            continue
        value = float(family.samples[0].value)
        if math.isnan(value) or math.isinf(value):
            continue
        out[field] = int(value) if field in _INTS else round(value, 6)
    return out


def parse_progress(text: str, now: str) -> Progress | None:
    """Progress from a metrics page; None when it has no step."""
    values = _values(text, _PROGRESS)
    if "step" not in values:
        return None
    if not values.get("bad_records"):
        values.pop("bad_records", None)
    return Progress(update_time=now, **values)


def parse_evaluation(text: str, now: str) -> Evaluation | None:
    """The last held-out evaluation from a metrics page; None before the first one."""
    values = _values(text, _EVALUATION)
    # The gauges read 0 until the first evaluation has scored examples.
    if not values.get("examples") or "step" not in values:
        return None
    return Evaluation(update_time=now, **values)


def _model_fields(doc: Any, model: type[Progress] | type[Evaluation]) -> dict[str, Any] | None:
    """The entries of ``doc`` the model knows (by alias), or None when it is not a mapping:
    a newer trainer may say more than this operator reads."""
    if not isinstance(doc, dict):
        return None
    aliases = {f.alias or n for n, f in model.model_fields.items()}
    return {k: v for k, v in doc.items() if k in aliases and k != "updateTime"}


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
    return _parsed(doc, Progress, now)


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
