"""Every name the operator, ``etj run`` and the trainer share is written once, in etj.api.

Reads the product's source (the operator package, the trainer, the test cluster that
stands in for the kubelet) as Python syntax trees and fails on a string literal outside
etj.api that spells one of the contract's names by hand: a role, a condition type, an
environment variable, a label, an annotation, the metrics port name, a trainer-config file
name, a metric name. Docstrings and comments are not code and are not read.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path

import pytest

from etj.api import conventions
from etj.api.progress import (
    EVALUATION_METRICS,
    EXPORT_METRICS,
    METRIC_RESTARTS_SEEN,
    PROGRESS_METRICS,
)
from etj.api.roles import ALL_ROLES
from etj.api.status import ConditionType

ROOT = Path(__file__).resolve().parents[4]
OPERATOR = ROOT / "operator" / "etj"
TRAINER = ROOT / "trainer_image" / "etj_trainer"
TEST_CLUSTER = ROOT / "tests" / "cluster" / "etj_testcluster"

EXEMPT_DIRS = (
    OPERATOR / "api",  # the contract itself
)

ROLES = {r.value for r in ALL_ROLES}
CONDITION_TYPES = {t.value for t in ConditionType}
SHARED_ENV = set(conventions.ENV_VARS)
LABELS_AND_ANNOTATIONS = set(conventions.LABELS) | set(conventions.ANNOTATIONS)
# Prefixes of every label and annotation key etj sets or reads.
KEY_PREFIXES = ("training.etj.dev/", "app.kubernetes.io/", "kueue.x-k8s.io/")
METRICS = {*PROGRESS_METRICS, *EVALUATION_METRICS, *EXPORT_METRICS, METRIC_RESTARTS_SEEN}

# Literals that spell a contract name but mean something else, each with why.
ALLOWED: dict[tuple[str, str], str] = {
    # TFJob's replica types (lowercased) mapped to etj's roles: TFJob's names, not etj's.
    ("operator/etj/cli/convert.py", "chief"): "TFJob's replica type",
    ("operator/etj/cli/convert.py", "worker"): "TFJob's replica type",
    ("operator/etj/cli/convert.py", "ps"): "TFJob's replica type",
    ("operator/etj/cli/convert.py", "evaluator"): "TFJob's replica type",
    # A column of `etj plan`: the word, not the role.
    ("operator/etj/cli/planview.py", "ps"): "a table column's title",
    # Kueue's API group in an apiVersion, not a label key.
    ("tests/cluster/etj_testcluster/kueue.py", "kueue.x-k8s.io/v1beta2"): "an apiVersion",
    # Kueue's own configuration file (its metrics endpoint), not etj's port name.
    ("tests/cluster/etj_testcluster/kueue.py", "metrics"): "Kueue's config key",
    # The test cluster's own annotation (its process node's pid): no product code reads it.
    ("tests/cluster/etj_testcluster/process_node.py", "training.etj.dev/local-pid"): "test rig",
}


def _sources() -> Iterator[Path]:
    for top in (OPERATOR, TRAINER, TEST_CLUSTER):
        for path in sorted(top.rglob("*.py")):
            if not any(path.is_relative_to(d) for d in EXEMPT_DIRS):
                yield path


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            value = body[0].value
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                out.add(id(value))
    return out


# The functions that set or read a condition by type, and where the type is among their
# arguments (a reason may well be spelled as a type: "Suspended").
CONDITION_TYPE_ARG = {"set_condition": 1, "condition_true": 1, "condition": 0}


def _condition_type_arg(node: ast.Call) -> Iterator[str]:
    """The type argument of a call that sets or reads a condition, when a bare string."""
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    at = CONDITION_TYPE_ARG.get(name)
    if at is not None and len(node.args) > at:
        arg = node.args[at]
        if isinstance(arg, ast.Constant) and arg.value in CONDITION_TYPES:
            yield arg.value


def _compared_condition_type(node: ast.Compare) -> Iterator[str]:
    """``<x>.type == "Running"``: a condition's type compared with a bare string."""
    if isinstance(node.left, ast.Attribute) and node.left.attr == "type":
        for right in node.comparators:
            if isinstance(right, ast.Constant) and right.value in CONDITION_TYPES:
                yield right.value


