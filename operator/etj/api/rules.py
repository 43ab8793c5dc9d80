"""Cross-field rules written once: a CEL expression for the API server and the same rule as
a Python predicate for ``etj validate`` and the trainer, in one declaration.

A ``Rule`` goes into a model's ``json_schema_extra`` (as ``x-kubernetes-validations``, so
``kubectl apply`` rejects the job) and into its pydantic validator (``check_rules``), with
the same message in both places. The two expressions sit side by side in one object so
they cannot drift apart unnoticed; the malformed-job corpus (tests/cases/malformed.py)
sends the ``cel`` cases to a real API server and every case through pydantic.

Pure: no I/O, no environment.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Rule:
    """One cross-field rule: CEL over the wire form (``self``), a predicate over the model."""

    cel: str
    message: str
    check: Callable[[Any], bool]
    # A more specific message for pydantic (which can name the offending item); the CEL
    # keeps ``message``.
    detail: Callable[[Any], str] | None = None


def cel_extra(
    *rules: Rule | tuple[str, str], extra: list[dict[str, str]] | None = None
) -> dict[str, Any]:
    """Schema extra carrying the rules' CEL (rule, message) into the CRD; ``extra``: whole
    rule objects the API server alone checks (transition rules with a fieldPath, say)."""
    pairs = [(r.cel, r.message) if isinstance(r, Rule) else r for r in rules]
    return {
        "x-kubernetes-validations": [{"rule": c, "message": m} for c, m in pairs]
        + list(extra or [])
    }


def check_rules(model: Any, rules: tuple[Rule, ...]) -> None:
    """Raise ``ValueError`` with the message of the first rule ``model`` breaks."""
    for rule in rules:
        if not rule.check(model):
            raise ValueError(rule.detail(model) if rule.detail else rule.message)
