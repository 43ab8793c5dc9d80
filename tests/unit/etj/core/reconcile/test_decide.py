"""decide(): each rule of a reconcile pass, as the operator will apply it."""

from __future__ import annotations

from etj.api.spec import step_limit
from etj.api.status import EmbeddingTrainingJobStatus, Evaluation, Phase, Progress
from etj.core.reconcile import World, decide
from tests.unit.reconcile_helpers import T0, all_pods, later, make_job, pod, run, with_status


def test_new_job_creates_service_config_map_and_every_pod():
    job = make_job()
    from etj.core.planner import build_plan

    d = decide(
        World(
            job=job,
            plan=build_plan(job.spec),
            plan_error=None,
            pods=[],
            has_service=False,
            has_config_map=False,
            now=T0,
        )
    )
    assert d.create_service and d.create_config_map
    assert sorted(d.create_pods) == [
        ("chief", 0),
        ("ps", 0),
        ("ps", 1),
        ("worker", 0),
        ("worker", 1),
    ]
    assert d.status.phase == Phase.PENDING
    assert d.status.start_time == "2026-11-22T12:00:00Z"
    assert d.status.shard_plan.ps_replicas == 2
    assert [e.reason for e in d.events] == ["Created"]


def test_existing_pods_are_never_created_again():
    job = make_job()
    d = run(job, all_pods(job, "Pending"))
    assert d.create_pods == [] and d.delete_pods == []
    assert d.status.phase == Phase.PENDING


def test_all_running_is_running_with_workers_column():
    job = make_job()
    d = run(job, all_pods(job))
    assert d.status.phase == Phase.RUNNING
    assert d.status.workers == "2/2"
    assert any(c.type == "Running" and c.status == "True" for c in d.status.conditions)


def test_ps_worker_failure_replaces_only_that_worker_and_counts_it():
    job = make_job(status={"phase": "Running", "startTime": "2026-11-22T12:00:00Z"})
    pods = [
        p if p.key != ("worker", 1) else pod("worker", 1, "Failed", exit_code=137)
        for p in all_pods(job)
    ]
    d = run(job, pods)
    assert d.delete_pods == ["j-worker-1"]
    assert d.create_pods == []  # recreated once the old pod is gone
    assert d.status.restarts == 1
    assert d.status.restarting_pods == ["j-worker-1"]
    assert d.status.replica_statuses.worker.restarts == 1
    assert d.status.phase == Phase.RESTARTING
    # Next pass after the 10 s back-off: the old pod is gone; exactly that one is created,
    # nothing counted twice.
    job2 = with_status(job, d)
    d2 = run(job2, [p for p in pods if p.key != ("worker", 1)], now=later(10))
    assert d2.create_pods == [("worker", 1)]
    assert d2.status.restarts == 1 and d2.status.restarting_pods == []


def test_ps_failure_restarts_ps_chief_and_workers():
    job = make_job(status={"phase": "Running"})
    pods = [
        p if p.key != ("ps", 0) else pod("ps", 0, "Failed", exit_code=137) for p in all_pods(job)
    ]
    d = run(job, pods)
    group = ["j-chief-0", "j-ps-0", "j-worker-0", "j-worker-1"]
    assert d.delete_pods == group
    assert d.status.restarting_pods == group


def test_ps_chief_watchdog_timeout_restarts_every_replica():
    job = make_job(status={"phase": "Running"})
    hung = pod("chief", 0, "Failed", exit_code=138, message="WatchdogTimeout: no step for 600s")
    d = run(job, [p if p.key != ("chief", 0) else hung for p in all_pods(job)])
    everything = ["j-chief-0", "j-ps-0", "j-ps-1", "j-worker-0", "j-worker-1"]
    assert d.delete_pods == everything and d.status.restarting_pods == everything
    assert d.status.restarts == 1, "one decision, one restart of the job"
    restarting = [e for e in d.events if e.reason == "Restarting"]
    assert restarting and "WatchdogTimeout" in restarting[0].message


def test_ps_chief_retryable_failure_without_watchdog_restarts_the_chief_and_its_workers():
    """Not the ps: they keep the tables (the new chief restores over them)."""
    job = make_job(status={"phase": "Running"})
    lost = pod("chief", 0, "Failed", exit_code=138, message="UnavailableError: ps 0 is gone")
    d = run(job, [p if p.key != ("chief", 0) else lost for p in all_pods(job)])
    assert d.delete_pods == ["j-chief-0", "j-worker-0", "j-worker-1"]


def test_mirrored_worker_failure_restarts_all_workers():
    job = make_job("MultiWorkerMirrored", workers=3, status={"phase": "Running"})
    pods = [
        p if p.key != ("worker", 2) else pod("worker", 2, "Failed", exit_code=138)
        for p in all_pods(job)
    ]
    d = run(job, pods)
    assert d.delete_pods == ["j-worker-0", "j-worker-1", "j-worker-2"]
    assert d.status.replica_statuses.worker.restarts == 3
    assert d.status.restarts == 1


