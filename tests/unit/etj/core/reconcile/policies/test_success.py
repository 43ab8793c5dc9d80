"""etj.core.reconcile.policies.success: the success step ends a pass only when the job
succeeded (its final step from the spec), or when a leader that reported its last step
overstays the grace; until then it asks to come back when the grace ends."""

from __future__ import annotations

from datetime import timedelta

from etj.api.reasons import REASON_SUCCEEDED
from etj.api.roles import Role
from etj.api.status import Phase
from etj.core.planner import build_plan
from etj.core.reconcile.policies.completion import LEADER_EXIT_GRACE_SECONDS
from etj.core.reconcile.policies.pass_state import _Pass
from etj.core.reconcile.policies.success import succeeded
from etj.core.render.pod import replica_set
from tests.unit.etj.core.reconcile.policies.test_pass_state import _world
from tests.unit.reconcile_helpers import T0, all_pods, make_job, pod


def _replicas(job):
    return replica_set(job, build_plan(job.spec))


def test_running_pods_do_not_end_the_pass():
    job = make_job()
    p = _Pass(_world(job, all_pods(job)))
    assert not succeeded(p, _replicas(job))
    assert p.st.phase is None and p.d.events == []


def test_a_chief_that_exited_zero_succeeds_the_job_at_its_last_step():
    job = make_job(training={"steps": 50})
    pods = [pod(Role.CHIEF, 0, "Succeeded"), pod(Role.PS, 0), pod(Role.PS, 1)]
    p = _Pass(_world(job, pods))
    assert succeeded(p, _replicas(job))
    assert p.st.phase == Phase.SUCCEEDED and p.st.progress.step == 50
    assert [e.reason for e in p.d.events] == [REASON_SUCCEEDED]
    assert sorted(p.d.delete_pods) == ["j-ps-0", "j-ps-1"]


def test_a_leader_that_reported_its_end_is_waited_for_then_stopped():
    finished = (T0 - timedelta(seconds=10)).strftime("%Y-%m-%dT%H:%M:%SZ")
    job = make_job(status={"phase": "Running", "progress": {"step": 5, "finishedTime": finished}})
    p = _Pass(_world(job, all_pods(job)))
    assert not succeeded(p, _replicas(job))
    assert p.d.requeue_after == LEADER_EXIT_GRACE_SECONDS - 10
    late = _Pass(_world(job, all_pods(job), now=T0 + timedelta(seconds=LEADER_EXIT_GRACE_SECONDS)))
    assert succeeded(late, _replicas(job))
    assert late.st.phase == Phase.SUCCEEDED and "j-chief-0" in late.d.delete_pods
