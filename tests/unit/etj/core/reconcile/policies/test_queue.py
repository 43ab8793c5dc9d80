"""Kueue's plain-Pod group while a job lives (etj.core.reconcile.policies.queue): a preempted
job is a disruption that Kueue requeues (its pods are recreated, etj lets go of the old
ones without ever leaving the group empty), and a finished or suspended job's pods are
marked unretriable so Kueue counts the group finished."""

from __future__ import annotations

import asyncio
from typing import Any

from etj.api.constants import (
    KUEUE_ADMISSION_GATE,
    KUEUE_POD_FINALIZER,
    KUEUE_POD_GROUP_NAME_LABEL,
    KUEUE_QUEUE_NAME_LABEL,
    KUEUE_RETRIABLE_IN_GROUP_ANNOTATION,
    LABEL_REPLICA_INDEX,
    LABEL_REPLICA_TYPE,
)
from etj.api.status import Phase
from etj.controller.cache import WatchCache
from etj.controller.reconciler import Outcome, Reconciler
from etj.controller.settings import OperatorSettings
from etj.core.reconcile.decision import Event
from etj.core.reconcile.observe import PodState, observe_pod
from etj.core.reconcile.policies.queue import (
    ADOPTION_RECHECK_SECONDS,
    Release,
    owners_wanted,
    pods_to_mark_unretriable,
    pods_to_release,
    queue_eviction,
)
from tests.unit.etj.controller.test_reconciler import NS, manifest, no_metrics
from tests.unit.fake_api import FakeKube, stamp
from tests.unit.reconcile_helpers import all_pods, make_job, pod, run, with_status

PREEMPTED = (
    "Preempted to accommodate a workload (UID: 1, JobUID: 2) due to prioritization in the "
    "ClusterQueue; preemptor path: /cq; preemptee path: /cq"
)


def grouped(p: PodState, **kw: Any) -> PodState:
    """The pod as one of a Kueue group: Kueue's finalizer on it."""
    return PodState(**{**p.__dict__, "in_queue_group": True, "queue_held": True, **kw})


def stopped(p: PodState) -> PodState:
    """The pod after Kueue stopped its group: marked, deleted, ended (143)."""
    return grouped(
        p,
        phase="Failed",
        exit_code=143,
        terminating=True,
        disrupted=True,
        stopped_by_queue=PREEMPTED,
    )


def test_observe_reads_the_group_kueues_finalizer_the_mark_and_why_kueue_stopped_it():
    raw = {
        "metadata": {
            "name": "j-ps-0",
            "labels": {
                LABEL_REPLICA_TYPE: "ps",
                LABEL_REPLICA_INDEX: "0",
                KUEUE_POD_GROUP_NAME_LABEL: "j-u1",
            },
            "annotations": {KUEUE_RETRIABLE_IN_GROUP_ANNOTATION: "false"},
            "finalizers": ["other", KUEUE_POD_FINALIZER],
            "deletionTimestamp": "2026-11-22T12:00:00Z",
        },
        "status": {
            "phase": "Failed",
            "conditions": [
                {
                    "type": "TerminationTarget",
                    "status": "True",
                    "reason": "WorkloadEvicted",
                    "message": PREEMPTED,
                }
            ],
        },
    }
    p = observe_pod(raw)
    assert p is not None
    assert p.in_queue_group and p.queue_held and p.unretriable and p.disrupted
    assert p.stopped_by_queue == PREEMPTED
    plain = observe_pod(
        {
            "metadata": {
                "name": "j-ps-0",
                "labels": {LABEL_REPLICA_TYPE: "ps", LABEL_REPLICA_INDEX: "0"},
            }
        }
    )
    assert plain is not None
    assert not (plain.in_queue_group or plain.queue_held or plain.unretriable)
    assert plain.stopped_by_queue is None


