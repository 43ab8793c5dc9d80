"""Kubernetes conventions of the API (issue 15, item 3): managedBy is immutable, startTime
restarts on resume so activeDeadlineSeconds never counts suspended time, every condition
has a reason, and etj has a category of its own."""

from __future__ import annotations

import inspect
import re
from datetime import timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from etj.api.constants import CATEGORIES, MANAGED_BY, SHORT_NAMES
from etj.api.spec import IMMUTABLE_MANAGED_BY
from etj.api.status import (
    CONDITION_REASON_PATTERN,
    Condition,
    EmbeddingTrainingJobStatus,
    Phase,
)
from etj.core.crd import build_crd
from etj.core.reconcile import decide as real_decide
from etj.core.reconcile.conditions import set_condition
from etj.core.reconcile.decision import Decision, iso
from etj.core.reconcile.policies.finish import failed_status
from tests.unit import reconcile_helpers
from tests.unit.etj.core.reconcile import test_decide
from tests.unit.reconcile_helpers import T0, all_pods, make_job, run, with_status


def _schema() -> dict[str, Any]:
    return build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


# --- managedBy ------------------------------------------------------------------------


def test_managed_by_carries_a_cel_transition_rule_in_the_crd():
    spec = _schema()["properties"]["spec"]
    rules = [r for r in spec["x-kubernetes-validations"] if "oldSelf" in r["rule"]]
    assert rules == [IMMUTABLE_MANAGED_BY]
    rule = rules[0]
    assert rule["fieldPath"] == ".runPolicy.managedBy"
    assert "immutable" in rule["message"]
    # Both sides fall back to the default, so a job created without runPolicy (or without
    # managedBy) cannot gain another manager later.
    assert rule["rule"].count(f"'{MANAGED_BY}'") == 2
    assert "has(oldSelf.runPolicy)" in rule["rule"] and "has(self.runPolicy)" in rule["rule"]
    field = spec["properties"]["runPolicy"]["properties"]["managedBy"]
    assert field["default"] == MANAGED_BY


# --- startTime and activeDeadlineSeconds ----------------------------------------------


def test_suspended_hour_does_not_count_against_active_deadline():
    hour = timedelta(hours=1)
    spec = {"runPolicy": {"activeDeadlineSeconds": 7200}}
    job = make_job(**spec)
    d = run(job, [], now=T0)
    assert d.status.start_time == iso(T0)

    # Ran for 30 minutes, then suspended for an hour.
    suspended = make_job(runPolicy={**spec["runPolicy"], "suspend": True})
    d = run(with_status(suspended, d), all_pods(job), now=T0 + hour / 2)
    assert d.status.phase == Phase.SUSPENDED

    resumed_at = T0 + hour / 2 + hour
    d = run(with_status(job, d), [], now=resumed_at)
    assert d.status.phase == Phase.PENDING and len(d.create_pods) == 5
    assert d.status.start_time == iso(resumed_at)
    # The deadline counts from the resume: two full hours left, not 30 minutes.
    assert d.requeue_after == 7200

    # 1h45m after the resume (3h15m of wall-clock time since the first start): still running.
    d = run(with_status(job, d), all_pods(job), now=resumed_at + hour * 1.75)
    assert d.status.phase == Phase.RUNNING
    assert d.requeue_after == pytest.approx(900)
    # Two hours after the resume: the deadline is reached.
    d = run(with_status(job, d), all_pods(job), now=resumed_at + 2 * hour)
    assert d.status.phase == Phase.FAILED
    failed = next(c for c in d.status.conditions if c.type == "Failed")
    assert failed.reason == "DeadlineExceeded"


def test_job_created_suspended_has_no_start_time_until_resumed():
    suspended = make_job(runPolicy={"suspend": True, "activeDeadlineSeconds": 60})
    d = run(suspended, [], now=T0)
    assert d.status.phase == Phase.SUSPENDED and d.status.start_time is None
    later = T0 + timedelta(days=1)
    d = run(with_status(make_job(runPolicy={"activeDeadlineSeconds": 60}), d), [], now=later)
    assert d.status.phase == Phase.PENDING and d.status.start_time == iso(later)
    assert d.requeue_after == 60


# --- conditions always have a reason --------------------------------------------------


def test_a_condition_without_a_reason_cannot_be_built():
    with pytest.raises(ValidationError, match="reason"):
        Condition(type="Running", status="True")  # type: ignore[call-arg]
    with pytest.raises(ValidationError, match="reason"):
        Condition(type="Running", status="True", reason="")
    with pytest.raises(ValidationError, match="reason"):
        set_condition([], "Running", True, "", "msg", iso(T0), 1)
    with pytest.raises(ValidationError, match="reason"):
        Condition(type="Running", status="True", reason="not camel case")


def test_crd_requires_a_reason_with_the_metav1_pattern():
    cond = _schema()["properties"]["status"]["properties"]["conditions"]["items"]
    assert "reason" in cond["required"]
    assert cond["properties"]["reason"]["pattern"] == CONDITION_REASON_PATTERN
    assert cond["properties"]["reason"]["minLength"] == 1


def _scenarios() -> list[Any]:
    """Every test of test_decide that takes no fixtures: its scenarios."""
    tests = [
        f
        for name, f in inspect.getmembers(test_decide, inspect.isfunction)
        if name.startswith("test_") and not inspect.signature(f).parameters
    ]
    assert len(tests) >= 20, "test_decide lost its scenarios"
    return tests


def test_no_decision_of_the_reconcile_scenarios_has_a_condition_without_a_reason(
    monkeypatch: pytest.MonkeyPatch,
):
    decisions: list[Decision] = []

    def recording(world: Any) -> Decision:
        d = real_decide(world)
        decisions.append(d)
        return d

    monkeypatch.setattr(reconcile_helpers, "decide", recording)
    monkeypatch.setattr(test_decide, "decide", recording)
    for scenario in _scenarios():
        scenario()
    statuses = [d.status for d in decisions if d.status is not None]
    statuses.append(failed_status(EmbeddingTrainingJobStatus(), "InvalidSpec", "x", iso(T0), 1))
    conditions = [c for st in statuses for c in st.conditions]
    assert len(decisions) >= 25 and len(conditions) >= 40  # the walk saw the scenarios
    pattern = re.compile(CONDITION_REASON_PATTERN)
    bad = [(c.type, c.status, c.reason) for c in conditions if not pattern.match(c.reason)]
    assert bad == []
    # Every condition type the operator sets was seen at least once.
    assert {c.type for c in conditions} >= {
        "Created",
        "Running",
        "Restarting",
        "Suspended",
        "Succeeded",
        "Failed",
    }


# --- categories -----------------------------------------------------------------------


def test_etj_has_its_own_category_that_does_not_shadow_its_short_name():
    names = build_crd()["spec"]["names"]
    assert names["categories"] == CATEGORIES
    own = [c for c in names["categories"] if c != "all"]
    assert own == ["etj-all"]
    # kubectl expands categories before short names: a category named like a short name
    # (or the plural/singular) would change what `kubectl get etj` means.
    taken = {*SHORT_NAMES, names["plural"], names["singular"], names["kind"].lower()}
    assert not set(own) & taken
