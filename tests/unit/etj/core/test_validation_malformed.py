"""Every malformed job gets a specific message from `etj validate`, and the generated CRD
schema rejects exactly the cases a schema can express (the API server itself checks the
same corpus in tests/integration/test_malformed_server.py)."""

from __future__ import annotations

import copy
from typing import Any

import jsonschema
import pytest
import yaml
from click.testing import CliRunner

from etj.cli.main import main
from etj.core.crd import build_crd
from etj.core.validation import validate_manifest
from tests.cases.malformed import BASE, CASES, Case
from tests.unit.conftest import load_example

SCHEMA_LAYERS = ("schema", "cel")


def strict(node: Any) -> Any:
    """The schema as the API server applies it under kubectl's strict field validation:
    unknown fields are errors (``additionalProperties: false`` wherever fields are listed)."""
    if isinstance(node, dict):
        out = {k: strict(v) for k, v in node.items()}
        if "properties" in out and not out.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
        return out
    if isinstance(node, list):
        return [strict(v) for v in node]
    return node


def _list_map_errors(schema: dict[str, Any], value: Any, path: str = "") -> list[str]:
    """x-kubernetes-list-type: map — keys must be unique (structural, checked by the server)."""
    errors: list[str] = []
    if schema.get("x-kubernetes-list-type") == "map" and isinstance(value, list):
        keys = [
            tuple(item.get(k) for k in schema["x-kubernetes-list-map-keys"])
            for item in value
            if isinstance(item, dict)
        ]
        if len(keys) != len(set(keys)):
            errors.append(f"{path}: Duplicate value")
    if isinstance(value, dict):
        for name, sub in (schema.get("properties") or {}).items():
            if name in value:
                errors += _list_map_errors(sub, value[name], f"{path}.{name}")
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            errors += _list_map_errors(schema["items"], item, f"{path}[{i}]")
    return errors


SCHEMA = strict(build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"])
VALIDATOR = jsonschema.Draft4Validator(SCHEMA)


def schema_errors(manifest: dict[str, Any]) -> list[str]:
    doc = copy.deepcopy(manifest)
    doc["metadata"] = {}  # metadata is the API server's business (and CEL's, for the name)
    return [e.message for e in VALIDATOR.iter_errors(doc)] + _list_map_errors(SCHEMA, doc)


def cel_messages() -> list[str]:
    out: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            out.extend(r["message"] for r in node.get("x-kubernetes-validations", []))
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(SCHEMA)
    return out


def test_corpus_size_and_layers():
    assert len({c.id for c in CASES}) == len(CASES)
    assert sum(c.layer in SCHEMA_LAYERS for c in CASES) >= 25
    assert {c.layer for c in CASES} == {"schema", "cel", "plan"}


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_validate_names_the_field_with_a_specific_message(case: Case):
    result = validate_manifest(case.manifest)
    assert not result.ok
    matching = [p for p in result.problems if p.field == case.field]
    assert matching, f"no problem for {case.field}: {[str(p) for p in result.problems]}"
    assert any(case.message in p.message for p in matching), [str(p) for p in matching]


@pytest.mark.parametrize("case", [c for c in CASES if c.layer == "schema"], ids=lambda c: c.id)
def test_schema_cases_are_rejected_by_the_crd_schema(case: Case):
    assert schema_errors(case.manifest), f"{case.id} passed the CRD schema"


@pytest.mark.parametrize("case", [c for c in CASES if c.layer != "schema"], ids=lambda c: c.id)
def test_cel_and_plan_cases_pass_the_structural_schema(case: Case):
    assert schema_errors(case.manifest) == []


@pytest.mark.parametrize("case", [c for c in CASES if c.layer == "cel"], ids=lambda c: c.id)
def test_cel_cases_have_their_rule_in_the_crd(case: Case):
    assert any(case.message in m for m in cel_messages()), case.message


def test_base_and_examples_pass_both_layers():
    for doc in (
        BASE,
        load_example("quickstart.yaml"),
        load_example("mirrored.yaml"),
        load_example("large-tables.yaml"),
    ):
        assert schema_errors(doc) == []
        assert validate_manifest(doc).ok


@pytest.mark.parametrize("case", CASES[::7], ids=lambda c: c.id)
def test_cli_exits_2_naming_the_field(case: Case, tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(case.manifest))
    result = CliRunner().invoke(main, ["validate", str(path)])
    assert result.exit_code == 2
    assert f"{path}: {case.field}: " in result.output


def test_auto_strategy_that_chooses_parameter_server_keeps_the_chief_rule():
    """strategy Auto decides ParameterServer from the table sizes (here: replicas.ps given);
    etj's trainer then needs its chief, as when the strategy is written out; a job whose
    workers run their own command does not."""
    doc = copy.deepcopy(BASE)
    doc["spec"]["strategy"] = "Auto"
    doc["spec"]["replicas"]["chief"]["replicas"] = 0
    result = validate_manifest(doc)
    assert not result.ok and result.plan is None
    [problem] = result.problems
    assert problem.field == "spec.replicas.chief.replicas"
    assert (
        "exactly one chief" in problem.message and "Auto chose ParameterServer" in problem.message
    )
    doc["spec"]["replicas"]["worker"]["template"] = {
        "spec": {"containers": [{"name": "trainer", "command": ["python", "train.py"]}]}
    }
    assert validate_manifest(doc).ok
