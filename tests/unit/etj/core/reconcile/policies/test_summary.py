"""etj.core.reconcile.policies.summary: the phase a running pass leaves — Restarting while a
replica is replaced, Running (said once) when every replica runs, else Pending."""

from __future__ import annotations

from etj.api.reasons import REASON_ALL_RUNNING, REASON_RUNNING
from etj.api.status import ConditionType, Phase
from etj.core.planner import build_plan
from etj.core.reconcile.policies.pass_state import _Pass
from etj.core.reconcile.policies.summary import summarise
from etj.core.render.pod import replica_set
from tests.unit.etj.core.reconcile.policies.test_pass_state import _world
from tests.unit.reconcile_helpers import all_pods, make_job


def _summarise(job, pods) -> _Pass:
    p = _Pass(_world(job, pods))
    summarise(p, replica_set(job, build_plan(job.spec)))
    return p


def test_every_replica_running_is_running_said_once():
    job = make_job()
    p = _summarise(job, all_pods(job))
    assert p.st.phase == Phase.RUNNING and [e.reason for e in p.d.events] == [REASON_RUNNING]
    (c,) = [c for c in p.st.conditions if c.type == ConditionType.RUNNING]
    assert (c.status, c.reason) == ("True", REASON_ALL_RUNNING)
    again = _summarise(job.model_copy(update={"status": p.done().status}), all_pods(job))
    assert again.d.events == []


def test_a_replica_being_replaced_is_restarting_and_missing_pods_pending():
    job = make_job(status={"phase": "Running", "restartingPods": ["j-worker-0"]})
    assert _summarise(job, all_pods(job)).st.phase == Phase.RESTARTING
    assert _summarise(make_job(), all_pods(make_job(), "Pending")).st.phase == Phase.PENDING
