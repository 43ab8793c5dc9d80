"""The contract's names beyond its values: keys under etj's prefixes, the trainer ConfigMap's
name, and each environment variable's one meaning.

A literal equal to a value etj.api defines (a role, an environment variable, a label, a
reason, ...) is the drift guard's (``tests/unit/lint/test_contract_drift.py``). This reads
the same sources for what an equality cannot see: a label or annotation key under one of
etj's prefixes that etj.api does not define at all, a ConfigMap name built by hand, a key
built from ``GROUP`` in an f-string. Docstrings are not code and are not read.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path

from etj.api import conventions
from tests.unit.lint.test_contract_drift import contract_values

ROOT = Path(__file__).resolve().parents[4]
OPERATOR = ROOT / "operator" / "etj"
TRAINER = ROOT / "trainer_image" / "etj_trainer"
TEST_CLUSTER = ROOT / "tests" / "cluster" / "etj_testcluster"

EXEMPT_DIRS = (
    OPERATOR / "api",  # the contract itself
)

# Every environment variable etj.api names (each ``*_ENV``).
SHARED_ENV = {v for v, where in contract_values().items() if where.endswith("_ENV")}
# Prefixes of every label and annotation key etj sets or reads.
KEY_PREFIXES = ("training.etj.dev/", "app.kubernetes.io/", "kueue.x-k8s.io/")

# Literals under a key prefix that are no key of etj's, each with why.
ALLOWED: dict[tuple[str, str], str] = {
    # Kueue's API group in an apiVersion, not a label key.
    ("tests/cluster/etj_testcluster/kueue.py", "kueue.x-k8s.io/v1beta2"): "an apiVersion",
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


def _why(value: str) -> str | None:
    """Which of the contract's names ``value`` builds by hand, if any."""
    if value.startswith(KEY_PREFIXES):
        return "a label or annotation key (etj.api.constants)"
    if value.endswith(conventions.TRAINER_CONFIG_MAP_SUFFIX):
        return "the trainer ConfigMap's name (etj.api.conventions.trainer_config_map_name)"
    return None


def _problems(rel: str, source: str) -> Iterator[str]:
    tree = ast.parse(source, rel)
    docstrings = _docstrings(tree)
    for node in ast.walk(tree):
        found: list[tuple[str, str]] = []
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if id(node) not in docstrings and (why := _why(node.value)):
                found.append((node.value, why))
        elif isinstance(node, ast.JoinedStr):
            # f"{GROUP}/job-name": a key built from the group by hand.
            for before, after in pairwise(node.values):
                if (
                    isinstance(before, ast.FormattedValue)
                    and isinstance(before.value, ast.Name)
                    and before.value.id == "GROUP"
                    and isinstance(after, ast.Constant)
                    and str(after.value).startswith("/")
                ):
                    found.append((f"{{GROUP}}{after.value}", "a label or annotation key"))
        for value, why in found:
            if (rel, value) not in ALLOWED:
                yield f"{rel}:{getattr(node, 'lineno', '?')}: {value!r} is {why}"


def test_no_contract_name_is_built_outside_etj_api():
    problems = [
        p
        for path in _sources()
        for p in _problems(path.relative_to(ROOT).as_posix(), path.read_text())
    ]
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
    assert {"TF_CONFIG", "ETJ_REPLICA_TYPE", "ETJ_SHARD_PLAN"} <= SHARED_ENV
    assert not operator & trainer
    assert not (operator | trainer) & SHARED_ENV


def test_the_grep_sees_each_kind():
    assert "annotation" in (_why("training.etj.dev/anything-new") or "")
    assert "ConfigMap" in (_why("j-trainer-config") or "")
    source = '"""Doc: training.etj.dev/x is prose."""\nkey = f"{GROUP}/job-name"\nx = "etj"\n'
    assert list(_problems("m.py", source)) == [
        "m.py:2: '{GROUP}/job-name' is a label or annotation key"
    ]
