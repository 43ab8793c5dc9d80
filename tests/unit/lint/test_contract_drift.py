"""No value of the contract is copied as a literal outside etj.api: the drift guard.

The contract's values are read from etj.api itself, not from a list kept here: every value
of every enum etj.api defines (roles, phases, pod phases, condition types, strategies,
restart policies, optimizers, dtypes, architectures, feature kinds, ...), and every string
constant named as a contract name is (``*_ENV``, ``LABEL_*``/``*_LABEL``,
``ANNOTATION_*``/``*_ANNOTATION``, ``REASON_*``, ``*_FILE``, ``*PORT_NAME*``,
``METRIC_*``, ``EVENT_*``, ``FINALIZER``). A new enum member or constant is guarded the
moment it is defined.

The product's Python outside etj.api (the operator, the trainer, and the test cluster that
stands in for the kubelet) is read as syntax trees; a string literal equal to one of those
values fails, unless ``ALLOWED`` gives that file the word with its foreign meaning (a
TFJob field, an OpenAPI type, a Kubernetes reason). Docstrings are prose and ``__all__``
names Python objects: neither is read.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
import re
from collections.abc import Iterator
from enum import Enum
from pathlib import Path

import etj.api

ROOT = Path(__file__).resolve().parents[3]
TREES = ("operator/etj", "trainer_image/etj_trainer", "tests/cluster/etj_testcluster")
CONTRACT = ROOT / "operator" / "etj" / "api"
# How etj.api names a constant that is a contract value (etj.api.constants, reasons,
# trainer_reasons, progress).
CONTRACT_NAME = re.compile(
    r"_ENV$|^LABEL_|_LABEL$|^ANNOTATION_|_ANNOTATION$|^REASON_|_FILE$|PORT_NAME|"
    r"^METRIC_|^EVENT_|^FINALIZER$"
)

_TFJOB = "TFJob's replica types and restartPolicy values: the input being converted"
_K8S_PHASE = "a Pod's phase as the API server's, in an object sent to it"
# (file, literal) -> the literal's meaning there, which is not the contract's.
ALLOWED: dict[tuple[str, str], str] = {
    **{("operator/etj/cli/convert.py", v): _TFJOB for v in ("chief", "worker", "ps")},
    **{("operator/etj/cli/convert.py", v): _TFJOB for v in ("evaluator", "OnFailure")},
    **{("operator/etj/cli/convert.py", v): _TFJOB for v in ("Never", "ExitCode")},
    ("operator/etj/cli/planview.py", "ps"): "a table column's title",
    ("operator/etj/core/crd.py", "string"): "OpenAPI's type name, not ValueType.STRING",
    ("operator/etj/core/render/build.py", "None"): "a headless Service's clusterIP",
    ("operator/etj/core/render/pod.py", "Never"): "a Pod's restartPolicy (Kubernetes')",
    ("operator/etj/core/render/scheduling.py", "Workload"): "the Kubernetes kind's name",
    ("operator/etj/core/reconcile/observe.py", "OOMKilled"): "Kubernetes' container reason",
    ("operator/etj/core/reconcile/observe.py", "NodeLost"): "Kubernetes' pod reason",
    ("operator/etj/core/reconcile/policies/queue.py", "Preempted"): (
        "the first word of Kueue's eviction message"
    ),
    ("operator/etj/controller/reconciler.py", "progress"): "a status field's name",
    ("operator/etj/controller/reconciler.py", "evaluation"): "a status field's name",
    ("operator/etj/core/reconcile/progress.py", "progress"): (
        "a status field's name (the completion message's key)"
    ),
    ("operator/etj/core/reconcile/progress.py", "evaluation"): (
        "a status field's name (the completion message's key)"
    ),
    ("trainer_image/etj_trainer/task/progress.py", "progress"): (
        "a status field's name (the completion message's key)"
    ),
    ("trainer_image/etj_trainer/task/progress.py", "evaluation"): (
        "a status field's name (the completion message's key)"
    ),
    ("trainer_image/etj_trainer/kernels/disk_table.py", "sgd"): (
        "the C++ kernel's optimizer attr (beside its rowwise_adagrad), not the spec's"
    ),
    ("trainer_image/etj_trainer/kernels/disk_table.py", "adagrad"): (
        "the C++ kernel's optimizer attr (beside its rowwise_adagrad), not the spec's"
    ),
    ("trainer_image/etj_trainer/data/batch.py", "dense"): "the batch's key of the dense tensor",
    ("trainer_image/etj_trainer/data/batch.py", "label"): "the batch's key of the labels",
    ("trainer_image/etj_trainer/data/datagen.py", "label"): "the default label column's name",
    ("trainer_image/etj_trainer/models/tower_remap.py", "dense"): "the dense input's key",
    ("trainer_image/etj_trainer/task/export.py", "dense"): "the serving signature's input",
    ("trainer_image/etj_trainer/task/export_reader.py", "dense"): "the serving signature's input",
    ("trainer_image/etj_trainer/data/delimited.py", "none"): (
        "data.files.quote's value, not Transform.NONE"
    ),
    ("operator/etj/cli/from_data.py", "label"): "a header name that suggests the label column",
    ("operator/etj/cli/from_data.py", "none"): "data.files.quote's value, not Transform.NONE",
    ("operator/etj/cli/from_data.py", "None"): (
        "a null token of pandas' na_values (how Python writes a missing value)"
    ),
    ("trainer_image/etj_trainer/data/clicklogs.py", "csv"): "a file name's suffix",
    ("trainer_image/etj_trainer/sdk.py", "none"): "a word of a message",
    ("trainer_image/etj_trainer/task/warmstart.py", "none"): "a word of a message",
    ("tests/cluster/etj_testcluster/__main__.py", "none"): "a node kind of the test cluster",
    ("tests/cluster/etj_testcluster/cli.py", "none"): "a node kind of the test cluster",
    ("tests/cluster/etj_testcluster/kueue.py", "metrics"): "Kueue's config key",
}


def contract_values() -> dict[str, str]:
    """Every contract value of etj.api -> where it is defined (``Role.CHIEF``)."""
    modules = [etj.api]
    for info in pkgutil.walk_packages(etj.api.__path__, "etj.api."):
        modules.append(importlib.import_module(info.name))
    enums: dict[str, str] = {}
    constants: dict[str, str] = {}
    for module in modules:
        for name, value in vars(module).items():
            if isinstance(value, type) and issubclass(value, Enum):
                if value.__module__ == module.__name__:
                    for member in value:
                        if isinstance(member.value, str):
                            enums.setdefault(member.value, f"{value.__name__}.{member.name}")
            elif isinstance(value, str) and CONTRACT_NAME.search(name):
                constants.setdefault(value, f"{module.__name__}.{name}")
    # A value that is both an enum's and a constant's is named by the enum ("Running").
    return constants | enums


def _not_code(tree: ast.AST) -> set[int]:
    """The string nodes that are not values: docstrings and ``__all__``'s entries."""
    out = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            value = body[0].value
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                out.add(id(value))
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            out |= {id(n) for n in ast.walk(node.value)}
    return out


