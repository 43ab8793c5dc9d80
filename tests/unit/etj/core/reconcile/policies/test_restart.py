"""policies/restart: which failures are retried; which replicas restart together."""

from __future__ import annotations

import pytest

from etj.api.trainer_reasons import (
    REASON_CHECKPOINT_MISMATCH,
    REASON_DATA_ERROR,
    REASON_MODEL_ERROR,
)
from etj.core.reconcile.policies.restart import classify, restart_group
from etj.core.tfconfig import ReplicaSet
from tests.unit.reconcile_helpers import pod

PS = ReplicaSet(chief=1, worker=3, ps=2, evaluator=1)
MW = ReplicaSet(chief=0, worker=3)


@pytest.mark.parametrize(
    ("policy", "code", "reason", "terminating", "permanent"),
    [
        ("OnFailure", 1, None, False, False),
        ("OnFailure", 137, None, False, False),
        ("Never", 137, None, False, True),
        ("Never", None, None, True, True),
        ("ExitCode", 1, None, False, True),
        ("ExitCode", 127, None, False, True),
        ("ExitCode", 128, None, False, False),
        ("ExitCode", 137, "OOMKilled", False, False),
        ("ExitCode", None, "Evicted", False, False),
        ("ExitCode", None, None, True, False),
        ("ExitCode", 0, None, False, False),
    ],
)
def test_classify(policy, code, reason, terminating, permanent):
    p = pod(
        "worker",
        0,
        "Failed" if not terminating else "Running",
        exit_code=code,
        reason=reason,
        terminating=terminating,
    )
    failure = classify(p, policy)
    assert failure.permanent is permanent
    assert "j-worker-0" in failure.why


def test_parameter_server_groups():
    assert restart_group("ParameterServer", PS, "worker", 2) == {("worker", 2)}
    new_chief = {("chief", 0), ("worker", 0), ("worker", 1), ("worker", 2)}
    assert restart_group("ParameterServer", PS, "ps", 1) == {("ps", 1)} | new_chief
    assert restart_group("ParameterServer", PS, "chief", 0) == new_chief
    assert restart_group("ParameterServer", PS, "evaluator", 0) == {("evaluator", 0)}


def test_parameter_server_groups_without_a_chief():
    """A TFJob's PS + Worker (own program, no chief): each failed replica restarts alone."""
    no_chief = ReplicaSet(chief=0, worker=4, ps=2)
    assert restart_group("ParameterServer", no_chief, "ps", 1) == {("ps", 1)}
    assert restart_group("ParameterServer", no_chief, "worker", 0) == {("worker", 0)}


def test_mirrored_groups_take_every_worker():
    assert restart_group("MultiWorkerMirrored", MW, "worker", 1) == {
        ("worker", 0),
        ("worker", 1),
        ("worker", 2),
    }
    with_chief = ReplicaSet(chief=1, worker=2)
    assert restart_group("MultiWorkerMirrored", with_chief, "chief", 0) == {
        ("chief", 0),
        ("worker", 0),
        ("worker", 1),
    }


def test_a_chief_stopped_by_its_watchdog_restarts_every_replica():
    """Some worker or ps is hung: a new chief alone would hang on it again."""
    everything = {("chief", 0), ("worker", 0), ("worker", 1), ("worker", 2), ("ps", 0), ("ps", 1)}
    assert restart_group("ParameterServer", PS, "chief", 0, "WatchdogTimeout") == everything
    # Any other reason, or none: the chief with its workers (a worker still in a chunk of
    # the chief before can hold the new chief's first chunk), the ps keep running.
    assert restart_group("ParameterServer", PS, "chief", 0, "UnavailableError") == {
        ("chief", 0),
        ("worker", 0),
        ("worker", 1),
        ("worker", 2),
    }
    # Only the chief runs the watchdog under ParameterServer; a worker's reason changes nothing.
    assert restart_group("ParameterServer", PS, "worker", 1, "WatchdogTimeout") == {("worker", 1)}
    assert restart_group("MultiWorkerMirrored", MW, "worker", 0, "WatchdogTimeout") == {
        ("worker", 0),
        ("worker", 1),
        ("worker", 2),
    }


@pytest.mark.parametrize("policy", ["OnFailure", "ExitCode", "Never"])
@pytest.mark.parametrize(
    ("reason", "fix"),
    [
        (REASON_DATA_ERROR, "fix the data"),
        (REASON_CHECKPOINT_MISMATCH, "fix the model or the checkpoint"),
        (REASON_MODEL_ERROR, "fix the model code"),
    ],
)
def test_what_no_restart_cures_is_permanent_under_every_policy(policy, reason, fix):
    """Under OnFailure too: a malformed file or a checkpoint of another model fails again
    on every restart, so the job fails at once with the trainer's message."""
    message = f"{reason}: /data/day_0.txt:81733: expected 40 fields, found 39"
    worker = pod("worker", 1, "Failed", exit_code=2, message=message)
    failure = classify(worker, policy)
    assert failure.permanent
    assert fix in failure.why and "j-worker-1" in failure.why


def test_a_retryable_exit_with_another_reason_is_still_retried():
    worker = pod("worker", 1, "Failed", exit_code=138, message="UnavailableError: ps-0 gone")
    assert not classify(worker, "OnFailure").permanent
    assert not classify(worker, "ExitCode").permanent
