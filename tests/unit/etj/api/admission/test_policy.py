"""The chart's admission policies as ``etj validate`` applies them (etj.api.admission), over
the same cases the real API server gets (tests/integration/etj/api/test_admission_policy.py),
the generated chart template and README table kept in step with the rules, and the jobs of
examples/ accepted."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from etj.api.admission import (
    CHART_TEMPLATE,
    CHECKS,
    IDENTITY_CHECKS,
    POLICIES,
    PRIVILEGED,
    Namespace,
    admission_problems,
    chart_template,
    policy,
    rules_table,
    with_rules_table,
)
from etj.cli.main import main
from etj.core.validation import validate_manifest
from tests.cases.host_access import HOSTILE, ORDINARY_CASES, Case

ROOT = Path(__file__).resolve().parents[5]
BY_NAME = {c.name: c for c in CHECKS}


def _validate(tmp_path: Path, case: Case, *flags: str):  # type: ignore[no-untyped-def]
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(case.manifest))
    return CliRunner().invoke(main, ["validate", str(path), *flags])


@pytest.mark.parametrize("case", HOSTILE, ids=lambda c: c.id)
def test_etj_validate_refuses_host_access_naming_each_field(tmp_path: Path, case: Case):
    result = _validate(tmp_path, case)
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == len(case.refusals), lines
    for (check, field), line in zip(case.refusals, lines, strict=True):
        assert f": {field}: {BY_NAME[check].why}; {BY_NAME[check].grant.how}" in line


@pytest.mark.parametrize("case", HOSTILE, ids=lambda c: c.id)
def test_etj_validate_accepts_it_for_an_opted_in_namespace(tmp_path: Path, case: Case):
    result = _validate(tmp_path, case, *case.validate_flags)
    assert result.exit_code == 0, result.output
    assert "valid" in result.output


@pytest.mark.parametrize(
    "case",
    [c for c in HOSTILE if any(BY_NAME[n].grant != PRIVILEGED for n, _ in c.refusals)],
    ids=lambda c: c.id,
)
def test_a_namespace_open_to_privilege_lends_no_identity(tmp_path: Path, case: Case):
    # allow-privileged lifts the host-access rules only: the deputy's rules stand.
    result = _validate(tmp_path, case, "--allow-privileged")
    assert result.exit_code == 2, result.output
    assert len(result.output.strip().splitlines()) == len(case.refusals)


@pytest.mark.parametrize("case", ORDINARY_CASES, ids=lambda c: c.id)
def test_ordinary_jobs_are_valid_everywhere(tmp_path: Path, case: Case):
    assert _validate(tmp_path, case).exit_code == 0
    assert admission_problems(case.manifest) == []


def test_the_operator_and_etj_run_do_not_apply_the_policy():
    # The API server decided (the namespace may have opted in); local runs are processes.
    hostile = HOSTILE[0].manifest
    assert validate_manifest(hostile).ok
    assert not validate_manifest(hostile, admission=Namespace()).ok


def test_committed_chart_template_matches_the_rules():
    assert (ROOT / CHART_TEMPLATE).read_text() == chart_template(), (
        f"{CHART_TEMPLATE} is out of date with etj.api.admission: run `make crds`"
    )


def test_policy_has_one_validation_per_check_with_its_message():
    messages = []
    for definition in POLICIES:
        spec = policy(definition=definition)["spec"]
        messages += [v["message"] for v in spec["validations"]]
        assert all("\n" not in v["message"] for v in spec["validations"])
        assert {v["name"] for v in spec["variables"]} == {"pods", "containers", "volumes"}
    assert messages == [c.message for c in CHECKS]
    # Each rule once, in one policy; the deputy's rules read their own grants.
    assert len({c.name for c in CHECKS}) == len(CHECKS)
    identity = policy(definition=POLICIES[1])["spec"]["validations"]
    for check, validation in zip(IDENTITY_CHECKS, identity, strict=True):
        grant = check.grant.label or check.grant.annotation
        assert grant in validation["expression"] and "namespaceObject" in validation["expression"]


def test_the_readme_lists_every_rule_as_declared():
    readme = (ROOT / "README.md").read_text()
    assert with_rules_table(readme) == readme, "README's admission table is stale: `make crds`"
    table = rules_table()
    assert all(f"| `{c.name}` |" in table for c in CHECKS)
