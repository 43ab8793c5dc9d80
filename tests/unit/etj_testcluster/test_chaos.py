"""etj_testcluster.chaos: the soak's seeded schedule covers every fault it owes (a short one
both strategies), and each invariant catches the state it names, on snapshots built here."""

from __future__ import annotations

from typing import Any

from etj_testcluster.chaos import (
    CI_KINDS,
    MWM_STRATEGY,
    PS_STRATEGY,
    Fault,
    FaultKind,
    JobUnderTest,
    Outcome,
    coverage,
    digest_violations,
    digest_vs_saved,
    host_path,
    no_orphan_pods,
    one_live_pod_per_replica,
    restarts_as_policy_says,
    restore_violations,
    schedule,
    snapshot_violations,
    status_true_to_pods,
    steps_for,
    steps_lost,
    table,
)

PS = JobUnderTest("ps", PS_STRATEGY, {"chief": 1, "worker": 3, "ps": 2}, every_steps=100)
MWM = JobUnderTest("mwm", MWM_STRATEGY, {"worker": 3}, every_steps=50)
NODES = ["etj-worker", "etj-worker2"]


def pod(
    name: str, job: str, role: str, index: int, phase: str = "Running", **meta: Any
) -> dict[str, Any]:
    labels = {
        "training.etj.dev/job-name": job,
        "training.etj.dev/replica-type": role,
        "training.etj.dev/replica-index": str(index),
    }
    return {
        "metadata": {"name": name, "labels": labels, **meta},
        "status": {"phase": phase},
    }


def job(name: str, uid: str = "u1", phase: str = "Running", **status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "uid": uid},
        "spec": {"replicas": {"worker": {"replicas": 2}}},
        "status": {"phase": phase, **status},
    }


def test_the_schedule_owes_each_fault_on_every_role_and_is_seeded():
    full = schedule(7, [PS, MWM], NODES)
    owed = coverage([PS, MWM], NODES, FaultKind)
    assert len(full) == len(owed)
    kinds = {(f.kind, f.job, f.role) for f in full}
    for role in ("chief", "worker", "ps"):
        for kind in (FaultKind.POD_SIGKILL, FaultKind.POD_DELETE):
            assert (kind, "ps", role) in kinds
    assert (FaultKind.POD_SIGKILL, "mwm", "worker") in kinds
    assert (FaultKind.POD_DELETE, "mwm", "worker") in kinds
    assert (FaultKind.SAME_ROLE_TWICE, "ps", "ps") in kinds
    assert (FaultKind.SAME_ROLE_TWICE, "mwm", "worker") in kinds
    assert (FaultKind.PS_OOM, "ps", "ps") in kinds
    assert (FaultKind.PS_OOM, "mwm", "ps") not in kinds  # no ps there
    assert {f.kind for f in full} == set(FaultKind)
    for f in full:
        if f.kind in (FaultKind.NODE_STOP, FaultKind.NODE_DRAIN):
            assert f.node in NODES and f.job is None
        if f.job == "ps" and f.role == "worker":
            assert f.index in range(3)
        assert 5 <= f.gap <= 30
    assert schedule(7, [PS, MWM], NODES) == full
    assert schedule(8, [PS, MWM], NODES) != full


def test_a_short_schedule_hits_both_strategies_and_a_long_one_repeats_what_is_owed():
    for seed in range(20):
        short = schedule(seed, [PS, MWM], NODES, count=5, kinds=CI_KINDS)
        assert len(short) == 5
        assert {"ps", "mwm"} <= {f.job for f in short}, short
        assert not {f.kind for f in short} & {FaultKind.NODE_STOP, FaultKind.NODE_DRAIN}
    owed = coverage([PS, MWM], NODES, FaultKind)
    long = schedule(1, [PS, MWM], NODES, count=len(owed) + 10)
    assert len(long) == len(owed) + 10
    assert {f.kind for f in long} == set(FaultKind)


def test_training_steps_outlast_the_schedule_in_whole_intervals():
    assert steps_for(1200, 2.5, 100) == 3000
    assert steps_for(1201, 2.5, 100) == 3100
    assert steps_for(1, 0.1, 50) == 50


def test_two_live_pods_of_one_replica_are_caught_a_finished_one_beside_is_not():
    pods = [
        pod("ps-worker-0", "ps", "worker", 0),
        pod("ps-worker-0-old", "ps", "worker", 0, phase="Failed"),
        pod("ps-ps-0", "ps", "ps", 0),
    ]
    assert one_live_pod_per_replica(pods) == []
    pods.append(pod("ps-worker-0-x", "ps", "worker", 0, phase="Pending"))
    (wrong,) = one_live_pod_per_replica(pods)
    assert "ps/worker/0" in wrong and "ps-worker-0-x" in wrong


