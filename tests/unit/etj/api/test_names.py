"""Names as the API server checks them, in `etj validate`, `etj render` and `etj run`: the
job's own name and every name etj derives from it (etj.api.names, etj.core.render.validate_names)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from etj.api.constants import MAX_JOB_NAME_LENGTH
from etj.api.names import job_name_problem, name_problem, object_name_problems
from etj.api.plan import ShardPlan
from etj.cli.main import main
from etj.core.render import build_objects
from etj.core.render.validate_names import with_derived_names
from etj.core.validation import validate_manifest
from tests.cases.malformed import BASE


def _job(name: str, **replicas: dict) -> dict:
    doc = yaml.safe_load(yaml.safe_dump(BASE))
    doc["metadata"]["name"] = name
    doc["spec"]["replicas"].update(replicas)
    return doc


def _cli(tmp_path: Path, command: str, doc: dict):  # type: ignore[no-untyped-def]
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(doc))
    return CliRunner().invoke(main, [command, str(path)])


@pytest.mark.parametrize("command", ["validate", "render", "plan", "run"])
def test_bad_name_is_refused_with_the_reason(tmp_path: Path, command: str):
    result = _cli(tmp_path, command, _job("Bad_Name"))
    assert result.exit_code == 2, result.output
    assert "metadata.name: 'Bad_Name': must be a DNS-1123 label" in result.output
    assert len(result.output.strip().splitlines()) == 1  # one line, not one per pod


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("Bad_Name", "must be a DNS-1123 label"),
        ("-ctr", "must be a DNS-1123 label"),
        ("ctr-", "must be a DNS-1123 label"),
        ("ctr.a", "must be a DNS-1123 label"),  # a subdomain, but hostnames are labels
        ("c" * 64, "64 characters; at most 63"),
    ],
)
def test_job_names_the_api_server_refuses(name: str, why: str):
    problem = job_name_problem(name)
    assert problem is not None and why in problem
    assert not validate_manifest(_job(name)).ok


def test_a_service_name_must_start_with_a_letter(tmp_path: Path):
    # A DNS-1123 label, so the job itself is stored; its Service "1ctr" would not be.
    assert job_name_problem("1ctr") is None
    result = _cli(tmp_path, "validate", _job("1ctr"))
    assert result.exit_code == 2
    assert "the Service name '1ctr' must be a DNS-1035 label" in result.output


def test_the_longest_job_name_leaves_room_for_every_derived_name():
    # From the objects as rendered, not from a copy of how each name is made. The
    # evaluator's "-evaluator-0" is as long as the largest worker's "-worker-1023" (1000+
    # pods take a minute to render).
    name = "j" * MAX_JOB_NAME_LENGTH
    result = validate_manifest(_job(name, evaluator={"replicas": 1}))
    assert result.ok, result.problems
    assert with_derived_names(result).problems == []
    objects = build_objects(result.job, result.plan)
    assert max(len(o["metadata"]["name"]) for o in objects) <= 63


def test_a_derived_name_over_its_limit_is_named():
    result = validate_manifest(_job("ctr"))
    assert result.job is not None and isinstance(result.plan, ShardPlan)
    long = result.job.model_copy(
        update={"metadata": result.job.metadata.model_copy(update={"name": "x" * 60})}
    )
    problems = object_name_problems(build_objects(long, result.plan))
    assert any("the pod " in p and "'s hostname" in p and "at most 63" in p for p in problems)
    assert not any("the Service name" in p for p in problems)  # 60 is still a label


def test_rules():
    assert name_problem("a.b", "subdomain") is None
    assert name_problem("a.b", "label") is not None
    assert name_problem("Ab_c.d", "label-value") is None
    assert name_problem("_a", "label-value") is not None