def _why(value: str) -> str | None:
    """Which of the contract's names ``value`` spells by hand, if any."""
    if value in ROLES:
        return "a role (etj.api.roles.Role)"
    if value in SHARED_ENV:
        return "a shared environment variable (etj.api.constants)"
    if value in LABELS_AND_ANNOTATIONS or value.startswith(KEY_PREFIXES):
        return "a label or annotation key (etj.api.constants)"
    if value in METRICS:
        return "a metric name (etj.api.progress)"
    if value in conventions.PORT_NAMES:
        return "a port name (etj.api.constants.METRICS_PORT_NAME)"
    if value in conventions.FILE_NAMES:
        return "a trainer-config file name (etj.api.constants)"
    if value.endswith(conventions.TRAINER_CONFIG_MAP_SUFFIX):
        return "the trainer ConfigMap's name (etj.api.conventions.trainer_config_map_name)"
    return None


def _problems(path: Path) -> Iterator[str]:
    rel = path.relative_to(ROOT).as_posix()
    tree = ast.parse(path.read_text(), str(path))
    docstrings = _docstrings(tree)
    for node in ast.walk(tree):
        found: list[tuple[str, str]] = []
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if id(node) not in docstrings and (why := _why(node.value)):
                found.append((node.value, why))
        elif isinstance(node, ast.JoinedStr):
            # f"{GROUP}/job-name": a key built from the group by hand.
            parts = node.values
            for before, after in pairwise(parts):
                if (
                    isinstance(before, ast.FormattedValue)
                    and isinstance(before.value, ast.Name)
                    and before.value.id == "GROUP"
                    and isinstance(after, ast.Constant)
                    and str(after.value).startswith("/")
                ):
                    found.append((f"{{GROUP}}{after.value}", "a label or annotation key"))
        elif isinstance(node, ast.Call):
            found += [(v, "a condition type (ConditionType)") for v in _condition_type_arg(node)]
        elif isinstance(node, ast.Compare):
            found += [
                (v, "a condition type (ConditionType)") for v in _compared_condition_type(node)
            ]
        for value, why in found:
            if (rel, value) not in ALLOWED:
                yield f"{rel}:{getattr(node, 'lineno', '?')}: {value!r} is {why}"


def test_no_contract_name_is_spelled_outside_etj_api():
    problems = [p for path in _sources() for p in _problems(path)]
    assert not problems, "spell these with etj.api's names:\n" + "\n".join(problems)


def test_every_allowed_literal_is_still_there():
    """An exception whose literal is gone is removed too, so the list stays short."""
    for (rel, value), why in ALLOWED.items():
        tree = ast.parse((ROOT / rel).read_text())
        assert any(isinstance(n, ast.Constant) and n.value == value for n in ast.walk(tree)), (
            f"{rel} no longer has {value!r} ({why}): drop it from ALLOWED"
        )


def _private_env(top: Path) -> set[str]:
    """The ETJ_* variables one side reads for itself (an operator setting, a trainer knob)."""
    names = set()
    for path in top.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and node.value.startswith("ETJ_")
                and node.value[4:].replace("_", "").isalnum()
                and node.value.isupper()
            ):
                names.add(node.value)
    return names


def test_each_environment_variable_has_one_meaning():
    """A variable private to the operator is not also one of the trainer's, and neither is
    one of the shared ones (ETJ_METRICS_PORT once meant the operator's own port to the
    operator and the chief's to the trainer)."""
    operator = _private_env(OPERATOR / "cli") | _private_env(OPERATOR / "controller")
    trainer = _private_env(TRAINER)
    assert not operator & trainer
    assert not (operator | trainer) & SHARED_ENV


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("ps", "role"),
        ("ETJ_REPLICA_TYPE", "environment"),
        ("TF_CONFIG", "environment"),
        ("training.etj.dev/metrics-address", "annotation"),
        ("training.etj.dev/anything-new", "annotation"),
        ("etj_trainer_step", "metric"),
        ("metrics", "port"),
        ("trainer.json", "file"),
        ("j-trainer-config", "ConfigMap"),
    ],
)
def test_the_grep_sees_each_kind(value: str, why: str):
    assert why in (_why(value) or "")


def test_the_grep_sees_condition_types_in_calls_and_comparisons(tmp_path: Path):
    source = tmp_path / "m.py"
    source.write_text(
        '"""Doc: Running is fine here."""\n'
        'p.condition("Running", True, "R", "")\n'
        'ok = c.type == "Failed"\n'
        'phase = "Running"  # a pod phase: not a condition\n'
        'key = f"{GROUP}/job-name"\n'
    )
    tree = ast.parse(source.read_text())
    calls = [v for n in ast.walk(tree) if isinstance(n, ast.Call) for v in _condition_type_arg(n)]
    compared = [
        v for n in ast.walk(tree) if isinstance(n, ast.Compare) for v in _compared_condition_type(n)
    ]
    assert calls == ["Running"] and compared == ["Failed"]
    assert not [n for n in ast.walk(tree) if isinstance(n, ast.Constant) and _why(str(n.value))]