def test_exit_code_policy_permanent_failure_fails_job_and_cleans_pods():
    job = make_job(runPolicy={"restartPolicy": "ExitCode"}, status={"phase": "Running"})
    pods = [
        p if p.key != ("worker", 0) else pod("worker", 0, "Failed", exit_code=1)
        for p in all_pods(job)
    ]
    d = run(job, pods)
    assert d.status.phase == Phase.FAILED
    failed = next(c for c in d.status.conditions if c.type == "Failed")
    assert failed.reason == "ReplicaFailed" and "exit code 1" in failed.message
    # cleanPodPolicy Running: every pod still running goes, the failed one stays for logs.
    assert d.delete_pods == ["j-chief-0", "j-ps-0", "j-ps-1", "j-worker-1"]
    assert d.status.completion_time is not None


def test_exit_code_policy_retries_signals():
    job = make_job(runPolicy={"restartPolicy": "ExitCode"}, status={"phase": "Running"})
    pods = [
        p if p.key != ("worker", 0) else pod("worker", 0, "Failed", exit_code=143)
        for p in all_pods(job)
    ]
    assert run(job, pods).status.phase == Phase.RESTARTING


def test_never_policy_fails_on_any_failure():
    job = make_job(runPolicy={"restartPolicy": "Never"}, status={"phase": "Running"})
    pods = [
        p if p.key != ("worker", 0) else pod("worker", 0, "Failed", exit_code=137)
        for p in all_pods(job)
    ]
    assert run(job, pods).status.phase == Phase.FAILED


def test_backoff_limit_exhausted_fails_with_reason():
    job = make_job(runPolicy={"backoffLimit": 2}, status={"phase": "Running", "restarts": 2})
    pods = [
        p if p.key != ("worker", 0) else pod("worker", 0, "Failed", exit_code=137)
        for p in all_pods(job)
    ]
    d = run(job, pods)
    assert d.status.phase == Phase.FAILED
    cond = next(c for c in d.status.conditions if c.type == "Failed")
    assert cond.reason == "BackoffLimitExceeded" and "backoffLimit 2" in cond.message


def test_a_disruption_is_restarted_at_once_and_not_counted_against_backoff_limit():
    """Evicted, preempted or stopped by Kueue (DisruptionTarget / TerminationTarget): as
    batch/v1 Job's podFailurePolicy Ignore, even with the backoffLimit used up."""
    job = make_job(
        strategy="MultiWorkerMirrored",
        runPolicy={"backoffLimit": 2},
        status={"phase": "Running", "restarts": 2},
    )
    gone = pod("worker", 1, "Failed", exit_code=143, disrupted=True)
    pods = [p if p.key != ("worker", 1) else gone for p in all_pods(job)]
    d = run(job, pods)
    assert d.status.phase == Phase.RESTARTING and d.status.restarts == 2
    assert "j-worker-1" in d.delete_pods and not d.status.restart_backoff.get("j-worker-1", None)
    assert "disrupted" in d.events[0].message and "not counted" in d.events[0].message
    # The same exit without the condition is a failure like any other: the limit holds.
    crashed = pod("worker", 1, "Failed", exit_code=143)
    pods = [p if p.key != ("worker", 1) else crashed for p in all_pods(job)]
    assert run(job, pods).status.phase == Phase.FAILED


def test_deleted_pod_counts_as_a_failure_of_that_replica():
    job = make_job(status={"phase": "Running"})
    pods = [
        p if p.key != ("worker", 0) else pod("worker", 0, "Running", terminating=True)
        for p in all_pods(job)
    ]
    d = run(job, pods)
    assert d.status.restarts == 1
    assert d.status.restarting_pods == ["j-worker-0"]
    assert d.delete_pods == []  # already going
    assert "was deleted" in d.events[0].message


def test_pod_that_vanished_while_operator_was_away_is_recreated():
    job = make_job(status={"phase": "Running"})
    d = run(job, [p for p in all_pods(job) if p.key != ("worker", 1)])
    assert d.create_pods == [("worker", 1)]
    assert d.status.restarts == 0


def test_chief_success_succeeds_job_stops_ps_and_sets_completion():
    job = make_job(status={"phase": "Running"})
    pods = [
        p if p.key != ("chief", 0) else pod("chief", 0, "Succeeded", exit_code=0)
        for p in all_pods(job)
    ]
    d = run(job, pods, now=later(60))
    assert d.status.phase == Phase.SUCCEEDED
    assert d.status.completion_time == "2026-11-22T12:01:00Z"
    assert d.delete_pods == ["j-ps-0", "j-ps-1", "j-worker-0", "j-worker-1"]
    assert d.status.progress.step == step_limit(
        job.spec.training, job.spec.data
    )  # exit 0 means every step ran


