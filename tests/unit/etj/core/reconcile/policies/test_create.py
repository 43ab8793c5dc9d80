"""etj.core.reconcile.policies.create: the create step makes the Service, the ConfigMap and
the missing pods (once said Created), keeps a replica in back-off waiting, deletes the pods
of tasks the spec no longer has, and applies a change of the worker count first."""

from __future__ import annotations

from etj.api.reasons import REASON_CREATED, REASON_SCALED
from etj.api.roles import Role
from etj.api.status import ConditionType
from etj.core.planner import build_plan
from etj.core.reconcile.policies.create import create
from etj.core.reconcile.policies.pass_state import _Pass
from etj.core.render.pod import replica_set
from tests.unit.etj.core.reconcile.policies.test_pass_state import _world
from tests.unit.reconcile_helpers import all_pods, make_job, pod


def _create(job, pods=(), **kw) -> _Pass:
    p = _Pass(_world(job, pods, **kw))
    create(p, replica_set(job, build_plan(job.spec)))
    return p


def test_a_new_job_gets_every_object_and_says_so_once():
    job = make_job()
    p = _create(job)
    wanted = replica_set(job, build_plan(job.spec)).tasks()
    assert sorted(p.d.create_pods) == sorted(wanted)
    assert [e.reason for e in p.d.events] == [REASON_CREATED]
    assert any(c.type == ConditionType.CREATED and c.status == "True" for c in p.st.conditions)
    again = _create(job.model_copy(update={"status": p.done().status}), all_pods(job))
    assert again.d.create_pods == [] and again.d.events == []


def test_a_replica_in_back_off_waits_and_asks_to_come_back():
    job = make_job(
        status={
            "phase": "Restarting",
            "restartingPods": ["j-worker-1"],
            "restartBackoff": {
                "j-worker-1": {"failures": 1, "nextRestartTime": "2026-11-22T12:00:20Z"}
            },
        }
    )
    pods = [p for p in all_pods(job) if p.name != "j-worker-1"]
    p = _create(job, pods)
    assert p.d.create_pods == [] and p.d.requeue_after == 20


def test_pods_of_tasks_the_spec_no_longer_has_are_deleted():
    job = make_job("MultiWorkerMirrored", workers=2)
    extra = pod(Role.WORKER, 2)
    p = _create(job, [*all_pods(job), extra])
    assert extra.name in p.d.delete_pods


def test_a_new_worker_count_is_applied_before_anything_is_made():
    job = make_job("MultiWorkerMirrored", workers=3)
    old = [pod(Role.WORKER, i, cluster_workers=2) for i in range(2)]
    p = _create(job, old)
    assert REASON_SCALED in [e.reason for e in p.d.events]
    assert p.st.restarting_pods  # the old cluster is replaced, checkpoint first
