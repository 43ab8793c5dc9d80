"""A replica lost with its node: told from the pod (observe), a disruption not counted
against backoffLimit, said in an Event, and its pod force-deleted so the replacement of
the same name can be made (decide; the reconciler over the fake API)."""

from __future__ import annotations

import copy
from typing import Any

from etj.api.status import Phase
from etj.core.reconcile.observe import observe_pod
from etj.core.reconcile.policies.nodeloss import pods_to_force_delete
from tests.unit.etj.controller.test_reconciler import NS, PODS, Setup
from tests.unit.fake_api import stamp
from tests.unit.reconcile_helpers import all_pods, make_job, pod, run

LABELS = {"training.etj.dev/replica-type": "ps", "training.etj.dev/replica-index": "0"}


def raw_pod(**status: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "j-ps-0",
            "labels": LABELS,
            "deletionTimestamp": "2026-11-22T12:00:00Z",
        },
        "spec": {"nodeName": "worker-2"},
        "status": {"phase": "Running", **status},
    }


TAINT_EVICTED = {
    "conditions": [
        {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "DeletionByTaintManager",
            "message": "Taint manager: deleting due to NoExecute taint",
        }
    ]
}


def test_a_pod_evicted_by_the_taint_manager_or_node_lost_is_lost_with_its_node():
    for status in (TAINT_EVICTED, {"reason": "NodeLost"}):
        state = observe_pod(raw_pod(**status))
        assert state is not None and state.node_lost and state.disrupted
        assert state.describe() == "j-ps-0 was lost with its node worker-2"
    # Another disruption (preempted) is not a node loss.
    preempted = {"conditions": [{"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}]}  # fmt: skip
    state = observe_pod(raw_pod(**preempted))
    assert state is not None and state.disrupted and not state.node_lost


def test_only_terminating_pods_of_lost_nodes_are_force_deleted():
    lost = pod("ps", 0, node_lost=True, disrupted=True, terminating=True)
    deleted = pod("worker", 0, terminating=True)
    lost_not_deleted_yet = pod("ps", 1, node_lost=True, disrupted=True)
    assert pods_to_force_delete([lost, deleted, lost_not_deleted_yet]) == ["j-ps-0"]


def test_a_ps_lost_with_its_node_restarts_with_the_chief_uncounted_and_is_force_deleted():
    job = make_job(runPolicy={"backoffLimit": 1}, status={"phase": "Running", "restarts": 1})
    lost = pod("ps", 0, node_lost=True, disrupted=True, terminating=True, node_name="worker-2")
    pods = [lost if p.key == ("ps", 0) else p for p in all_pods(job)]
    d = run(job, pods)
    # backoffLimit is used up, yet the job restarts: a node loss is not the job's failure.
    assert d.status is not None and d.status.phase == Phase.RESTARTING
    assert d.status.restarts == 1
    assert d.force_delete_pods == ["j-ps-0"]
    assert "j-chief-0" in d.delete_pods  # the chief restores every shard with the new ps
    lost_events = [e for e in d.events if e.reason == "NodeLost"]
    assert len(lost_events) == 1 and "worker-2" in lost_events[0].message
    assert "without counting against backoffLimit" in lost_events[0].message
    restarting = next(c for c in d.status.conditions if c.type == "Restarting")
    assert "j-ps-0 was lost with its node worker-2" in restarting.message


def test_the_reconciler_force_deletes_a_lost_pod_and_then_recreates_it():
    s = Setup()
    s.run()
    s.run_all_pods()
    s.run()
    pod_obj = copy.deepcopy(next(p for p in s.api.pods(NS) if p["metadata"]["name"] == "ctr-ps-0"))
    pod_obj["metadata"]["deletionTimestamp"] = "2026-11-22T12:00:00Z"
    pod_obj["spec"]["nodeName"] = "worker-2"
    pod_obj["status"] = {"phase": "Running", **TAINT_EVICTED}
    s.api.objects[("Pod", NS, "ctr-ps-0")] = stamp(pod_obj)
    s.watch_pods()
    s.run()
    assert ("delete", "Pod", "ctr-ps-0", "force") in s.api.log
    assert any(e.reason == "NodeLost" for e in s.events)
    assert s.cache is not None
    # The watch says they are gone (a ps restarts with the chief and its workers).
    for name in ("ctr-ps-0", "ctr-chief-0", "ctr-worker-0", "ctr-worker-1"):
        assert ("Pod", NS, name) not in s.api.objects
        s.cache.on_pod_event(
            "DELETED", {**pod_obj, "metadata": {**pod_obj["metadata"], "name": name}}
        )
    s.run()
    assert {p["metadata"]["name"] for p in s.api.pods(NS)} == PODS
