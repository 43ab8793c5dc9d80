"""The etj CLI: validate/plan/render/crd behave as documented (run in-process)."""

from __future__ import annotations

import json

import yaml
from click.testing import CliRunner

from etj.cli.main import main
from etj.core.crd import crd_yaml
from tests.unit.conftest import ROOT, load_example

QUICKSTART = str(ROOT / "examples" / "quickstart.yaml")


def run(*args: str, input: str | None = None):
    return CliRunner().invoke(main, list(args), input=input, catch_exceptions=False)


def test_validate_ok():
    result = run("validate", QUICKSTART)
    assert result.exit_code == 0
    assert "quickstart: valid (ParameterServer, 2 ps)" in result.output


def test_validate_reports_each_problem_with_its_field(tmp_path):
    bad = load_example("quickstart.yaml")
    bad["spec"]["model"]["embeddings"][0]["vocabularySize"] = -5
    bad["spec"]["training"]["optimizer"] = "rmsprop"
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(bad))
    result = CliRunner().invoke(main, ["validate", str(path)])
    assert result.exit_code == 2
    lines = (
        result.stderr.strip().splitlines()
        if hasattr(result, "stderr")
        else result.output.strip().splitlines()
    )
    assert any("spec.model.embeddings[0].vocabularySize" in line for line in lines)
    assert any("spec.training.optimizer" in line for line in lines)
    assert len(lines) == 2


def test_validate_stdin_and_not_yaml():
    result = CliRunner().invoke(main, ["validate", "-"], input="a: [b\n")
    assert result.exit_code != 0
    assert "not valid YAML" in result.output


def test_render_prints_every_object_as_documents():
    result = run("render", QUICKSTART, "--namespace", "ml")
    assert result.exit_code == 0
    docs = list(yaml.safe_load_all(result.output))
    # The quickstart's checkpoints are on a ReadWriteMany claim etj makes (checkpoint.storage).
    assert [d["kind"] for d in docs] == ["Service", "ConfigMap", "PersistentVolumeClaim"] + [
        "Pod"
    ] * 5
    assert {d["metadata"]["namespace"] for d in docs} == {"ml"}
    tf = json.loads(docs[3]["spec"]["containers"][0]["env"][0]["value"])
    assert tf["cluster"]["ps"][0] == "quickstart-ps-0.quickstart.ml.svc:2222"


def test_plan_table_and_json():
    result = run("plan", str(ROOT / "examples" / "large-tables.yaml"))
    assert result.exit_code == 0
    assert "user_id" in result.output and "Parameter servers" in result.output
    as_json = json.loads(run("plan", QUICKSTART, "--json").output)
    assert as_json["psReplicas"] == 2
    assert as_json["tables"][0]["psOfShard"] == [0, 1, 0, 1]


def test_crd_command_prints_the_committed_crd():
    assert run("crd").output == crd_yaml()
