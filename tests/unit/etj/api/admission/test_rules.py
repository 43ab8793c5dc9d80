"""The rules (etj.api.admission.rules): every one tripped by a hostile case, the system-path
regexes, the service-account grant, and the jobs of examples/ admitted everywhere."""

from __future__ import annotations

import re

import pytest

from etj.api.admission import (
    CHECKS,
    SYSTEM_PATH_RE,
    UNCLEAN_PATH_RE,
    Namespace,
    admission_problems,
)
from tests.cases.host_access import HOSTILE, example_jobs

BY_NAME = {c.name: c for c in CHECKS}


def test_every_check_is_exercised_by_a_hostile_case():
    tripped = {check for case in HOSTILE for check, _ in case.refusals}
    # The Windows host-process checks need a Windows node to mean anything; the rest each
    # have a case the API server sees too.
    assert set(BY_NAME) - tripped == {"pod-host-process", "host-process"}


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


def test_every_example_job_is_admitted_everywhere():
    jobs = example_jobs()
    assert len(jobs) >= 15, [p for p, _ in jobs]
    assert [(p, admission_problems(doc)) for p, doc in jobs if admission_problems(doc)] == []


def test_a_service_account_is_allowed_only_where_listed():
    case = next(c for c in HOSTILE if c.id == "pod-template-service-account")
    listed = Namespace(annotations={"training.etj.dev/service-accounts": " ops ,trainer"})
    other = Namespace(annotations={"training.etj.dev/service-accounts": "trainer,ops-2"})
    assert admission_problems(case.manifest, listed) == []
    assert [f for f, _ in admission_problems(case.manifest, other)] == [
        "spec.podTemplate.serviceAccountName"
    ]
