"""policies/scale and its place in decide: a change of the worker count restarts, in order,
the pods whose cluster must change; never counted as a failure."""

from __future__ import annotations

from dataclasses import replace

from etj.api.roles import ReplicaSet
from etj.api.status import ConditionType
from etj.core.reconcile.observe import PodState
from etj.core.reconcile.policies.scale import scale_done, scale_step
from tests.unit.reconcile_helpers import make_job, pod, run, with_status

# A job whose pods were made (the Created condition set): what a running job's status has.
CREATED = {"type": "Created", "status": "True", "reason": "PodsCreated"}
PS4 = ReplicaSet(chief=1, worker=4, ps=2)
PS1 = ReplicaSet(chief=1, worker=1, ps=2)
MW3 = ReplicaSet(chief=0, worker=3)


def cluster(replicas: ReplicaSet, workers: int, phase: str = "Running") -> list[PodState]:
    """The pods of a job whose TF_CONFIG names ``workers`` workers."""
    tasks = ReplicaSet(replicas.chief, workers, replicas.ps, replicas.evaluator).tasks()
    return [pod(r, i, phase, cluster_workers=workers) for r, i in tasks]


def named(pods: list[PodState], name: str, **changes: object) -> list[PodState]:
    return [replace(p, **changes) if p.name == name else p for p in pods]  # type: ignore[arg-type]


def condition(d, type_: ConditionType):
    return next(c for c in d.status.conditions if c.type == type_)


# ---- the pure step ---------------------------------------------------------------------


def test_nothing_to_do_when_every_pod_runs_the_spec_cluster():
    step = scale_step("ParameterServer", PS4, cluster(PS4, 4), [])
    assert step.stop == [] and step.replacing == [] and not step.hold and step.message is None
    assert scale_done("ParameterServer", cluster(PS4, 4), PS4)
    # Under ParameterServer only the chief must run the new cluster.
    mixed = [*cluster(PS4, 4)[:1], *cluster(PS4, 2)[1:]]
    assert scale_done("ParameterServer", mixed, PS4)
    assert not scale_done("MultiWorkerMirrored", mixed, PS4)


def test_pods_that_do_not_say_their_cluster_are_left_alone():
    """Made by an etj that did not annotate them: no restart on their account."""
    pods = [replace(p, cluster_workers=None) for p in cluster(PS4, 2)]
    assert scale_step("ParameterServer", PS4, pods, []).stop == []
    assert scale_step("MultiWorkerMirrored", MW3, pods, []).stop == []


def test_parameter_server_scale_up_stops_the_chief_alone():
    step = scale_step("ParameterServer", PS4, cluster(PS4, 2), [])
    assert step.stop == ["j-chief-0"] and step.replacing == ["j-chief-0"]
    assert (step.before, step.after) == (2, 4)
    assert step.message is not None and "2 -> 4" in step.message and "checkpoint" in step.message
    assert not step.hold  # the new workers are made at once
    # Once deleted (the chief checkpoints as it stops): nothing more, and said once.
    terminating = named(cluster(PS4, 2), "j-chief-0", terminating=True)
    again = scale_step("ParameterServer", PS4, terminating, ["j-chief-0"])
    assert again.stop == [] and again.message is None


def test_parameter_server_scale_down_keeps_the_removed_workers_until_the_chief_stopped():
    pods = cluster(PS1, 4)
    step = scale_step("ParameterServer", PS1, pods, [])
    assert step.stop == ["j-chief-0"]
    assert step.hold == {("worker", 1), ("worker", 2), ("worker", 3)}
    gone = [p for p in pods if p.name != "j-chief-0"]
    assert not scale_step("ParameterServer", PS1, gone, ["j-chief-0"]).hold


def test_mirrored_stops_the_leader_first_then_the_others():
    pods = cluster(MW3, 2)
    first = scale_step("MultiWorkerMirrored", MW3, pods, [])
    assert first.stop == ["j-worker-0"]
    assert set(first.replacing) == {"j-worker-0", "j-worker-1"}
    assert ("worker", 2) in first.hold  # nothing is made while the old cluster remains
    assert first.message is not None
    checkpointing = named(pods, "j-worker-0", terminating=True)
    waiting = scale_step("MultiWorkerMirrored", MW3, checkpointing, first.replacing)
    assert waiting.stop == [] and waiting.message is None and waiting.hold == first.hold
    leader_gone = [p for p in pods if p.name != "j-worker-0"]
    rest = scale_step("MultiWorkerMirrored", MW3, leader_gone, first.replacing)
    assert rest.stop == ["j-worker-1"] and rest.message is None
    assert scale_step("MultiWorkerMirrored", MW3, [], first.replacing).hold == frozenset()


