"""etj.core.reconcile.policies.failures, through ``decide``: which failures count, the
back-off said with the restart, per-role restart counts, the OOM cap, and a scaled-away
replica's end."""

from __future__ import annotations

from datetime import timedelta

from etj.api.roles import Role
from etj.api.status import ConditionType, Phase
from etj.core.planner import build_plan
from etj.core.reconcile.policies.failures import fail_or_restart
from etj.core.reconcile.policies.pass_state import _Pass
from etj.core.render.pod import replica_set
from tests.unit.etj.core.reconcile.policies.test_pass_state import _world
from tests.unit.reconcile_helpers import T0, all_pods, make_job, pod, run, with_status


def _failed(job, role: Role, index: int, **kw):
    return [
        p if p.key != (role, index) else pod(role, index, "Failed", **kw) for p in all_pods(job)
    ]


def test_a_repeated_failure_waits_and_says_until_when_and_why():
    job = make_job(status={"phase": "Running", "restartBackoff": {"j-worker-1": {"failures": 1}}})
    d = run(job, _failed(job, Role.WORKER, 1, exit_code=1))
    (event,) = [e for e in d.events if e.reason == "Restarting"]
    assert "restarting j-worker-1 in 20s, at 2026-11-22T12:00:20Z" in event.message
    assert "(back-off after 2 consecutive failures of j-worker-1)" in event.message
    entry = d.status.restart_backoff["j-worker-1"]
    assert (entry.failures, entry.next_restart_time) == (2, "2026-11-22T12:00:20Z")
    restarting = next(c for c in d.status.conditions if c.type == ConditionType.RESTARTING)
    assert restarting.status == "True" and "next restart in 20s" in restarting.message


def test_restarts_are_counted_per_role_of_the_group():
    job = make_job(status={"phase": "Running"})
    d = run(job, _failed(job, Role.PS, 0, exit_code=1))
    # A ps restarts with the chief and its workers: one restart of the job, one of each
    # replica restarted.
    assert d.status.restarts == 1
    assert d.status.replica_statuses.ps.restarts == 1
    assert d.status.replica_statuses.chief.restarts == 1
    assert d.status.replica_statuses.worker.restarts == 2
    assert sorted(d.delete_pods) == ["j-chief-0", "j-ps-0", "j-worker-0", "j-worker-1"]
    assert d.status.phase == Phase.RESTARTING


def test_a_failure_already_restarting_is_not_counted_twice():
    job = make_job(status={"phase": "Running"})
    pods = _failed(job, Role.WORKER, 0, exit_code=1)
    first = run(job, pods)
    again = run(with_status(job, first), pods)
    assert again.status.restarts == first.status.restarts == 1
    assert not [e for e in again.events if e.reason == "Restarting"]


def test_an_oom_kill_at_the_cap_says_the_limit_cannot_grow():
    job = make_job(runPolicy={"maxMemoryOnOOM": "2Gi"}, status={"phase": "Running"})
    pods = _failed(job, Role.WORKER, 0, exit_code=137, reason="OOMKilled", memory_limit=2 * 2**30)
    d = run(job, pods)
    (oom,) = [e for e in d.events if e.reason == "OOMKilled"]
    assert "its memory limit cannot grow" in oom.message and "cap 2.00 GiB" in oom.message
    assert d.status.memory_limits == {}
    assert d.status.phase == Phase.RESTARTING  # restarted all the same, at its limit


def test_the_end_of_a_replica_the_spec_no_longer_has_is_no_failure():
    job = make_job(workers=1, status={"phase": "Running"})
    pods = [*all_pods(job), pod(Role.WORKER, 1, "Failed", exit_code=143)]
    d = run(job, pods)
    assert d.status.restarts == 0
    assert not [e for e in d.events if e.reason == "Restarting"]


def test_the_failures_step_force_deletes_lost_pods_and_ends_the_pass_only_on_failure():
    job = make_job(runPolicy={"restartPolicy": "Never"})
    replicas = replica_set(job, build_plan(job.spec))
    healthy = _Pass(_world(job, all_pods(job)))
    assert not fail_or_restart(healthy, replicas) and healthy.d.force_delete_pods == []
    failed = _Pass(_world(job, _failed(job, Role.WORKER, 0, exit_code=1)))
    assert fail_or_restart(failed, replicas) and failed.st.phase == Phase.FAILED


