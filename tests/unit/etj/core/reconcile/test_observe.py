"""observe_pod: a Pod object as the API returns it, read into a PodState."""

from etj.core.reconcile.observe import observe_pod


def pod_obj(**status):
    return {
        "metadata": {
            "name": "j-worker-1",
            "labels": {
                "training.etj.dev/replica-type": "worker",
                "training.etj.dev/replica-index": "1",
            },
        },
        "spec": {"containers": [{"name": "trainer", "resources": {"limits": {"memory": "2Gi"}}}]},
        "status": status,
    }


def test_failed_with_oom():
    p = observe_pod(
        pod_obj(
            phase="Failed",
            containerStatuses=[{"state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}],
        )
    )
    assert p and p.role == "worker" and p.index == 1
    assert p.exit_code == 137 and p.oom_killed and p.memory_limit == 2 * 2**30
    assert p.finished and not p.active


def test_evicted_reason_from_pod_status():
    p = observe_pod(pod_obj(phase="Failed", reason="Evicted"))
    assert p and p.reason == "Evicted" and p.exit_code is None


def test_running_ready_and_terminating():
    obj = pod_obj(phase="Running", conditions=[{"type": "Ready", "status": "True"}])
    obj["metadata"]["deletionTimestamp"] = "2026-11-22T12:00:00Z"
    p = observe_pod(obj)
    assert p and p.ready and p.terminating and not p.active
    assert "was deleted" in p.describe()


def test_foreign_pod_is_ignored():
    assert observe_pod({"metadata": {"name": "x", "labels": {}}}) is None


def _terminated(message):
    return pod_obj(
        phase="Failed",
        containerStatuses=[
            {"state": {"terminated": {"exitCode": 138, "reason": "Error", "message": message}}}
        ],
    )


def test_the_trainers_reason_comes_from_the_termination_message():
    p = observe_pod(_terminated("WatchdogTimeout: watchdog: no training step completed for 20s"))
    assert p and p.message and p.trainer_reason == "WatchdogTimeout"
    assert p.describe() == "j-worker-1 failed with exit code 138 (Error, WatchdogTimeout)"


def test_a_log_tail_fallback_is_no_reason():
    """FallbackToLogsOnError puts the end of the log there: not a reason to act on."""
    tail = "2026-11-22 23:51:17,162 ERROR etj_trainer.main: something\nTraceback (most recent call last):"
    p = observe_pod(_terminated(tail))
    assert p and p.message == tail and p.trainer_reason is None
    assert p.describe() == "j-worker-1 failed with exit code 138 (Error)"


def test_a_data_error_names_the_file_and_line_in_the_description():
    p = observe_pod(_terminated("DataError: /data/day_0.txt:81733: expected 40 fields, found 39"))
    assert p and p.trainer_reason == "DataError"
    assert p.describe() == (
        "DataError: /data/day_0.txt:81733: expected 40 fields, found 39 "
        "(j-worker-1 failed with exit code 138)"
    )


def test_disruption_conditions_of_kubernetes_and_kueue():
    for kind in ("DisruptionTarget", "TerminationTarget"):
        cond = {"type": kind, "status": "True", "reason": "Preempted"}
        p = observe_pod(pod_obj(phase="Failed", conditions=[cond]))
        assert p and p.disrupted and p.preempted, kind
        assert "disrupted" in p.describe()
    cond = {"type": "DisruptionTarget", "status": "False"}
    p = observe_pod(pod_obj(phase="Failed", conditions=[cond]))
    assert p and not p.disrupted and not p.preempted


def test_the_cluster_size_a_pod_was_made_for():
    """The worker count its TF_CONFIG names (policies.scale); not said: None, not 0."""
    obj = pod_obj(phase="Running")
    assert observe_pod(obj).cluster_workers is None
    obj["metadata"]["annotations"] = {"training.etj.dev/cluster-workers": "4"}
    assert observe_pod(obj).cluster_workers == 4
    obj["metadata"]["annotations"] = {"training.etj.dev/cluster-workers": "four"}
    assert observe_pod(obj).cluster_workers is None