# ---- in decide -------------------------------------------------------------------------


def test_decide_parameter_server_scale_up_to_four():
    job = make_job(workers=4, status={"phase": "Running", "restarts": 1, "conditions": [CREATED]})
    d = run(job, cluster(PS4, 2))
    assert d.delete_pods == ["j-chief-0"]
    assert sorted(d.create_pods) == [("worker", 2), ("worker", 3)]
    assert [e.reason for e in d.events] == ["Scaled"]
    assert d.status.restarts == 1  # the restart budget is untouched
    assert d.status.restarting_pods == ["j-chief-0"]
    scaling = condition(d, ConditionType.SCALING)
    assert (scaling.status, scaling.reason) == ("True", "WorkersChanged")
    # The chief checkpoints and exits while being deleted: not a failure.
    job = with_status(job, d)
    stopping = named(cluster(PS4, 2), "j-chief-0", terminating=True, phase="Failed", exit_code=143)
    stopping += [pod("worker", i, "Pending", cluster_workers=4) for i in (2, 3)]
    d = run(job, stopping)
    assert d.delete_pods == [] and d.create_pods == [] and d.events == []
    assert d.status.restarts == 1
    # Gone: made again with the new cluster, then everything runs.
    job = with_status(job, d)
    d = run(job, [p for p in stopping if p.name != "j-chief-0"])
    assert d.create_pods == [("chief", 0)] and d.status.restarting_pods == []
    job = with_status(job, d)
    d = run(job, [*cluster(PS4, 2)[1:], *cluster(PS4, 4)[:1], *cluster(PS4, 4)[3:5]])
    assert d.status.phase == "Running" and d.status.restarts == 1
    scaled = condition(d, ConditionType.SCALING)
    assert (scaled.status, scaled.reason) == ("False", "Scaled")
    assert d.status.worker_replicas == 4
    assert d.status.replica_statuses.chief.restarts == 0


def test_decide_parameter_server_scale_down_to_one():
    job = make_job(
        workers=1,
        status={"phase": "Running", "conditions": [CREATED]},
        runPolicy={"backoffLimit": 0},
    )
    pods = cluster(PS1, 4)
    d = run(job, pods)
    assert d.delete_pods == ["j-chief-0"]  # the removed workers wait for it
    job = with_status(job, d)
    d = run(job, [p for p in pods if p.name != "j-chief-0"])
    assert sorted(d.delete_pods) == ["j-worker-1", "j-worker-2", "j-worker-3"]
    assert d.create_pods == [("chief", 0)]
    assert d.status.restarts == 0 and d.status.restarting_pods == []
    # The removed workers end while they are deleted: not failures (backoffLimit 0 holds).
    job = with_status(job, d)
    removed = [
        pod("worker", i, "Failed", cluster_workers=4, terminating=True, exit_code=143)
        for i in (1, 2, 3)
    ]
    d = run(job, [*cluster(PS1, 1)[:1], pod("worker", 0, cluster_workers=4), *removed])
    assert d.status.phase != "Failed" and d.status.restarts == 0 and d.delete_pods == []


def test_decide_mirrored_restarts_every_worker_after_the_leader():
    job = make_job(
        "MultiWorkerMirrored", workers=3, status={"phase": "Running", "conditions": [CREATED]}
    )
    pods = cluster(MW3, 2)
    d = run(job, pods)
    assert d.delete_pods == ["j-worker-0"] and d.create_pods == []
    # The others lose their peer and fail while the leader checkpoints: not counted.
    job = with_status(job, d)
    broken = named(pods, "j-worker-0", terminating=True)
    broken = named(broken, "j-worker-1", phase="Failed", exit_code=138)
    d = run(job, broken)
    assert d.delete_pods == [] and d.create_pods == [] and d.status.restarts == 0
    job = with_status(job, d)
    d = run(job, [p for p in broken if p.name != "j-worker-0"])
    assert d.delete_pods == ["j-worker-1"] and d.create_pods == []
    job = with_status(job, d)
    d = run(job, [])
    assert sorted(d.create_pods) == [("worker", 0), ("worker", 1), ("worker", 2)]
    assert d.status.restarts == 0 and d.status.restarting_pods == []


