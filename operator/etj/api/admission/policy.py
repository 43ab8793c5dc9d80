"""The admission rules as the API server and ``etj validate`` apply them: the problems of a
job in a namespace, the two ValidatingAdmissionPolicy objects with their bindings, the
chart's generated template and the README's table of every rule.

Pure: no I/O, no environment (``make crds`` writes the files).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

from etj.api.admission.checks import (
    Check,
    Namespace,
    Scope,
    cel_literal,
    cel_route,
    field_value,
    scope_items,
    scope_variable,
)
from etj.api.admission.rules import (
    ALLOW_PRIVILEGED_LABEL,
    CHECKS,
    HOST_ACCESS_CHECKS,
    IDENTITY_CHECKS,
    PRIVILEGED,
    SCOPES,
)
from etj.api.constants import GROUP, PLURAL


def admission_problems(job: Any, namespace: Namespace | None = None) -> list[tuple[str, str]]:
    """(field, why) for every place ``job`` asks for what the policies refuse in
    ``namespace`` (default: one with no label or annotation)."""
    namespace = namespace or Namespace()
    out: list[tuple[str, str]] = []
    for check in CHECKS:
        if namespace.grants(check.grant):
            continue
        for path, item in scope_items(job, check.scope):
            present, value = field_value(item, check.field)
            if present and check.refused(value, namespace):
                where = f"{path}.{check.field}" if check.field else path
                out.append((where, f"{check.why}; {check.grant.how}"))
    return out


def cel_expression(check: Check) -> str:
    """The policy's validation: true when no item of the check's scope is refused (or, for
    a label grant read in the policy, when the namespace has it)."""
    ok = f"!({check.cel_refused('x')})"
    expression = _cel_all(check.scope, "x", ok)
    if check.grant != PRIVILEGED and check.grant.label:
        label = cel_literal(check.grant.label)
        return f"namespaceObject.metadata.?labels[?{label}].orValue('') == 'true' || ({expression})"
    return expression


def _cel_all(scope: Scope, var: str, body: str) -> str:
    """CEL: ``body`` holds for every item ``var`` of ``scope``."""
    terms = []
    if scope.routes and scope in SCOPES:
        terms.append(f"variables.{scope.name}.all(l, l.all({var}, {body}))")
    elif scope.routes:
        terms += [f"{cel_route(r)}.all({var}, {body})" for r in scope.routes]
    if scope.parent is not None:
        inner = f"p.?{scope.field}.orValue([]).all({var}, {body})"
        terms.append(_cel_all(scope.parent, "p", inner))
    return " && ".join(terms)


@dataclass(frozen=True)
class PolicyDef:
    """One ValidatingAdmissionPolicy and its binding: its checks, and whether its binding
    leaves out the namespaces labelled allow-privileged."""

    suffix: str
    checks: tuple[Check, ...]
    exempt_privileged: bool


POLICIES = (
    PolicyDef("no-host-access", HOST_ACCESS_CHECKS, exempt_privileged=True),
    PolicyDef("no-borrowed-identity", IDENTITY_CHECKS, exempt_privileged=False),
)


def policy(name: str = "etj-no-host-access", definition: PolicyDef = POLICIES[0]) -> dict[str, Any]:
    """The ValidatingAdmissionPolicy refusing jobs that ask for what ``definition``'s
    checks refuse."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [GROUP],
                        "apiVersions": ["*"],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": [PLURAL],
                    }
                ]
            },
            # An update that leaves the spec alone (the operator's own patches of a job
            # admitted before the policy, say) is not judged again.
            "matchConditions": [
                {
                    "name": "spec-written",
                    "expression": (
                        "request.operation == 'CREATE' || !has(oldObject.spec) "
                        "|| !has(object.spec) || object.spec != oldObject.spec"
                    ),
                }
            ],
            "variables": [{"name": s.name, "expression": scope_variable(s)} for s in SCOPES],
            "validations": [
                {"expression": cel_expression(c), "message": c.message, "reason": "Forbidden"}
                for c in definition.checks
            ],
        },
    }


