"""Read the trainer's progress and held-out evaluation out of its Prometheus metrics text.
Pure (prometheus_client's text parser only; no I/O).

The trainer's chief serves ``etj_trainer_step``, ``etj_trainer_examples_per_second``,
``etj_trainer_loss``, ``etj_trainer_auc``, ``etj_trainer_last_checkpoint_step`` and
``etj_trainer_bad_records`` (status.progress), and after a held-out evaluation
``etj_trainer_eval_step``, ``_eval_auc``, ``_eval_logloss``, ``_eval_examples``
(status.evaluation).
"""

from __future__ import annotations

import math

from prometheus_client.parser import text_string_to_metric_families

from etj.api.status import Evaluation, Progress

_PROGRESS = {
    "etj_trainer_step": "step",
    "etj_trainer_examples_per_second": "examples_per_second",
    "etj_trainer_loss": "loss",
    "etj_trainer_auc": "auc",
    "etj_trainer_last_checkpoint_step": "last_checkpoint_step",
    "etj_trainer_bad_records": "bad_records",
}
_EVALUATION = {
    "etj_trainer_eval_step": "step",
    "etj_trainer_eval_auc": "auc",
    "etj_trainer_eval_logloss": "logloss",
    "etj_trainer_eval_examples": "examples",
}
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
