"""Read the trainer's progress out of its Prometheus metrics text. Pure.

The trainer's chief serves ``etj_trainer_step``, ``etj_trainer_examples_per_second``,
``etj_trainer_loss``, ``etj_trainer_auc`` and ``etj_trainer_last_checkpoint_step``.
"""

from __future__ import annotations

import math

from etj.api.status import Progress

_FIELDS = {
    "etj_trainer_step": "step",
    "etj_trainer_examples_per_second": "examples_per_second",
    "etj_trainer_loss": "loss",
    "etj_trainer_auc": "auc",
    "etj_trainer_last_checkpoint_step": "last_checkpoint_step",
}
_INTS = {"step", "last_checkpoint_step"}


def parse_progress(text: str, now: str) -> Progress | None:
    """Progress from a metrics page; None when it has no step."""
    values: dict[str, float | int] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name, _, rest = line.partition(" ")
        name = name.split("{", 1)[0]
        field = _FIELDS.get(name)
        if field is None:
            continue
        try:
            value = float(rest.split()[0])
        except (IndexError, ValueError):
            continue
        if math.isnan(value) or math.isinf(value):
            continue
        values[field] = int(value) if field in _INTS else round(value, 6)
    if "step" not in values:
        return None
    return Progress(update_time=now, **values)