def binding(
    policy_name: str = "etj-no-host-access", definition: PolicyDef = POLICIES[0]
) -> dict[str, Any]:
    """The binding: every namespace (for the host-access policy: but those a cluster admin
    labelled to allow it)."""
    match: dict[str, Any] = {}
    if definition.exempt_privileged:
        match["namespaceSelector"] = {
            "matchExpressions": [
                {"key": ALLOW_PRIVILEGED_LABEL, "operator": "NotIn", "values": ["true"]}
            ]
        }
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": policy_name},
        "spec": {
            "policyName": policy_name,
            "validationActions": ["Deny"],
            "matchResources": match,
        },
    }


# --- The chart's template and the README's table -------------------------------------

CHART_TEMPLATE = "charts/etj/templates/admission-policy.yaml"
_HELM = {
    "ETJ_NAME": '{{ include "etj.fullname" . }}',
    "labels: ETJ_LABELS": 'labels: {{- include "etj.labels" . | nindent 4 }}',
    "validationActions: ETJ_ACTIONS": (
        "validationActions: {{ toJson .Values.admissionPolicy.validationActions }}"
    ),
}


class _Dumper(yaml.SafeDumper):
    """Block-style YAML, keys in the order written."""


def chart_template() -> str:
    """The chart's ``templates/admission-policy.yaml`` (a test fails when they differ)."""
    docs: list[dict[str, Any]] = []
    for definition in POLICIES:
        name = f"ETJ_NAME-{definition.suffix}"
        pair = (policy(name, definition), binding(name, definition))
        for doc in pair:
            doc["metadata"]["labels"] = "ETJ_LABELS"
        pair[1]["spec"]["validationActions"] = "ETJ_ACTIONS"
        docs += pair
    body = "---\n".join(
        yaml.dump(d, Dumper=_Dumper, sort_keys=False, width=100, default_flow_style=False)
        for d in docs
    )
    assert "{{" not in body, "a CEL expression would read as a helm action"
    for token, helm in _HELM.items():
        body = body.replace(token, helm)
    return (
        "{{- /* Generated by `make crds` from etj.api.admission; do not edit. Jobs may not ask\n"
        "     for host access or privilege unless their namespace is labelled\n"
        f'     {ALLOW_PRIVILEGED_LABEL}="true", nor borrow an identity, a node or a priority\n'
        "     unless its own label or annotation allows it (values: admissionPolicy). */}}\n"
        "{{- if .Values.admissionPolicy.enabled }}\n"
        f"{body}"
        "{{- end }}\n"
    )


README_TABLE_BEGIN = "<!-- admission rules: generated by `make crds` from etj.api.admission -->"
README_TABLE_END = "<!-- end of admission rules -->"


# What a check on the item itself (field "") refuses, for the table.
_ITEM_REFUSED = {"keys": "a volume type", "tolerates": "`operator: Exists` without a key"}


def rules_table() -> str:
    """Markdown: every rule, what it refuses and where, its origin and its opt-out."""
    rows = [
        "| rule | refused | where | origin | allowed where |",
        "|---|---|---|---|---|",
    ]
    for c in CHECKS:
        refused = f"`{c.shown}`" if c.field else _ITEM_REFUSED[c.kind]
        opt = (
            f"namespace annotation `{c.grant.annotation}` lists it"
            if c.grant.annotation
            else f"namespace label `{c.grant.label}=true`"
        )
        rows.append(f"| `{c.name}` | {refused} | {c.scope.what} | {c.origin.value} | {opt} |")
    return "\n".join(rows)


def with_rules_table(readme: str) -> str:
    """``readme`` with the text between the table's markers replaced by ``rules_table()``."""
    begin = readme.index(README_TABLE_BEGIN) + len(README_TABLE_BEGIN)
    end = readme.index(README_TABLE_END)
    return readme[:begin] + "\n" + rules_table() + "\n" + readme[end:]