def test_released_are_the_ended_deleted_pods_kueue_holds_but_one_while_none_is_alive():
    old = [stopped(pod("chief", 0)), stopped(pod("ps", 0)), stopped(pod("worker", 0))]
    # Nothing of the group alive: the first stays so the group (and the Workload its pods
    # own) is never empty.
    assert pods_to_release(old, 3) == Release(["j-ps-0", "j-worker-0"])
    # Once every other replica has its new pod the last one goes too; not before.
    new = [grouped(pod("ps", 0), phase="Pending"), grouped(pod("worker", 0), phase="Pending")]
    assert pods_to_release([old[0], new[0]], 3) == Release([])
    assert pods_to_release([old[0], *new], 3) == Release(["j-chief-0"])
    # One replica replaced while the others run: it goes at once.
    assert pods_to_release([old[2], grouped(pod("chief", 0)), new[0]], 3).pods == ["j-worker-0"]
    # A group of one pod cannot keep it: it goes (and Kueue's Workload with it).
    assert pods_to_release(old[:1], 1) == Release(["j-chief-0"])


def test_the_last_old_pod_waits_until_kueues_workload_names_the_new_pods_its_owners():
    """Let go before, it takes the Workload's last owner with it: the garbage collector
    deletes the Workload and Kueue never counts the group again (seen on a busy host)."""
    old = stopped(PodState(**{**pod("chief", 0).__dict__, "uid": "old-chief"}))
    new = [
        grouped(pod("ps", 0), phase="Pending", uid="new-ps"),
        grouped(pod("worker", 0), phase="Pending", uid="new-worker"),
    ]
    assert owners_wanted([old, *new])
    # Kueue has not seen the new pods yet: its Workload is owned by the old ones only.
    before = frozenset({"old-chief", "old-ps", "old-worker"})
    assert pods_to_release([old, *new], 3, before) == Release([], awaiting_adoption=True)
    # One of two adopted: still held.
    one = before | {"new-ps"}
    assert pods_to_release([old, *new], 3, one) == Release([], awaiting_adoption=True)
    both = one | {"new-worker"}
    assert pods_to_release([old, *new], 3, both) == Release(["j-chief-0"])
    # Owners not known (no Workload, or no right to read it): as before, it goes.
    assert pods_to_release([old, *new], 3, None) == Release(["j-chief-0"])
    # Nothing alive beside it, or nothing held to let go: no need to ask.
    assert not owners_wanted([old]) and not owners_wanted(new)


def test_nothing_is_released_that_kueue_does_not_hold_or_that_has_not_ended():
    running_deleted = grouped(pod("worker", 0), terminating=True, node_name="n1")  # stopping
    not_held = PodState(**{**stopped(pod("worker", 1)).__dict__, "queue_held": False})
    failed_not_deleted = grouped(pod("worker", 2), phase="Failed")
    alive = grouped(pod("chief", 0))
    assert pods_to_release([running_deleted, not_held, failed_not_deleted, alive], 4) == Release([])


def test_marked_unretriable_are_the_group_pods_not_marked_yet():
    pods = [
        grouped(pod("chief", 0), phase="Succeeded"),
        grouped(pod("ps", 0), unretriable=True),
        grouped(pod("ps", 1)),
        pod("worker", 0),  # not in a Kueue group
    ]
    assert pods_to_mark_unretriable(pods) == ["j-chief-0", "j-ps-1"]


def test_a_queue_eviction_is_a_preemption_when_kueue_says_so():
    assert queue_eviction([pod("chief", 0)]) is None
    assert queue_eviction([pod("chief", 0), stopped(pod("ps", 0))]) == ("Preempted", PREEMPTED)
    other = grouped(pod("ps", 0), stopped_by_queue="The workload is deactivated")
    assert queue_eviction([other]) == ("EvictedByQueue", "The workload is deactivated")


def kueue_job(**status: Any):  # type: ignore[no-untyped-def]
    return make_job(
        runPolicy={"backoffLimit": 1},
        status={"phase": "Running", "restarts": 1, **status},
    )


