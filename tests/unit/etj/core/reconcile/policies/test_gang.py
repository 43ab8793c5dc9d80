"""Gang scheduling in the decision (etj.core.reconcile.policies.gang and decide): the job's
Scheduled condition from its pods, an event when the gang cannot be placed, and the gang
object (re)made when it is not as the plan wants it."""

from __future__ import annotations

from etj.api.reasons import REASON_GANG_SCHEDULED, REASON_GANG_UNSCHEDULABLE, REASON_GANG_WAITING
from etj.core.planner import build_plan
from etj.core.reconcile.policies.gang import gang_state, gang_step
from etj.core.reconcile.policies.pass_state import _Pass
from etj.core.render.pod import replica_set
from tests.unit.etj.core.reconcile.policies.test_pass_state import _world
from tests.unit.reconcile_helpers import all_pods, make_job, pod, run, with_status

NO_CPU = "0/1 nodes are available: 1 Insufficient cpu."


def pending(role: str, index: int, **kw) -> object:
    return pod(role, index, phase="Pending", **kw)


def test_every_pod_bound_is_scheduled():
    pods = [pod("chief", 0, node_name="n"), pod("worker", 0, node_name="n")]
    state = gang_state(pods, 2, "Workload")
    assert state.scheduled and state.reason == REASON_GANG_SCHEDULED
    assert "2 pods bound" in state.message


def test_an_unschedulable_member_makes_the_gang_unschedulable_with_the_schedulers_word():
    pods = [pending("chief", 0), pending("ps", 0, unschedulable=NO_CPU), pending("worker", 0)]
    state = gang_state(pods, 3, "Workload")
    assert not state.scheduled and state.reason == REASON_GANG_UNSCHEDULABLE
    assert "0 bound, 1 unschedulable" in state.message
    assert f"j-ps-0: {NO_CPU}" in state.message


def test_pods_not_yet_placed_are_waiting():
    state = gang_state([pending("chief", 0), pending("worker", 0)], 2, "Volcano")
    assert not state.scheduled and state.reason == REASON_GANG_WAITING
    assert "Volcano gang of 2" in state.message


def test_terminating_pods_do_not_count_as_bound():
    pods = [pod("chief", 0, node_name="n", terminating=True), pod("worker", 0, node_name="n")]
    assert not gang_state(pods, 2, "Workload").scheduled


def test_min_available_below_every_pod_is_enough():
    pods = [pod("chief", 0, node_name="n"), pending("worker", 0, unschedulable=NO_CPU)]
    assert gang_state(pods, 1, "Workload").scheduled


def condition(d, type_="Scheduled"):
    return next(c for c in d.status.conditions if c.type == type_)


def test_decide_asks_for_the_gang_before_the_pods_and_says_it_waits():
    job = make_job(runPolicy={"schedulingPolicy": {}})
    d = run(job, [], gang="Workload", gang_current=False)
    assert d.apply_gang
    assert len(d.create_pods) == 5
    c = condition(d)
    assert (c.status, c.reason) == ("False", REASON_GANG_WAITING)
    assert "gang of 5" in c.message
    # Once made, it is not asked for again.
    assert not run(job, [], gang="Workload", gang_current=True).apply_gang


def test_decide_without_a_gang_has_no_scheduled_condition():
    d = run(make_job(), [])
    assert not d.apply_gang
    assert all(c.type != "Scheduled" for c in d.status.conditions)


def test_decide_warns_once_when_the_gang_cannot_be_placed_then_reports_it_placed():
    job = make_job(runPolicy={"schedulingPolicy": {}})
    stuck = [pending(r, i) for r, i in [("chief", 0), ("worker", 0), ("worker", 1), ("ps", 0)]]
    stuck.append(pending("ps", 1, unschedulable=NO_CPU))
    d = run(job, stuck, gang="Workload")
    assert (condition(d).status, condition(d).reason) == ("False", REASON_GANG_UNSCHEDULABLE)
    assert [e.reason for e in d.events if e.type == "Warning"] == [REASON_GANG_UNSCHEDULABLE]
    job = with_status(job, d)
    again = run(job, stuck, gang="Workload")
    assert [e for e in again.events if e.reason == REASON_GANG_UNSCHEDULABLE] == []
    job = with_status(job, again)
    bound = [p.__class__(**{**p.__dict__, "node_name": "n"}) for p in all_pods(job)]
    placed = run(job, bound, gang="Workload")
    assert (condition(placed).status, condition(placed).reason) == ("True", REASON_GANG_SCHEDULED)
    assert [e.reason for e in placed.events if e.reason == REASON_GANG_SCHEDULED] == [
        REASON_GANG_SCHEDULED
    ]


def test_observe_reads_the_node_and_the_schedulers_word():
    from etj.core.reconcile.observe import observe_pod

    raw = {
        "metadata": {
            "name": "j-ps-0",
            "labels": {
                "training.etj.dev/replica-type": "ps",
                "training.etj.dev/replica-index": "0",
            },
        },
        "spec": {},
        "status": {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": NO_CPU,
                }
            ],
        },
    }
    state = observe_pod(raw)
    assert state is not None and state.node_name is None and state.unschedulable == NO_CPU
    raw["spec"]["nodeName"] = "n1"
    raw["status"]["conditions"] = [{"type": "PodScheduled", "status": "True"}]
    state = observe_pod(raw)
    assert state is not None and state.node_name == "n1" and state.unschedulable is None
    # Gated or not yet tried: no word from the scheduler.
    raw["spec"] = {}
    raw["status"]["conditions"] = [
        {"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}
    ]
    state = observe_pod(raw)
    assert state is not None and state.unschedulable is None


def test_the_gang_step_is_silent_without_a_gang_and_remakes_a_stale_one():
    job = make_job()
    replicas = replica_set(job, build_plan(job.spec))
    none = _Pass(_world(job, all_pods(job)))
    gang_step(none, replicas)
    assert not none.d.apply_gang and none.st.conditions == []
    stale = _Pass(_world(job, all_pods(job), gang="Workload", gang_current=False))
    gang_step(stale, replicas)
    assert stale.d.apply_gang
    assert [c.reason for c in stale.st.conditions] == [REASON_GANG_WAITING]