def copies(source: str, values: dict[str, str]) -> Iterator[tuple[int, str]]:
    """(line, literal) of every string literal of ``source`` equal to a contract value."""
    tree = ast.parse(source)
    skip = _not_code(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and node.value in values and id(node) not in skip:
            yield node.lineno, node.value


def _sources() -> Iterator[Path]:
    for tree in TREES:
        for path in sorted((ROOT / tree).rglob("*.py")):
            if not path.is_relative_to(CONTRACT):
                yield path


def test_no_contract_value_is_copied_outside_etj_api():
    values = contract_values()
    found = []
    for path in _sources():
        rel = path.relative_to(ROOT).as_posix()
        for line, value in copies(path.read_text(), values):
            if (rel, value) not in ALLOWED:
                found.append(f"{rel}:{line}: {value!r} is {values[value]}")
    assert not found, f"{len(found)} literal copies; use etj.api's names:\n" + "\n".join(found)


def test_every_allowed_literal_is_still_there():
    """An exception whose literal is gone goes too, so the list stays short."""
    values = contract_values()
    for (rel, value), why in ALLOWED.items():
        assert value in values, f"{value!r} ({rel}) is no contract value: drop it from ALLOWED"
        present = {v for _, v in copies((ROOT / rel).read_text(), values)}
        assert value in present, f"{rel} no longer has {value!r} ({why}): drop it from ALLOWED"


def test_the_values_come_from_etj_api():
    """Enum values and named constants of every kind the contract has are collected."""
    values = contract_values()
    expected = {
        "chief": "Role.CHIEF",
        "Failed": "Phase.FAILED",
        "Unknown": "PodPhase.UNKNOWN",
        "WarmStarted": "ConditionType.WARM_STARTED",
        "rowwiseAdagrad": "Optimizer.ROWWISE_ADAGRAD",
        "bfloat16": "Dtype.BFLOAT16",
        "POD_NAME": "etj.api.constants.POD_NAME_ENV",
        "training.etj.dev/job-name": "etj.api.constants.LABEL_JOB_NAME",
        "training.etj.dev/metrics-address": "etj.api.constants.ANNOTATION_METRICS_ADDRESS",
        "metrics": "etj.api.constants.METRICS_PORT_NAME",
        "shard-plan.json": "etj.api.constants.SHARD_PLAN_FILE",
        "etj_trainer_step": "etj.api.progress.METRIC_STEP",
        "InvalidSpec": "etj.api.reasons.REASON_INVALID_SPEC",
        "DataError": "etj.api.trainer_reasons.REASON_DATA_ERROR",
    }
    assert {k: values.get(k) for k in expected} == expected


def test_the_guard_fails_on_a_copy():
    source = (
        '"""Docstring: Failed and chief are words here."""\n'
        "__all__ = ['DataError']\n"
        'if status.phase != "Failed":\n'
        '    opt = {"adagrad": 1}\n'
        'env = os.environ["ETJ_REPLICA_TYPE"]\n'
        'word = "failed"\n'
    )
    found = list(copies(source, contract_values()))
    assert sorted(found) == [(3, "Failed"), (4, "adagrad"), (5, "ETJ_REPLICA_TYPE")]
