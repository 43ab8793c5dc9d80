"""etj.core.reconcile.policies.finish: the status of a job that cannot be parsed, and,
through ``decide``, the passes that end early (an invalid spec, a finished job, a suspended
one)."""

from __future__ import annotations

from dataclasses import replace

from etj.api.roles import Role
from etj.api.status import ConditionType, EmbeddingTrainingJobStatus, Phase
from etj.core.reconcile import World, decide
from etj.core.reconcile.policies.finish import failed_status
from tests.unit.reconcile_helpers import T0, all_pods, later, make_job, pod, run, with_status

T1, T2 = "2026-11-22T12:00:00Z", "2026-11-22T12:10:00Z"


def test_an_unparsable_job_is_failed_once_with_its_reason():
    before = EmbeddingTrainingJobStatus(phase=Phase.RUNNING, message="training")
    st = failed_status(before, "InvalidSpec", "spec.model: missing", T1, 4)
    assert (st.phase, st.message, st.completion_time, st.observed_generation) == (
        Phase.FAILED,
        "spec.model: missing",
        T1,
        4,
    )
    (c,) = st.conditions
    assert (c.type, c.reason) == (ConditionType.FAILED.value, "InvalidSpec")
    assert before.phase == Phase.RUNNING  # a copy
    assert failed_status(st, "InvalidSpec", "other", T2, 5) is st  # already failed: as it is


def test_an_invalid_spec_fails_once_and_stops_every_pod():
    job = make_job(status={"phase": "Running"})
    world = World(
        job=job,
        plan=None,
        plan_error="ps memory: the tables do not fit",
        pods=all_pods(job),
        has_service=True,
        has_config_map=True,
        now=T0,
    )
    d = decide(world)
    assert d.status.phase == Phase.FAILED and d.create_pods == []
    assert sorted(d.delete_pods) == sorted(p.name for p in all_pods(job))
    again = decide(replace(world, job=with_status(job, d), now=later(5)))
    assert again.events == [] and again.status.completion_time == d.status.completion_time


def test_a_finished_job_waits_for_its_ttl_and_cleans_its_running_pods():
    status = {"phase": "Succeeded", "completionTime": T1}
    job = make_job(runPolicy={"ttlSecondsAfterFinished": 600}, status=status)
    d = run(job, [pod(Role.PS, 0), pod(Role.CHIEF, 0, "Succeeded")], now=later(60))
    assert d.delete_pods == ["j-ps-0"] and not d.delete_job
    assert d.requeue_after == 540


def test_a_finished_job_without_ttl_is_kept_and_not_requeued():
    job = make_job(status={"phase": "Failed", "completionTime": T1})
    d = run(job, [], now=later(10**6))
    assert not d.delete_job and d.requeue_after is None


def test_suspending_deletes_the_pods_and_says_so_once():
    job = make_job(runPolicy={"suspend": True}, status={"phase": "Running"})
    d = run(job, all_pods(job))
    assert d.status.phase == Phase.SUSPENDED
    assert sorted(d.delete_pods) == sorted(p.name for p in all_pods(job))
    assert [e.reason for e in d.events] == ["Suspended"]
    again = run(with_status(job, d), [], now=later(5))
    assert again.events == [] and again.status.phase == Phase.SUSPENDED


def test_a_finished_jobs_status_does_not_count_the_pods_it_stops_as_active():
    # The chaos soak on kind: a Succeeded job's status said 2 ps and 3 workers active and
    # ready after the pass that stopped them, and no pass came after (no TTL, no requeue):
    # the status stayed untrue to its pods.
    job = make_job(status={"phase": "Succeeded", "completionTime": T1})
    pods = [p if p.role != Role.CHIEF else pod(Role.CHIEF, 0, "Succeeded") for p in all_pods(job)]
    d = run(job, pods, now=later(60))
    assert sorted(d.delete_pods) == ["j-ps-0", "j-ps-1", "j-worker-0", "j-worker-1"]
    rs = d.status.replica_statuses
    assert (rs.ps.active, rs.ps.ready, rs.worker.active, rs.worker.ready) == (0, 0, 0, 0)
    assert rs.chief.succeeded == 1
    assert d.status.worker_replicas == 0 and d.status.workers == "0/2"