def test_a_preempted_job_is_requeued_not_failed_and_says_so_once():
    job = kueue_job()
    pods = [stopped(p) for p in all_pods(job)]
    d = run(job, pods)
    assert d.status is not None
    # A disruption: the backoffLimit already used up does not fail the job.
    assert d.status.phase == Phase.RESTARTING and d.status.restarts == 1
    assert set(d.status.restarting_pods) == {p.name for p in pods}
    preempted = [e for e in d.events if e.reason == "Preempted"]
    assert len(preempted) == 1 and preempted[0].type == "Warning"
    assert "Kueue preempted" in preempted[0].message and PREEMPTED in preempted[0].message
    assert "resumes from the last checkpoint" in preempted[0].message
    cond = next(c for c in d.status.conditions if c.type == "Restarting")
    assert cond.status == "True" and cond.reason == "Preempted"
    # The old pods are let go but one; none is marked unretriable (the group must be
    # requeued, not finished), none is made while its old pod is still there.
    assert d.release_pods == sorted(p.name for p in pods)[1:]
    assert d.mark_unretriable == [] and d.create_pods == []

    # Next pass: the released pods are gone and made again (Kueue gates them); the kept
    # one goes now that the group has live pods; no second Preempted event.
    job = with_status(job, d)
    kept = sorted(pods, key=lambda p: p.name)[0]
    d2 = run(job, [kept])
    assert sorted(d2.create_pods) == sorted(p.key for p in pods if p.name != kept.name)
    assert d2.release_pods == []  # the new pods are not there yet in this pass
    assert not [e for e in d2.events if e.reason == "Preempted"]
    fresh = [grouped(p, phase="Pending") for p in all_pods(job) if p.name != kept.name]
    d3 = run(with_status(job, d2), [kept, *fresh])
    assert d3.release_pods == [kept.name]
    d4 = run(with_status(job, d3), fresh)
    assert d4.create_pods == [kept.key] and d4.status is not None
    assert d4.status.phase != Phase.FAILED


def test_a_peer_that_crashed_as_kueue_stopped_the_group_is_part_of_the_preemption():
    """MultiWorkerMirrored: worker 1 is taken, worker 0's collective fails (exit 1) before
    Kueue marks it; Kueue skips a pod that already ended, so it never is."""
    job = make_job(
        strategy="MultiWorkerMirrored",
        runPolicy={"backoffLimit": 0},
        status={"phase": "Running"},
    )
    crashed = grouped(pod("worker", 0), phase="Failed", exit_code=1)
    d = run(job, [crashed, stopped(pod("worker", 1))])
    assert d.status is not None and d.status.phase == Phase.RESTARTING
    assert d.status.restarts == 0
    assert [e.reason for e in d.events if e.type == "Warning"] == ["Preempted"]
    # The same crash alone is the job's own failure: backoffLimit 0 fails it.
    alone = run(job, [crashed, grouped(pod("worker", 1))])
    assert alone.status is not None and alone.status.phase == Phase.FAILED


def test_a_running_job_marks_nothing_and_a_finished_or_suspended_one_marks_its_pods():
    job = make_job(status={"phase": "Running"})
    running = [grouped(p) for p in all_pods(job)]
    assert run(job, running).mark_unretriable == []
    done = [p if p.role != "chief" else grouped(p, phase="Succeeded", exit_code=0) for p in running]
    d = run(job, done)
    assert d.status is not None and d.status.phase == Phase.SUCCEEDED
    assert d.mark_unretriable == sorted(p.name for p in done)
    assert d.release_pods == []  # Kueue lets go of a finished group's pods itself
    # Later passes mark what is still unmarked; the suspended job marks its pods too.
    after = run(with_status(job, d), [grouped(p, unretriable=True) for p in done[:2]])
    assert after.mark_unretriable == []
    suspended = make_job(status={"phase": "Running"}, runPolicy={"suspend": True})
    assert run(suspended, running).mark_unretriable == sorted(p.name for p in running)


# ---- the reconciler applies it, in order ------------------------------------------------


def _queued_manifest() -> dict[str, Any]:
    m = manifest()
    m["metadata"]["labels"] = {KUEUE_QUEUE_NAME_LABEL: "team-a"}
    return m