def test_a_role_restart_policy_overrides_the_jobs_for_that_role_only():
    """As a TFJob replica's restartPolicy: workers Never beside the job's OnFailure fail
    the job; a ps failure is still restarted with the chief."""
    replicas = {"worker": {"replicas": 2, "restartPolicy": "Never"}}
    job = make_job(replicas=replicas, status={"phase": "Running"})
    worker = run(job, _failed(job, Role.WORKER, 1, exit_code=1))
    assert worker.status.phase == Phase.FAILED
    assert "restartPolicy Never" in worker.status.message
    ps = run(job, _failed(job, Role.PS, 0, exit_code=1))
    assert ps.status.phase == Phase.RESTARTING
    assert sorted(ps.delete_pods) == ["j-chief-0", "j-ps-0", "j-worker-0", "j-worker-1"]


def test_a_role_may_be_restarted_under_a_job_that_restarts_nothing():
    replicas = {"worker": {"replicas": 2}, "ps": {"replicas": 2, "restartPolicy": "OnFailure"}}
    job = make_job(
        replicas=replicas, runPolicy={"restartPolicy": "Never"}, status={"phase": "Running"}
    )
    assert run(job, _failed(job, Role.PS, 1, exit_code=1)).status.phase == Phase.RESTARTING
    assert run(job, _failed(job, Role.WORKER, 0, exit_code=1)).status.phase == Phase.FAILED


def test_a_full_checkpoint_volume_fails_the_job_with_the_condition_saying_what_to_do():
    """Under OnFailure too: every restart would fail at its next save (a crash loop)."""
    job = make_job(status={"phase": "Running"})
    said = (
        "CheckpointStorageFull: the checkpoint volume at /ckpt is full: saving step 600 "
        "failed; it holds 1.00 GiB, 12.00 MiB free; the last checkpoint (ckpt-400) took "
        "300.00 MiB; with checkpoint.keep 3 the volume needs at least 1.17 GiB"
    )
    d = run(job, _failed(job, Role.CHIEF, 0, exit_code=2, message=said))
    assert d.status.phase == Phase.FAILED and d.status.restarts == 0
    full = next(c for c in d.status.conditions if c.type == ConditionType.CHECKPOINT_STORAGE_FULL)
    assert full.status == "True" and full.reason == "CheckpointStorageFull"
    assert full.message.startswith("j-chief-0: the checkpoint volume at /ckpt is full")
    assert "the last checkpoint (ckpt-400) took 300.00 MiB" in full.message
    # The job's own message: the trainer's words and what to fix.
    failed = next(c for c in d.status.conditions if c.type == ConditionType.FAILED)
    assert "the checkpoint volume at /ckpt is full" in failed.message
    assert "fix the checkpoint volume" in failed.message


def test_another_permanent_failure_sets_no_storage_condition():
    job = make_job(status={"phase": "Running"})
    d = run(job, _failed(job, Role.CHIEF, 0, exit_code=2, message="DataError: /d:1: bad"))
    assert d.status.phase == Phase.FAILED
    assert ConditionType.CHECKPOINT_STORAGE_FULL not in {c.type for c in d.status.conditions}


def test_a_ps_failure_seen_after_the_restart_it_caused_is_not_counted_again():
    # One ps OOM kill, seen in two passes: the chief lost its ps and exited first (138,
    # retryable), and was restarted with its workers and counted; the ps' own failure
    # reached the API server after that. One fault: one restart against backoffLimit.
    job = make_job(runPolicy={"backoffLimit": 1}, status={"phase": "Running"})
    chief_exit = _failed(job, Role.CHIEF, 0, exit_code=138, finished_at=T0)
    first = run(job, chief_exit, now=T0 + timedelta(seconds=2))
    assert first.status.restarts == 1
    ps_oom = _failed(
        job, Role.PS, 0, exit_code=137, reason="OOMKilled", finished_at=T0 - timedelta(seconds=1)
    )
    later = run(with_status(job, first), ps_oom, now=T0 + timedelta(seconds=15))
    assert later.status.phase != Phase.FAILED
    assert later.status.restarts == 1
    # It still restarts the ps, and with it the chief and the workers.
    assert sorted(later.delete_pods) == ["j-chief-0", "j-ps-0", "j-worker-0", "j-worker-1"]
    (event,) = [e for e in later.events if e.reason == "Restarting"]
    assert "not counted again" in event.message


def test_a_failure_after_the_last_counted_restart_is_a_new_fault():
    # The same ps failing after the restart was decided (its container ended later) is a
    # second fault, and counts.
    job = make_job(runPolicy={"backoffLimit": 5}, status={"phase": "Running"})
    first = run(job, _failed(job, Role.CHIEF, 0, exit_code=138, finished_at=T0), now=T0)
    ps_later = _failed(job, Role.PS, 0, exit_code=137, finished_at=T0 + timedelta(seconds=30))
    later = run(with_status(job, first), ps_later, now=T0 + timedelta(seconds=31))
    assert later.status.restarts == 2