def test_success_takes_the_final_step_and_evaluation_from_the_chiefs_message():
    """An epochs job: only the trainer knows the last step. The last scrape (step 1040,
    evaluation of 1200) is older than the end the chief's termination message tells."""
    job = make_job(
        data={"source": "files", "files": {"pattern": "/data/*.csv", "format": "csv"}},
        training={"epochs": 3},
        status={"phase": "Running"},
    )
    message = (
        'TrainingComplete: {"progress":{"step":1250,"loss":0.4},'
        '"evaluation":{"step":1250,"auc":0.72,"logloss":0.5,"examples":2000}}'
    )
    chief = pod("chief", 0, "Succeeded", exit_code=0, message=message)
    pods = [p if p.key != ("chief", 0) else chief for p in all_pods(job)]
    d = run(
        job,
        pods,
        progress=Progress(step=1040),
        evaluation=Evaluation(step=1200, auc=0.7, examples=2000),
    )
    assert d.status.phase == Phase.SUCCEEDED
    assert d.status.progress.step == 1250 and d.status.progress.loss == 0.4
    assert (d.status.evaluation.step, d.status.evaluation.auc) == (1250, 0.72)
    # Without the message (an older trainer), the last scrape is what there is.
    chief = pod("chief", 0, "Succeeded", exit_code=0)
    pods = [p if p.key != ("chief", 0) else chief for p in all_pods(job)]
    d = run(job, pods, progress=Progress(step=1040), evaluation=Evaluation(step=1200))
    assert (d.status.progress.step, d.status.evaluation.step) == (1040, 1200)


def test_clean_pod_policy_none_still_stops_ps():
    job = make_job(runPolicy={"cleanPodPolicy": "None"}, status={"phase": "Running"})
    pods = [p if p.key != ("chief", 0) else pod("chief", 0, "Succeeded") for p in all_pods(job)]
    assert run(job, pods).delete_pods == ["j-ps-0", "j-ps-1"]


def test_a_leader_that_finished_and_does_not_exit_is_stopped_after_the_grace():
    """Issue 36: worker 0 of a MultiWorkerMirrored job reported its last step (checkpoint,
    export and completion record written) and its process stayed; the job must not stay
    Running. Within the grace the operator waits (and looks again when it ends); after
    it, the job Succeeded with the reported progress and the leader's pod is stopped
    (under every cleanPodPolicy)."""
    job = make_job("MultiWorkerMirrored", runPolicy={"cleanPodPolicy": "None"})
    job = job.model_copy(update={"status": EmbeddingTrainingJobStatus(phase=Phase.RUNNING)})
    pods = [pod("worker", 0, "Running"), pod("worker", 1, "Succeeded", exit_code=0)]
    reported = Progress(
        step=step_limit(job.spec.training, job.spec.data), finished_time="2026-11-22T12:00:00Z"
    )
    waiting = run(job, pods, now=later(20), progress=reported)
    assert waiting.status.phase == Phase.RUNNING and waiting.delete_pods == []
    assert waiting.requeue_after == 40
    # A later pass without a fresh scrape reads the time from the status it wrote.
    d = run(with_status(job, waiting), pods, now=later(61))
    assert d.status.phase == Phase.SUCCEEDED
    assert d.delete_pods == ["j-worker-0"]
    assert d.status.progress.step == step_limit(job.spec.training, job.spec.data)
    assert "had not exited 60s after it reported its last step" in d.status.message
    assert [e.reason for e in d.events] == ["JobSucceeded"]


def test_mirrored_without_chief_succeeds_with_worker_zero():
    job = make_job("MultiWorkerMirrored", status={"phase": "Running"})
    pods = [pod("worker", 0, "Succeeded"), pod("worker", 1, "Running")]
    assert run(job, pods).status.phase == Phase.SUCCEEDED


def _own_program(role_count: int = 4) -> dict:
    template = {"spec": {"containers": [{"name": "tensorflow", "command": ["python", "t.py"]}]}}
    return {
        "chief": {"replicas": 0},
        "worker": {"replicas": role_count, "template": template},
        "ps": {"replicas": 2, "template": template},
    }


