"""The chart's admission policy as ``etj validate`` applies it (etj.api.admission), over the
same cases the real API server gets (tests/integration/test_admission_policy.py), and the
generated chart template kept in step with the rules."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from etj.api.admission import (
    CHART_TEMPLATE,
    CHECKS,
    SYSTEM_PATH_RE,
    UNCLEAN_PATH_RE,
    chart_template,
    host_access_problems,
    policy,
)
from etj.cli.main import main
from etj.core.validation import validate_manifest
from tests.cases.host_access import HOSTILE, ORDINARY_CASES, Case

ROOT = Path(__file__).resolve().parents[4]
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
        assert f": {field}: {BY_NAME[check].why}; " in line
        assert "training.etj.dev/allow-privileged" in line


@pytest.mark.parametrize("case", HOSTILE, ids=lambda c: c.id)
def test_etj_validate_accepts_it_for_an_opted_in_namespace(tmp_path: Path, case: Case):
    result = _validate(tmp_path, case, "--allow-privileged")
    assert result.exit_code == 0, result.output
    assert "valid" in result.output


@pytest.mark.parametrize("case", ORDINARY_CASES, ids=lambda c: c.id)
def test_ordinary_jobs_are_valid_everywhere(tmp_path: Path, case: Case):
    assert _validate(tmp_path, case).exit_code == 0
    assert host_access_problems(case.manifest) == []


def test_every_check_is_exercised_by_a_hostile_case():
    tripped = {check for case in HOSTILE for check, _ in case.refusals}
    # The Windows host-process checks need a Windows node to mean anything; the rest each
    # have a case the API server sees too.
    assert set(BY_NAME) - tripped == {"pod-host-process", "host-process"}


def test_the_operator_and_etj_run_do_not_apply_the_policy():
    # The API server decided (the namespace may have opted in); local runs are processes.
    hostile = HOSTILE[0].manifest
    assert validate_manifest(hostile).ok
    assert not validate_manifest(hostile, host_access=False).ok


@pytest.mark.parametrize(
    ("path", "refused"),
    [
        ("/", True),
        ("/etc", True),
        ("/etc/", True),
        ("/etc/ssl", True),
        ("/usr/local/bin", True),
        ("/var", True),
        ("/var/", True),
        ("/var/run", True),
        ("/var/run/secrets/kubernetes.io", True),
        ("/proc/sys", True),
        ("/etcetera", False),
        ("/var/lib/etj/checkpoints", False),
        ("/var/runner", False),
        ("/data", False),
        ("/tmp/x", False),
    ],
)
def test_system_paths(path: str, refused: bool):
    assert (re.search(SYSTEM_PATH_RE, path) is not None) is refused


@pytest.mark.parametrize(
    ("path", "refused"),
    [("//etc", True), ("/a/../etc", True), ("/a/./b", True), ("/a/..", True), ("/a..b/c.d", False)],
)
def test_unclean_paths(path: str, refused: bool):
    assert (re.search(UNCLEAN_PATH_RE, path) is not None) is refused


def test_committed_chart_template_matches_the_rules():
    assert (ROOT / CHART_TEMPLATE).read_text() == chart_template(), (
        f"{CHART_TEMPLATE} is out of date with etj.api.admission: run `make crds`"
    )


def test_policy_has_one_validation_per_check_with_its_message():
    spec = policy()["spec"]
    assert [v["message"] for v in spec["validations"]] == [c.message for c in CHECKS]
    assert all("\n" not in v["message"] for v in spec["validations"])
    assert {v["name"] for v in spec["variables"]} == {"pods", "containers", "volumes"}


@pytest.mark.parametrize(
    ("field", "value", "refused"),
    [
        ("hostNetwork", 1, False),  # CEL: 1 == true is false
        ("hostNetwork", "true", False),
        ("securityContext.runAsUser", 0.0, True),  # CEL: 0.0 == 0
        ("securityContext.runAsUser", False, False),
        ("securityContext.runAsUser", 1000, False),
    ],
)
def test_python_compares_as_cel_does(field: str, value: object, refused: bool):
    check = next(c for c in CHECKS if c.scope.name == "pods" and c.field == field)
    assert check.refused(value) is refused


def test_a_value_of_another_type_is_refused_as_the_policy_refuses_it():
    by_kind = {c.kind: c for c in CHECKS}
    assert by_kind["beyond"].refused("SYS_ADMIN")
    assert by_kind["matches"].refused(5)
    assert not by_kind["beyond"].refused(["NET_BIND_SERVICE"])