class KueueSetup:
    def __init__(self) -> None:
        self.api = FakeKube()
        self.cache = WatchCache()
        self.events: list[Event] = []
        self.reconciler = Reconciler(
            self.api,  # type: ignore[arg-type]
            OperatorSettings(),
            lambda obj, e: self.events.append(e),
            scrape=no_metrics,
            cache=self.cache,
        )
        self.cache.on_job_event(None, self.api.add_job(_queued_manifest()))

    def run(self) -> Outcome:
        """One pass, then the watch delivers what it changed (pods gone included)."""
        outcome = asyncio.run(self.reconciler.reconcile(NS, "ctr"))
        there = {p["metadata"]["name"] for p in self.api.pods(NS)}
        for cached in self.cache.job_pods(NS, "ctr"):
            if cached["metadata"]["name"] not in there:
                self.cache.on_pod_event("DELETED", cached)
        for p in self.api.pods(NS):
            self.cache.on_pod_event("MODIFIED", p)
        return outcome

    def _change(self, name: str, **fields: Any) -> None:
        pod = self.api.objects[("Pod", NS, name)]
        pod = stamp({**pod, **fields})
        self.api.objects[("Pod", NS, name)] = pod
        self.cache.on_pod_event("MODIFIED", pod)

    def kueue_webhook(self) -> None:
        """What Kueue's webhook adds to every new pod: its finalizer."""
        for p in self.api.pods(NS):
            if "finalizers" not in p["metadata"]:
                self._change(
                    p["metadata"]["name"],
                    metadata={**p["metadata"], "finalizers": [KUEUE_POD_FINALIZER]},
                )

    def kueue_stops_the_group(self) -> None:
        for p in self.api.pods(NS):
            self._change(
                p["metadata"]["name"],
                metadata={**p["metadata"], "deletionTimestamp": "2026-11-22T12:00:00Z"},
                status={
                    "phase": "Failed",
                    "conditions": [
                        {"type": "TerminationTarget", "status": "True", "message": PREEMPTED}
                    ],
                },
            )

    def uids(self) -> dict[str, str]:
        return {p["metadata"]["name"]: p["metadata"]["resourceVersion"] for p in self.api.pods(NS)}


def test_the_reconciler_replaces_a_preempted_group_without_ever_emptying_it():
    s = KueueSetup()
    s.run()
    s.kueue_webhook()
    names = set(s.uids())
    assert names and all(
        KUEUE_RETRIABLE_IN_GROUP_ANNOTATION not in (p["metadata"].get("annotations") or {})
        for p in s.api.pods(NS)
    )
    s.kueue_stops_the_group()
    old_versions = s.uids()
    before = len(s.api.log)
    for _ in range(4):
        s.run()
        assert s.api.pods(NS), "the group was left without a pod"
        s.kueue_webhook()
    log = s.api.log[before:]
    # The failure is recorded before any pod is let go.
    assert log.index(("patch", "status", "ctr")) < min(
        i for i, c in enumerate(log) if c[0] == "release"
    )
    assert {c[2] for c in log if c[0] == "release"} == names
    assert not [c for c in log if c[0] == "mark-unretriable"]
    # Every pod is a new one (the old are gone), none stopped by Kueue any more.
    now = s.uids()
    assert set(now) == names and all(now[n] != old_versions[n] for n in names)
    assert all(not p.get("status") for p in s.api.pods(NS))
    job = s.api.jobs[(NS, "ctr")]
    assert job["status"]["phase"] == "Restarting" and job["status"].get("restarts", 0) == 0
    assert [e.reason for e in s.events].count("Preempted") == 1


def test_the_reconciler_keeps_the_last_old_pod_until_kueue_adopts_the_new_ones():
    s = KueueSetup()
    s.run()
    s.kueue_webhook()
    workload = s.api.queue_workloads[(NS, group_name(s))] = {
        p["metadata"]["uid"] for p in s.api.pods(NS)
    }
    names = {p["metadata"]["name"] for p in s.api.pods(NS)}
    s.kueue_stops_the_group()
    for _ in range(3):
        outcome = s.run()
        s.kueue_webhook()
    # Every replica but one has its new pod; the first old one waits for Kueue, and the
    # reconciler looks again soon (Kueue's update of its Workload wakes nothing).
    held = [p for p in s.api.pods(NS) if p["metadata"].get("deletionTimestamp")]
    assert [p["metadata"]["name"] for p in held] == ["ctr-chief-0"]
    assert outcome.requeue_after is not None and outcome.requeue_after <= ADOPTION_RECHECK_SECONDS
    assert s.api.calls("get")[-1] == ("get", "queue-workload", group_name(s))
    # Kueue adopts the new pods: the old one goes, and its replacement is made.
    workload |= {p["metadata"]["uid"] for p in s.api.pods(NS) if p not in held}
    for _ in range(2):
        s.run()
        s.kueue_webhook()
    assert {p["metadata"]["name"] for p in s.api.pods(NS)} == names
    assert not [p for p in s.api.pods(NS) if p["metadata"].get("deletionTimestamp")]
    # A running group, nothing held: the Workload is not read.
    before = len(s.api.log)
    s.run()
    assert not [c for c in s.api.log[before:] if c[1:2] == ("queue-workload",)]