def test_pods_of_a_gone_an_earlier_or_a_finished_job_are_orphans():
    ref = [{"kind": "EmbeddingTrainingJob", "uid": "old"}]
    pods = [
        pod("a-worker-0", "a", "worker", 0),
        pod("gone-worker-0", "gone", "worker", 0),
        pod("a-worker-1", "a", "worker", 1, ownerReferences=ref),
        pod("done-ps-0", "done", "ps", 0),
        pod("done-chief-0", "done", "chief", 0, phase="Succeeded"),
        pod("done-ps-1", "done", "ps", 1, deletionTimestamp="2026-01-01T00:00:00Z"),
    ]
    jobs = [job("a"), job("done", phase="Succeeded")]
    wrong = no_orphan_pods(jobs, pods)
    assert [w.split(":")[0] for w in wrong] == ["gone-worker-0", "a-worker-1", "done-ps-0"]
    assert snapshot_violations(jobs, pods[:1]) == []


def test_status_must_count_the_pods_and_its_phase_agree_with_them():
    pods = [pod("a-worker-0", "a", "worker", 0), pod("a-worker-1", "a", "worker", 1)]
    good = job("a", replicaStatuses={"worker": {"active": 2, "ready": 2}})
    assert status_true_to_pods(good, pods) == []
    stale = job("a", replicaStatuses={"worker": {"active": 2, "ready": 2}})
    wrong = status_true_to_pods(stale, [pods[0], pod("a-worker-1", "a", "worker", 1, "Pending")])
    assert wrong[0] == "a: status worker.ready=2, pods 1", wrong
    short = job("a", replicaStatuses={"worker": {"active": 1, "ready": 1}})
    assert any("Running with 1/2" in w for w in status_true_to_pods(short, pods[:1]))
    done = job("a", phase="Succeeded", replicaStatuses={})
    assert any("exited 0" in w for w in status_true_to_pods(done, pods))
    exited = [pod("a-worker-0", "a", "worker", 0, phase="Succeeded")]
    assert status_true_to_pods(done, exited) == []


def test_restarts_are_counted_only_where_the_policy_says():
    kill = Fault(FaultKind.POD_SIGKILL, 5, job="ps", role="ps", index=0)
    assert restarts_as_policy_says(kill, "ps", 3, 4) == []
    assert restarts_as_policy_says(kill, "ps", 3, 3)  # a failure not counted
    assert restarts_as_policy_says(kill, "mwm", 0, 1)  # the other job's restart
    drain = Fault(FaultKind.NODE_DRAIN, 5, node="etj-worker")
    assert restarts_as_policy_says(drain, "ps", 2, 2) == []
    (wrong,) = restarts_as_policy_says(drain, "ps", 2, 3)
    assert "node-drain" in wrong and "0..0" in wrong
    delete = Fault(FaultKind.POD_DELETE, 5, job="mwm", role="worker", index=1)
    assert restarts_as_policy_says(delete, "mwm", 0, 0) == []
    assert restarts_as_policy_says(delete, "mwm", 0, 1) == []
    twice = Fault(FaultKind.SAME_ROLE_TWICE, 5, job="mwm", role="worker", index=1)
    # Twice: two rounds, or one when the second kill lands in the first's restart round.
    assert restarts_as_policy_says(twice, "mwm", 0, 1) == []
    assert restarts_as_policy_says(twice, "mwm", 0, 2) == []
    assert restarts_as_policy_says(twice, "mwm", 0, 0)
    assert restarts_as_policy_says(twice, "mwm", 0, 3)


def test_a_restore_behind_the_last_checkpoint_or_beyond_an_interval_is_caught():
    assert steps_lost(460, 400) == 60
    assert steps_lost(460, None) == 0
    assert restore_violations(PS, checkpoint_before=400, step_before=460, restored=400) == []
    assert restore_violations(PS, checkpoint_before=400, step_before=460, restored=None) == []
    (behind,) = restore_violations(PS, checkpoint_before=400, step_before=460, restored=380)
    assert "behind the checkpoint 400" in behind
    (far,) = restore_violations(PS, checkpoint_before=200, step_before=460, restored=200)
    assert "260 steps lost" in far


def test_two_restores_of_one_step_must_restore_one_state():
    same = [{"step": 100, "digest": {"w": 1.5}}, {"step": 100, "digest": {"w": 1.5}}]
    assert digest_violations([*same, {"step": 200, "digest": {"w": 2.0}}]) == []
    (wrong,) = digest_violations([*same, {"step": 100, "digest": {"w": 1.25}}])
    assert "step 100" in wrong


def test_a_restore_that_says_no_digest_is_a_violation():
    # A trainer that logs its restore without the digest cannot be checked: flagged, not
    # skipped (the follow loop's restore had none until issue 39).
    (bare,) = digest_violations([{"step": 300, "path": "/ckpt/ckpt-2"}])
    assert "step 300" in bare and "/ckpt/ckpt-2" in bare and "without a digest" in bare
    (empty,) = digest_violations([{"step": 300, "digest": {}}, {"step": 600, "digest": {"w": 1}}])
    assert "step 300" in empty


