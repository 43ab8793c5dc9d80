"""Kubernetes-style conditions: one per type, lastTransitionTime kept when status holds.

Pure.
"""

from __future__ import annotations

from etj.api.status import Condition


def set_condition(
    conditions: list[Condition],
    type_: str,
    status: bool,
    reason: str,
    message: str,
    now: str,
    generation: int | None,
) -> list[Condition]:
    """The conditions with ``type_`` set; others unchanged, order stable."""
    value = "True" if status else "False"
    out: list[Condition] = []
    found = False
    for c in conditions:
        if c.type != type_:
            out.append(c)
            continue
        found = True
        changed = c.status != value
        out.append(
            Condition(
                type=type_,
                status=value,
                reason=reason,
                message=message,
                last_transition_time=now if changed else c.last_transition_time,
                observed_generation=generation,
            )
        )
    if not found:
        out.append(
            Condition(
                type=type_,
                status=value,
                reason=reason,
                message=message,
                last_transition_time=now,
                observed_generation=generation,
            )
        )
    return out


def condition_true(conditions: list[Condition], type_: str) -> bool:
    return any(c.type == type_ and c.status == "True" for c in conditions)
