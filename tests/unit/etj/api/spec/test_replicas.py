"""etj.api.spec.replicas: roles, their counts and the memory a replica is given."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from etj.api.roles import Role
from etj.api.spec import MAX_PS, PsSpec, ReplicaSpec, ReplicasSpec, ResourceRequirements
from etj.api.spec.run_policy import RestartPolicy


def test_a_replicas_memory_is_its_limit_else_its_request():
    both = ResourceRequirements(requests={"memory": "1Gi"}, limits={"memory": "2Gi"})
    assert both.memory() == "2Gi"
    assert ResourceRequirements(requests={"memory": "1Gi", "cpu": 1}).memory() == "1Gi"
    assert ResourceRequirements(limits={"cpu": 2}).memory() is None


def test_the_defaults_two_workers_and_no_chief_or_ps_given():
    r = ReplicasSpec()
    assert r.worker.replicas == 2 and r.chief is None and r.ps is None and r.evaluator is None


@pytest.mark.parametrize("count", ["auto", 1, MAX_PS])
def test_the_ps_count_is_auto_or_within_bounds(count):
    assert PsSpec(replicas=count).replicas == count


@pytest.mark.parametrize(("count", "words"), [(0, ">= 1"), (MAX_PS + 1, f"<= {MAX_PS}")])
def test_a_ps_count_out_of_bounds_says_the_bound(count, words):
    with pytest.raises(ValidationError, match=words):
        PsSpec(replicas=count)


def test_someone_must_train():
    with pytest.raises(ValidationError, match="a chief or at least one worker"):
        ReplicasSpec.model_validate({"chief": {"replicas": 0}, "worker": {"replicas": 0}})
    only_chief = ReplicasSpec.model_validate({"chief": {"replicas": 1}, "worker": {"replicas": 0}})
    assert only_chief.worker.replicas == 0


def test_at_most_one_chief_and_one_evaluator():
    with pytest.raises(ValidationError):
        ReplicasSpec.model_validate({"chief": {"replicas": 2}})
    with pytest.raises(ValidationError, match="at most one evaluator"):
        ReplicasSpec.model_validate({"evaluator": {"replicas": 2}})


def test_every_role_takes_its_own_restart_policy_else_the_jobs():
    spec = ReplicasSpec.model_validate(
        {"worker": {"restartPolicy": "Never"}, "ps": {"restartPolicy": "OnFailure"}}
    )
    assert spec.restart_policy_of(Role.WORKER, RestartPolicy.EXIT_CODE) == RestartPolicy.NEVER
    assert spec.restart_policy_of(Role.PS, RestartPolicy.EXIT_CODE) == RestartPolicy.ON_FAILURE
    assert spec.restart_policy_of(Role.CHIEF, RestartPolicy.EXIT_CODE) == RestartPolicy.EXIT_CODE
    # One declaration: the ps' field is the other roles' (same type, same description).
    ps, worker = PsSpec.model_fields, ReplicaSpec.model_fields
    for name in ("restart_policy", "template"):
        assert ps[name].annotation == worker[name].annotation
        assert ps[name].description == worker[name].description
