"""etj.core.reconcile.policies.pass_state: one decision's state, what its helpers record
and what ``done`` hands back."""

from __future__ import annotations

from etj.api.roles import ReplicaSet, Role
from etj.api.status import ConditionType, Phase, Progress
from etj.core.planner import build_plan
from etj.core.reconcile.decision import World, iso
from etj.core.reconcile.policies.pass_state import _Pass
from tests.unit.reconcile_helpers import T0, later, make_job, pod


def _world(job, pods=(), now=T0, **kw) -> World:
    return World(
        job=job,
        plan=build_plan(job.spec),
        plan_error=None,
        pods=list(pods),
        has_service=True,
        has_config_map=True,
        now=now,
        **kw,
    )


def test_done_hands_back_a_new_status_and_leaves_the_jobs_alone():
    job = make_job(status={"phase": "Running", "restartBackoff": {"j-worker-0": {"failures": 2}}})
    before = job.status.model_dump()
    p = _Pass(_world(job))
    p.event("Normal", "Checked", "all is well")
    d = p.done()
    assert d.status is not job.status and job.status.model_dump() == before
    assert d.status.message == "all is well" and d.status.observed_generation == 1
    assert [(e.type, e.reason, e.message) for e in d.events] == [
        ("Normal", "Checked", "all is well")
    ]


def test_a_condition_is_set_at_the_pass_time_and_generation():
    p = _Pass(_world(make_job(), now=later(7)))
    p.condition(ConditionType.CREATED, True, "Created", "pods made")
    (c,) = p.done().status.conditions
    assert (c.type, c.status, c.last_transition_time, c.observed_generation) == (
        ConditionType.CREATED.value,
        "True",
        iso(later(7)),
        1,
    )


def test_the_earliest_requeue_wins():
    p = _Pass(_world(make_job()))
    p.requeue(None)
    assert p.done().requeue_after is None
    for seconds in (30.0, 5.0, 12.0):
        p.requeue(seconds)
    assert p.done().requeue_after == 5.0


def test_finishing_sets_the_phase_conditions_and_stops_every_wait():
    job = make_job(
        status={
            "phase": "Restarting",
            "restartingPods": ["j-worker-0"],
            "restartBackoff": {
                "j-worker-0": {"failures": 1, "nextRestartTime": "2026-11-22T12:00:10Z"},
                "j-worker-1": {"nextRestartTime": "2026-11-22T12:00:10Z"},
            },
        }
    )
    p = _Pass(_world(job, pods=[pod(Role.PS, 0), pod(Role.WORKER, 1, "Failed", exit_code=1)]))
    p.finish(Phase.FAILED, "ReplicaFailed", "worker 1 cannot go on")
    d = p.done()
    st = d.status
    assert st.phase == Phase.FAILED and st.completion_time == iso(T0) and st.restarting_pods == []
    # The failure count stays; no restart is due any more.
    assert {n: (e.failures, e.next_restart_time) for n, e in st.restart_backoff.items()} == {
        "j-worker-0": (1, None)
    }
    kinds = {c.type: c.status for c in st.conditions}
    assert kinds == {
        ConditionType.FAILED.value: "True",
        ConditionType.RUNNING.value: "False",
        ConditionType.RESTARTING.value: "False",
    }
    assert [e.type for e in d.events] == ["Warning"]
    assert "j-ps-0" in d.delete_pods  # the running ps is cleaned up


def test_done_with_replicas_fills_the_counts_and_the_scale_fields():
    job = make_job(workers=2)
    pods = [pod(Role.WORKER, 0), pod(Role.WORKER, 1, "Pending"), pod(Role.PS, 0)]
    progress = Progress(step=42)
    st = (
        _Pass(_world(job, pods=pods, progress=progress))
        .done(ReplicaSet(chief=1, worker=2, ps=2))
        .status
    )
    assert st.workers == "1/2" and st.worker_replicas == 2
    assert st.worker_selector and st.replica_statuses.worker.active == 2
    assert st.progress == progress


def test_a_succeeded_jobs_progress_is_not_overwritten():
    job = make_job(status={"phase": "Succeeded", "progress": {"step": 6000}})
    st = _Pass(_world(job, progress=Progress(step=10))).done().status
    assert st.progress.step == 6000
