"""Kubernetes-style conditions: one per type, lastTransitionTime kept when status holds.

Pure.
"""

from __future__ import annotations

from etj.api.status import Condition, ConditionType


def set_condition(
    conditions: list[Condition],
    type_: ConditionType,
    status: bool,
    reason: str,
    message: str,
    now: str,
    generation: int | None,
) -> list[Condition]:
    """The conditions with ``type_`` set; others unchanged, order stable."""
    value = "True" if status else "False"
    old = next((c for c in conditions if c.type == type_), None)
    new = Condition(
        # A string on the wire: a status written by someone else may have other types.
        type=ConditionType(type_).value,
        status=value,
        reason=reason,
        message=message,
        # The transition time moves only when the status does.
        last_transition_time=old.last_transition_time if old and old.status == value else now,
        observed_generation=generation,
    )
    if old is None:
        return [*conditions, new]
    return [new if c.type == type_ else c for c in conditions]


def condition_true(conditions: list[Condition], type_: ConditionType) -> bool:
    return any(c.type == type_ and c.status == "True" for c in conditions)
