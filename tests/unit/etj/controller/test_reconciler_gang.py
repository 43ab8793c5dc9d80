"""The reconciler with a gang-scheduled job (fake API): the gang object is made before any
pod and remembered (no read per pass), remade when the plan changes, and when the API
server will not have it no pod is made and the job says why."""

from __future__ import annotations

import copy

from etj.api.reasons import REASON_GANG_UNAVAILABLE
from etj.controller.kube import ApiRefused
from tests.unit.etj.controller.test_reconciler import NS, PODS, Setup


def gang_setup(**policy) -> Setup:
    return Setup(schedulingPolicy=policy, restartBackoff={"initialSeconds": 0})


def test_the_workload_is_made_before_any_pod_and_then_not_read_again():
    s = gang_setup()
    s.run()
    log = s.api.log
    applied = log.index(("apply", "Workload", "ctr"))
    first_pod = next(i for i, c in enumerate(log) if c[:2] == ("create", "Pod"))
    assert applied < first_pod
    workload = s.api.objects[("Workload", NS, "ctr")]
    assert workload["spec"]["podGroups"][0]["policy"]["gang"]["minCount"] == len(PODS)
    pods = s.api.pods(NS)
    assert {p["spec"]["workloadRef"]["name"] for p in pods} == {"ctr"}
    # Read once (it did not exist), then known from the cache.
    assert s.api.calls("get") == [("get", "Workload", "ctr")]
    s.watch_pods()
    s.run()
    assert s.api.calls("get") == [("get", "Workload", "ctr")]
    assert len(s.api.calls("apply")) == 1


def test_an_existing_gang_as_wanted_is_found_not_remade():
    first = gang_setup()
    first.run()
    # A new operator (empty cache) over the same API.
    s = gang_setup()
    s.api.objects = copy.deepcopy(first.api.objects)
    s.watch_pods()
    s.run()
    assert s.api.calls("apply") == []


def test_a_changed_plan_remakes_the_gang():
    s = gang_setup()
    s.run()
    s.watch_pods()
    job = s.api.jobs[(NS, "ctr")]
    job["spec"]["replicas"]["worker"]["replicas"] = 3
    job["metadata"]["generation"] = 2
    assert s.cache is not None
    s.cache.on_job_event("MODIFIED", s.api.add_job(job))
    s.run()
    workload = s.api.objects[("Workload", NS, "ctr")]
    assert workload["spec"]["podGroups"][0]["policy"]["gang"]["minCount"] == len(PODS) + 1
    assert len(s.api.calls("apply")) == 2


def test_a_refused_gang_makes_no_pod_and_the_job_says_why():
    s = gang_setup(gangScheduler="Volcano")
    s.api.gang_refusal = ApiRefused(404, "the server could not find the requested resource")
    s.run()
    assert s.api.pods(NS) == []
    status = s.api.jobs[(NS, "ctr")]["status"]
    scheduled = next(c for c in status["conditions"] if c["type"] == "Scheduled")
    assert scheduled["status"] == "False"
    assert scheduled["reason"] == REASON_GANG_UNAVAILABLE
    assert "scheduling.volcano.sh/v1beta1 PodGroup ctr" in scheduled["message"]
    assert "CRDs installed" in scheduled["message"]
    assert [e.reason for e in s.events] == [REASON_GANG_UNAVAILABLE]
    # Once the API server has it, the next pass makes the gang and then the pods.
    s.api.gang_refusal = None
    s.run()
    assert {p["metadata"]["name"] for p in s.api.pods(NS)} == PODS
    assert {p["spec"]["schedulerName"] for p in s.api.pods(NS)} == {"volcano"}