def test_a_restored_digest_is_checked_against_the_checkpoints_sums():
    restored = {"step": 300, "path": "/ckpt/ckpt-2", "digest": {"w": 1000.0, "b": 0.0}}
    assert digest_vs_saved(restored, {"w": 1000.0005, "b": 5e-7, "step": 300.0}) == []
    (off,) = digest_vs_saved(restored, {"w": 1000.01, "b": 0.0})
    assert "w sums to 1000.0" in off and "1000.01" in off and "step 300" in off
    (near_zero,) = digest_vs_saved(restored, {"w": 1000.0, "b": 1e-5})
    assert near_zero.startswith("step 300 restored from /ckpt/ckpt-2: b ")
    (missing,) = digest_vs_saved(restored, {"w": 1000.0})
    assert "b restored, not in the checkpoint" in missing
    (bare,) = digest_vs_saved({"step": 300, "path": "/ckpt/ckpt-2"}, {"w": 1000.0})
    assert "without a digest" in bare


def _trainer_pod(mounts: list[dict[str, Any]], volumes: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "metadata": {"name": "ps-chief-0"},
        "spec": {
            "containers": [{"name": "trainer", "volumeMounts": mounts}],
            "volumes": volumes,
        },
    }


CLAIMS = [
    {"metadata": {"name": "other"}, "spec": {"volumeName": "pvc-0"}},
    {"metadata": {"name": "ps-checkpoints"}, "spec": {"volumeName": "pvc-1"}},
]
PVS = [
    {
        "metadata": {"name": "pvc-0"},
        "spec": {"hostPath": {"path": "/var/lib/etj-shared/volumes/a"}},
    },
    {
        "metadata": {"name": "pvc-1"},
        "spec": {"hostPath": {"path": "/var/lib/etj-shared/volumes/b"}},
    },
]


def test_a_checkpoint_a_pod_names_is_found_on_the_host_through_its_claim():
    pod = _trainer_pod(
        [
            {"name": "config", "mountPath": "/etc/etj"},
            {"name": "ckpt", "mountPath": "/var/lib/etj/checkpoints"},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
        [
            {"name": "config", "configMap": {"name": "ps-config"}},
            {"name": "ckpt", "persistentVolumeClaim": {"claimName": "ps-checkpoints"}},
            {"name": "tmp", "emptyDir": {}},
        ],
    )
    found = host_path("/var/lib/etj/checkpoints/ckpt-7", pod, CLAIMS, PVS, "/tmp/etj-kind-shared")
    assert found == "/tmp/etj-kind-shared/volumes/b/ckpt-7"
    # Not on a claim: an emptyDir, a path no mount holds, a mount's name as a mere prefix.
    assert host_path("/tmp/ckpt-7", pod, CLAIMS, PVS, "/tmp/etj-kind-shared") is None
    assert host_path("gs://bucket/ckpt-7", pod, CLAIMS, PVS, "/tmp/etj-kind-shared") is None
    assert host_path("/var/lib/etj/checkpoints2/x", pod, CLAIMS, PVS, "/h") is None
    # A claim not bound (yet), or bound to a volume outside the shared directory.
    assert host_path("/var/lib/etj/checkpoints/ckpt-7", pod, CLAIMS[:1], PVS, "/h") is None
    elsewhere = [{**PVS[1], "spec": {"hostPath": {"path": "/srv/b"}}}]
    assert host_path("/var/lib/etj/checkpoints/ckpt-7", pod, CLAIMS, elsewhere, "/h") is None


def test_the_innermost_mount_and_its_subpath_decide_the_host_path():
    pod = _trainer_pod(
        [
            {"name": "outer", "mountPath": "/data/"},
            {"name": "inner", "mountPath": "/data/ckpt", "subPath": "jobs/ps"},
        ],
        [
            {"name": "outer", "persistentVolumeClaim": {"claimName": "other"}},
            {"name": "inner", "persistentVolumeClaim": {"claimName": "ps-checkpoints"}},
        ],
    )
    assert host_path("/data/ckpt/ckpt-7", pod, CLAIMS, PVS, "/h/") == "/h/volumes/b/jobs/ps/ckpt-7"
    assert host_path("/data/x", pod, CLAIMS, PVS, "/h") == "/h/volumes/a/x"


def test_the_table_has_a_row_per_fault_with_its_figures():
    kill = Fault(FaultKind.POD_SIGKILL, 5, job="ps", role="chief", index=0)
    leader = Fault(FaultKind.LEADER_KILL, 5)
    rows = [
        Outcome(kill, 41.2, steps_lost={"ps": 60}, restarts={"ps": 1}),
        Outcome(leader, None, violations=["x"], note="skipped"),
    ]
    lines = table(rows).splitlines()
    assert len(lines) == 4
    assert [c.strip() for c in lines[0].split(" | ")[:4]] == ["#", "fault", "target", "recover s"]
    assert "pod-sigkill" in lines[2] and "ps-chief-0" in lines[2] and " 41 " in lines[2]
    assert "ps:60" in lines[2] and "ps:+1" in lines[2] and "ok" in lines[2]
    assert "operator-leader-kill" in lines[3] and "1 violated" in lines[3]