def group_name(s: KueueSetup) -> str:
    (name,) = {p["metadata"]["labels"][KUEUE_POD_GROUP_NAME_LABEL] for p in s.api.pods(NS)}
    return name


def test_the_reconciler_marks_before_it_deletes_when_the_job_succeeds():
    s = KueueSetup()
    s.run()
    s.kueue_webhook()
    s.api.set_pod_status(NS, "ctr-chief-0", {"phase": "Succeeded"})
    for p in s.api.pods(NS):
        s.cache.on_pod_event("MODIFIED", p)
    before = len(s.api.log)
    s.run()
    log = s.api.log[before:]
    marked = [i for i, c in enumerate(log) if c[0] == "mark-unretriable"]
    deleted = [i for i, c in enumerate(log) if c[:2] == ("delete", "Pod")]
    assert marked and deleted and max(marked) < min(deleted)
    assert {log[i][2] for i in marked} >= {"ctr-ps-0", "ctr-ps-1"}
    # The API's answer went into the cache: the next pass marks nothing again.
    before = len(s.api.log)
    asyncio.run(s.reconciler.reconcile(NS, "ctr"))
    assert not [c for c in s.api.log[before:] if c[0] == "mark-unretriable"]


def test_a_pod_deleted_while_held_at_kueues_gate_was_taken_by_the_queue_not_failed():
    meta = {
        "name": "j-worker-1",
        "labels": {
            LABEL_REPLICA_TYPE: "worker",
            LABEL_REPLICA_INDEX: "1",
            KUEUE_POD_GROUP_NAME_LABEL: "j-u1",
        },
        "finalizers": [KUEUE_POD_FINALIZER],
        "deletionTimestamp": "2026-11-22T12:00:00Z",
    }
    spec = {"schedulingGates": [{"name": KUEUE_ADMISSION_GATE}]}
    p = observe_pod({"metadata": meta, "spec": spec, "status": {"phase": "Pending"}})
    assert p is not None and p.disrupted and p.stopped_by_queue
    # Nothing more will happen to it: etj lets it go (others of the group are alive).
    assert pods_to_release([p, grouped(pod("chief", 0))], 2).pods == ["j-worker-1"]
    # Not deleted, or already scheduled: an ordinary pod.
    waiting = observe_pod(
        {"metadata": {**meta, "deletionTimestamp": None}, "spec": spec, "status": {}}
    )
    assert waiting is not None and not waiting.disrupted and waiting.stopped_by_queue is None
    placed = observe_pod({"metadata": meta, "spec": {"nodeName": "n1"}, "status": {}})
    assert placed is not None and placed.stopped_by_queue is None


def test_one_requeue_seen_pod_by_pod_is_said_once_with_its_first_reason():
    job = kueue_job()
    first = run(job, [stopped(p) if p.role == "worker" else grouped(p) for p in all_pods(job)])
    assert [e.reason for e in first.events if e.type == "Warning"] == ["Preempted"]
    # Later a pod held at the gate is taken too (another reason): still the same requeue.
    later_pods = [
        stopped(p) if p.role == "ps" else grouped(p, stopped_by_queue="deleted at the gate")
        for p in all_pods(job)
        if p.role != "worker"
    ]
    d = run(
        with_status(job, first),
        [*later_pods, *(stopped(p) for p in all_pods(job) if p.role == "worker")],
    )
    assert d.status is not None and not [e for e in d.events if e.type == "Warning"]
    cond = next(c for c in d.status.conditions if c.type == "Restarting")
    assert cond.reason == "Preempted"


def test_a_deleted_jobs_pods_are_marked_so_kueue_finishes_their_group():
    s = KueueSetup()
    s.run()
    s.kueue_webhook()
    job = s.api.jobs[(NS, "ctr")]
    job["metadata"]["deletionTimestamp"] = "2026-11-22T12:00:00Z"
    s.cache.on_job_event("MODIFIED", stamp(job))
    before = len(s.api.log)
    s.run()
    log = s.api.log[before:]
    assert {c[2] for c in log if c[0] == "mark-unretriable"} == set(s.uids())
    assert not [c for c in log if c[0] in ("create", "delete", "release")]