def test_ps_job_without_chief_runs_worker_zero_as_the_chief():
    """dist-mnist's shape: PS + Worker, no Chief; worker 0's exit 0 ends the job and stops
    the ps; a ps failure restarts that ps alone (there is no coordinator to restore)."""
    job = make_job(replicas=_own_program(), status={"phase": "Running"})
    pods = all_pods(job)
    assert sorted(p.key for p in pods) == [("ps", 0), ("ps", 1)] + [("worker", i) for i in range(4)]
    failed = [p if p.key != ("ps", 1) else pod("ps", 1, "Failed", exit_code=1) for p in pods]
    assert run(job, failed).delete_pods == ["j-ps-1"]
    done = [p if p.key != ("worker", 0) else pod("worker", 0, "Succeeded") for p in pods]
    d = run(job, done)
    assert d.status.phase == Phase.SUCCEEDED
    assert d.delete_pods == ["j-ps-0", "j-ps-1", "j-worker-1", "j-worker-2", "j-worker-3"]
    assert "worker 0" in d.status.message


def test_all_workers_success_policy_waits_for_the_last_worker():
    job = make_job(
        replicas=_own_program(2),
        runPolicy={"successPolicy": "AllWorkers"},
        status={"phase": "Running"},
    )
    first = [pod("ps", 0), pod("ps", 1), pod("worker", 0, "Succeeded"), pod("worker", 1)]
    d = run(job, first)
    assert d.status.phase == Phase.RUNNING
    assert d.delete_pods == [] and d.create_pods == []  # a finished worker is not recreated
    last = [*first[:3], pod("worker", 1, "Succeeded")]
    d = run(job, last)
    assert d.status.phase == Phase.SUCCEEDED
    assert d.delete_pods == ["j-ps-0", "j-ps-1"]
    assert d.status.message == "all 2 workers finished; parameter servers stopped"


def test_ttl_deletes_the_finished_job_when_due():
    status = {"phase": "Succeeded", "completionTime": "2026-11-22T12:00:00Z"}
    job = make_job(runPolicy={"ttlSecondsAfterFinished": 30}, status=status)
    early = run(job, [], now=later(10))
    assert not early.delete_job and early.requeue_after == 20
    assert run(job, [], now=later(30)).delete_job


def test_active_deadline_fails_the_job():
    job = make_job(
        runPolicy={"activeDeadlineSeconds": 100},
        status={"phase": "Running", "startTime": "2026-11-22T12:00:00Z"},
    )
    assert run(job, all_pods(job), now=later(50)).requeue_after == 50
    d = run(job, all_pods(job), now=later(100))
    assert d.status.phase == Phase.FAILED
    assert next(c for c in d.status.conditions if c.type == "Failed").reason == "DeadlineExceeded"


def test_suspend_deletes_pods_and_resume_recreates_them():
    job = make_job(
        runPolicy={"suspend": True},
        status={"phase": "Running", "restarts": 3, "startTime": "2026-11-22T12:00:00Z"},
    )
    d = run(job, all_pods(job))
    assert d.status.phase == Phase.SUSPENDED
    assert len(d.delete_pods) == 5 and d.create_pods == []
    assert d.status.restarts == 3  # kept
    resumed = with_status(make_job(runPolicy={"suspend": False}), d)
    d2 = run(resumed, [])
    assert len(d2.create_pods) == 5
    assert d2.status.restarts == 3
    assert any(e.reason == "Resumed" for e in d2.events)
    assert d2.status.phase == Phase.PENDING


def test_other_manager_is_left_alone():
    job = make_job(runPolicy={"managedBy": "kueue.x-k8s.io/multikueue"})
    d = run(job, [])
    assert d.skipped and d.status is None and d.create_pods == []


def test_invalid_spec_fails_with_reason_and_creates_nothing():
    job = make_job()
    d = decide(
        World(
            job=job,
            plan=None,
            plan_error="spec.replicas.ps: does not fit",
            pods=[],
            has_service=False,
            has_config_map=False,
            now=T0,
        )
    )
    assert d.status.phase == Phase.FAILED
    cond = next(c for c in d.status.conditions if c.type == "Failed")
    assert cond.reason == "InvalidSpec" and "does not fit" in cond.message
    assert d.create_pods == [] and not d.create_service and not d.create_config_map


def test_oom_kill_raises_memory_limit_up_to_the_cap():
    job = make_job(runPolicy={"maxMemoryOnOOM": "3Gi"}, status={"phase": "Running"})
    pods = [
        p
        if p.key != ("worker", 0)
        else pod("worker", 0, "Failed", exit_code=137, reason="OOMKilled", memory_limit=2 * 2**30)
        for p in all_pods(job)
    ]
    d = run(job, pods)
    assert d.status.memory_limits == {"j-worker-0": 3 * 2**30}
    assert any(e.reason == "OOMKilled" and "3.00 GiB" in e.message for e in d.events)


def test_status_is_stable_across_identical_passes():
    job = make_job(status={"phase": "Running"})
    d1 = run(job, all_pods(job))
    d2 = run(with_status(job, d1), all_pods(job), now=later(5))
    assert d2.status == d1.status
    assert d2.events == []
