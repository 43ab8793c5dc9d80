"""The malformed-job corpus against the real API server: every schema and CEL case is
rejected by kube-apiserver itself; every plan case is stored (only the operator can tell,
and it marks those Failed — see test_operator.py)."""

from __future__ import annotations

import pytest

from etj_testcluster import LocalCluster
from tests.cases.malformed import CASES, Case
from tests.integration.conftest import apply_invalid

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(
    "case", [c for c in CASES if c.layer in ("schema", "cel")], ids=lambda c: c.id
)
def test_rejected_by_the_api_server(crds: LocalCluster, namespace: str, case: Case):
    error = apply_invalid(crds, case.manifest, namespace)
    assert error, f"{case.id} was accepted by the API server"
    if case.layer == "cel":
        assert case.message in error
    else:
        # The server names the offending field (its last path element).
        assert case.field.rsplit(".", 1)[-1].split("[")[0] in error, error


@pytest.mark.parametrize("case", [c for c in CASES if c.layer == "plan"], ids=lambda c: c.id)
def test_plan_cases_are_stored(crds: LocalCluster, namespace: str, case: Case):
    assert apply_invalid(crds, case.manifest, namespace) == ""