def test_a_removed_replica_that_was_restarting_is_forgotten_once_gone():
    """A task the spec no longer has is not made again, so it cannot stay restarting."""
    job = make_job(workers=1, status={"phase": "Restarting", "restartingPods": ["j-worker-3"]})
    d = run(job, cluster(PS1, 1))
    assert d.status.restarting_pods == []


def test_status_carries_the_scale_subresource_fields():
    job = make_job(workers=2)
    pods = [pod("chief", 0), pod("worker", 0), pod("worker", 1, terminating=True)]
    d = run(job, pods)
    assert d.status.worker_replicas == 1  # worker-0 (worker-1 is going)
    assert d.status.worker_selector == (
        "app.kubernetes.io/managed-by=etj,training.etj.dev/job-name=j,"
        "training.etj.dev/replica-type=worker"
    )


# ---- through the reconciler, with the fake API -----------------------------------------


def test_kubectl_scale_through_the_reconciler():
    """The spec's worker count changes (a new generation): the status (Scaling) is written
    before the chief is deleted, the one Scaled event after it, the added workers are made
    with the new cluster; the chief is made again once gone. No restart is counted."""
    from etj.api.constants import ANNOTATION_CLUSTER_WORKERS
    from etj.api.job import EmbeddingTrainingJob
    from etj.api.status import EmbeddingTrainingJobStatus
    from tests.unit.etj.controller.test_reconciler import NS, Setup
    from tests.unit.fake_api import stamp

    s = Setup()
    s.run()
    s.run_all_pods()
    s.run()
    assert s.cache is not None
    job = s.api.jobs[(NS, "ctr")]
    job["spec"]["replicas"]["worker"]["replicas"] = 4
    job["metadata"]["generation"] = 2
    s.api.jobs[(NS, "ctr")] = job = stamp(job)
    s.cache.on_job_event("MODIFIED", job)
    s.events.clear()
    mark = len(s.api.log)
    s.run()
    log = s.api.log[mark:]
    assert log.index(("patch", "status", "ctr")) < log.index(("delete", "Pod", "ctr-chief-0"))
    assert log.index(("delete", "Pod", "ctr-chief-0")) < log.index(("event", "Scaled"))
    created = sorted(c[2] for c in log if c[:2] == ("create", "Pod"))
    assert created == ["ctr-worker-2", "ctr-worker-3"]
    assert [e.reason for e in s.events] == ["Scaled"]
    new_worker = s.api.objects[("Pod", NS, "ctr-worker-2")]
    assert new_worker["metadata"]["annotations"][ANNOTATION_CLUSTER_WORKERS] == "4"
    status = EmbeddingTrainingJobStatus.model_validate(s.api.jobs[(NS, "ctr")]["status"])
    assert status.restarts == 0 and status.restarting_pods == ["ctr-chief-0"]
    # The watch says the chief is gone: it is made again, naming 4 workers.
    s.cache.on_pod_event(
        "DELETED",
        {
            "metadata": {
                "name": "ctr-chief-0",
                "namespace": NS,
                "labels": {"training.etj.dev/job-name": "ctr"},
            }
        },
    )
    s.watch_pods()
    s.run()
    chief = s.api.objects[("Pod", NS, "ctr-chief-0")]
    assert chief["metadata"]["annotations"][ANNOTATION_CLUSTER_WORKERS] == "4"
    tf_config = next(
        e["value"] for e in chief["spec"]["containers"][0]["env"] if e["name"] == "TF_CONFIG"
    )
    assert '"ctr-worker-3.ctr.team.svc:' in tf_config
    s.run_all_pods()
    s.run()
    final = EmbeddingTrainingJob.from_manifest(s.api.jobs[(NS, "ctr")]).status
    assert final is not None and final.phase == "Running" and final.restarts == 0
    assert final.worker_replicas == 4
    scaling = next(c for c in final.conditions if c.type == "Scaling")
    assert (scaling.status, scaling.reason) == ("False", "Scaled")
    assert [e.reason for e in s.events] == ["Scaled", "Running"]  # one Scaled
