"""controller/reconciler with a fake API: reads come from the watch cache (no request per
pass), one status patch per change and none when nothing changed, Events only after the
status write succeeded, the API's answers to the operator's writes go into the cache."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from kubernetes.client.rest import ApiException

from etj.controller.cache import WatchCache
from etj.controller.reconciler import Outcome, Reconciler
from etj.controller.settings import OperatorSettings
from etj.core.reconcile.decision import Event
from tests.unit.fake_api import FakeKube

NS = "team"
PODS = {"ctr-chief-0", "ctr-worker-0", "ctr-worker-1", "ctr-ps-0", "ctr-ps-1"}


def manifest(**run_policy: Any) -> dict[str, Any]:
    return {
        "apiVersion": "training.etj.dev/v1alpha1",
        "kind": "EmbeddingTrainingJob",
        "metadata": {"name": "ctr", "namespace": NS, "uid": "u-1", "generation": 1},
        "spec": {
            "strategy": "ParameterServer",
            "replicas": {"worker": {"replicas": 2}, "ps": {"replicas": 2}},
            "model": {"embeddings": [{"name": "user_id", "vocabularySize": 1000, "dimension": 8}]},
            # Shared by the pods (on a path every node mounts): no claim to make or read.
            "checkpoint": {"uri": "/shared/checkpoints"},
            "runPolicy": {"restartBackoff": {"initialSeconds": 0}, **run_policy},
        },
    }


async def no_metrics(address: str) -> str | None:
    return None


class Setup:
    def __init__(self, cached: bool = True, **run_policy: Any) -> None:
        self.api = FakeKube()
        self.cache = WatchCache() if cached else None
        self.events: list[Event] = []
        self.reconciler = Reconciler(
            self.api,  # type: ignore[arg-type]
            OperatorSettings(),
            self.post,
            scrape=no_metrics,
            cache=self.cache,
        )
        job = self.api.add_job(manifest(**run_policy))
        if self.cache is not None:
            self.cache.on_job_event(None, job)

    def post(self, obj: dict[str, Any], event: Event) -> None:
        self.api.log.append(("event", event.reason))
        self.events.append(event)

    def run(self) -> Outcome:
        return asyncio.run(self.reconciler.reconcile(NS, "ctr"))

    def watch_pods(self) -> None:
        """The watch delivers every pod as it now is."""
        assert self.cache is not None
        for pod in self.api.pods(NS):
            self.cache.on_pod_event("MODIFIED", pod)

    def run_all_pods(self) -> None:
        for pod in self.api.pods(NS):
            self.api.set_pod_status(
                NS,
                pod["metadata"]["name"],
                {
                    "phase": "Running",
                    "containerStatuses": [
                        {
                            "name": "trainer",
                            "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}},
                        }
                    ],
                },
            )
        self.watch_pods()


def test_a_new_job_is_created_with_one_status_patch_and_its_events_after_it():
    s = Setup()
    s.run()
    created = {c[2] for c in s.api.calls("create") if c[1] == "Pod"}
    assert created == PODS
    assert len(s.api.calls("patch")) == 1
    patch_at = s.api.log.index(("patch", "status", "ctr"))
    assert [i for i, c in enumerate(s.api.log) if c[0] == "event"] and all(
        i > patch_at for i, c in enumerate(s.api.log) if c[0] == "event"
    )
    # Reads came from the cache: not one GET or LIST.
    assert s.api.calls("get") == [] and s.api.calls("list") == []


def test_a_pass_that_changes_nothing_writes_nothing_and_reads_nothing():
    s = Setup()
    s.run()
    s.run_all_pods()
    s.run()  # the pods are Running now: one status change
    assert len(s.api.calls("patch")) == 2
    before = len(s.api.log)
    for _ in range(3):  # no watch event yet for our own patch: the cache has its answer
        s.run()
    assert s.api.log[before:] == []


def test_the_operators_own_writes_are_seen_before_their_watch_events():
    s = Setup()
    s.run()
    # Nothing from the watch yet: neither the status patch nor the created pods. A second
    # pass must not create again or post "Created" twice.
    s.run()
    s.run()
    assert len([c for c in s.api.calls("create") if c[1] == "Pod"]) == len(PODS)
    assert [e.reason for e in s.events].count("Created") == 1
    # The second pass saw the pods it had made (active counts: one change), the third
    # nothing new.
    assert len(s.api.calls("patch")) == 2


def test_a_failed_status_write_posts_no_event():
    s = Setup()
    s.api.fail_status_patch = True
    with pytest.raises(ApiException):
        s.run()
    assert s.events == []
    s.api.fail_status_patch = False
    s.run()  # the retried pass writes once, then posts
    assert [e.reason for e in s.events] == ["Created"]
    assert s.api.log[-1] == ("event", "Created")


def test_a_failed_pod_is_one_patch_and_one_restarting_event():
    s = Setup()
    s.run()
    s.run_all_pods()
    s.run()
    s.api.set_pod_status(
        NS,
        "ctr-worker-1",
        {
            "phase": "Failed",
            "containerStatuses": [
                {"name": "trainer", "state": {"terminated": {"exitCode": 137, "reason": "Error"}}}
            ],
        },
    )
    s.watch_pods()
    before = len(s.api.log)
    s.run()
    new = s.api.log[before:]
    # The restart is recorded before the failed pod (its only other evidence) goes.
    assert new == [
        ("patch", "status", "ctr"),
        ("delete", "Pod", "ctr-worker-1"),
        ("event", "Restarting"),
    ]
    assert s.api.jobs[(NS, "ctr")]["status"]["restarts"] == 1


def fail_worker_1(s: Setup) -> None:
    s.api.set_pod_status(
        NS,
        "ctr-worker-1",
        {
            "phase": "Failed",
            "containerStatuses": [
                {"name": "trainer", "state": {"terminated": {"exitCode": 137, "reason": "Error"}}}
            ],
        },
    )
    s.watch_pods()


def resync(s: Setup) -> None:
    """A full resync from the fake API, as the operator makes on a re-listing."""
    assert s.cache is not None
    jobs, jv = asyncio.run(s.api.list_jobs(NS))
    pods, pv = asyncio.run(s.api.list_managed_pods(NS))
    s.cache.replace(jobs, jv, pods, pv, namespace=NS)


def test_a_restart_whose_status_write_failed_is_counted_once_the_api_is_back():
    # The API server goes away in the middle of the pass that handles a failure: the pod
    # must not be gone while the status does not yet say it failed, or the next pass
    # finds the replica merely missing and the restart is never counted.
    s = Setup()
    s.run()
    s.run_all_pods()
    s.run()
    fail_worker_1(s)
    s.api.fail_status_patch = True
    with pytest.raises(ApiException):
        s.run()
    s.api.fail_status_patch = False
    resync(s)  # what the API now has, after the outage
    s.run()
    assert s.api.jobs[(NS, "ctr")]["status"]["restarts"] == 1
    assert s.api.jobs[(NS, "ctr")]["status"]["restartingPods"] == ["ctr-worker-1"]
    s.run()  # no watch event of the delete: asked again, 404, out of the cache
    s.run()  # back-off 0: the replacement; still one restart
    assert ("Pod", NS, "ctr-worker-1") in s.api.objects
    assert s.api.jobs[(NS, "ctr")]["status"]["restarts"] == 1


def test_a_pod_already_gone_when_deleted_leaves_the_cache_and_is_recreated():
    # The watch expired while the failed pod was being deleted: its DELETED event was
    # never seen and the re-listing does not show it. The 404 the delete gets is the news.
    s = Setup()
    s.run()
    s.run_all_pods()
    s.run()
    fail_worker_1(s)
    s.run()  # the restart: status, delete
    assert s.api.jobs[(NS, "ctr")]["status"]["restarts"] == 1
    assert s.cache is not None
    # The cache still has the failed pod (no DELETED event); the API does not.
    assert "ctr-worker-1" in {p["metadata"]["name"] for p in s.cache.job_pods(NS, "ctr")}
    s.run()  # asks again: 404
    s.run()  # now missing from the cache too: recreated
    created = [c for c in s.api.calls("create") if c[1] == "Pod" and c[2] == "ctr-worker-1"]
    assert len(created) == 2
    assert s.api.jobs[(NS, "ctr")]["status"]["restarts"] == 1


def test_a_finished_job_needs_no_loop_unless_it_waits_for_its_ttl():
    s = Setup()
    s.run()
    s.run_all_pods()
    s.api.set_pod_status(NS, "ctr-chief-0", {"phase": "Succeeded"})
    s.watch_pods()
    outcome = s.run()
    assert outcome.finished and outcome.requeue_after is None
    t = Setup(ttlSecondsAfterFinished=60)
    t.run()
    t.run_all_pods()
    t.api.set_pod_status(NS, "ctr-chief-0", {"phase": "Succeeded"})
    t.watch_pods()
    outcome = t.run()
    assert outcome.finished and outcome.requeue_after is not None
    assert 0 < outcome.requeue_after <= 60


def test_without_a_cache_every_pass_reads_the_api():
    s = Setup(cached=False)
    s.run()
    assert s.api.calls("get") == [
        ("get", "job", "ctr"),
        ("get", "Service", "ctr"),
        ("get", "ConfigMap", "ctr-trainer-config"),
    ]
    assert s.api.calls("list") == [("list", "pods", "ctr")]


def test_a_job_not_yet_in_the_cache_is_read_once_from_the_api():
    s = Setup()
    assert s.cache is not None
    s.cache.forget_job(NS, "ctr")  # its watch event is still on its way
    s.run()
    assert s.api.calls("get") == [("get", "job", "ctr")]
    s.run()
    assert s.api.calls("get") == [("get", "job", "ctr")]  # cached since


def test_a_deleted_job_ends_its_loop():
    s = Setup()
    assert s.cache is not None
    del s.api.jobs[(NS, "ctr")]
    s.cache.on_job_event("DELETED", manifest())
    assert s.run().gone


def test_a_job_is_validated_once_per_generation_and_its_metadata_read_every_pass(monkeypatch):
    import etj.controller.reconciler as module

    validated: list[int] = []
    real = module.validate_manifest

    def counting(manifest: dict[str, Any]) -> Any:
        validated.append(manifest["metadata"]["generation"])
        return real(manifest)

    monkeypatch.setattr(module, "validate_manifest", counting)
    s = Setup()
    assert s.cache is not None
    s.run()
    s.run_all_pods()
    s.run()
    s.run()
    assert validated == [1]
    # A spec change comes with a new generation: validated (and planned) again.
    job = s.api.add_job({**manifest(), "status": s.cache.job(NS, "ctr")["status"]})
    job["metadata"]["generation"] = 2
    job["spec"]["replicas"]["worker"]["replicas"] = 3
    s.cache.on_job_event("MODIFIED", job)
    s.run()
    assert validated == [1, 2]
    assert "ctr-worker-2" in {c[2] for c in s.api.calls("create") if c[1] == "Pod"}
    # Metadata changes without a new generation; each pass reads it afresh (a job being
    # deleted is left alone).
    deleting = s.api.add_job(
        {**job, "metadata": {**job["metadata"], "deletionTimestamp": "2026-01-01T00:00:00Z"}}
    )
    s.cache.on_job_event("MODIFIED", deleting)
    before = len(s.api.log)
    s.api.set_pod_status(NS, "ctr-worker-0", {"phase": "Failed"})
    s.watch_pods()
    s.run()
    assert validated == [1, 2]
    assert s.api.log[before:] == [], "a job being deleted gets no writes"


def test_a_pod_is_observed_again_only_when_its_resource_version_changed(monkeypatch):
    import etj.controller.reconciler as reconciler_module

    observed: list[str] = []
    real = reconciler_module.observe_pod

    def counting(pod: dict[str, Any]) -> Any:
        observed.append(pod["metadata"]["name"])
        return real(pod)

    monkeypatch.setattr(reconciler_module, "observe_pod", counting)
    s = Setup()
    s.run()  # creates the pods
    s.watch_pods()
    s.run()
    assert sorted(observed) == sorted(PODS)
    observed.clear()
    s.run()  # nothing changed: nothing observed again
    assert observed == []
    s.run_all_pods()  # every pod Running, each with a new resourceVersion
    s.watch_pods()
    s.run()
    assert sorted(observed) == sorted(PODS)
    assert s.api.jobs[(NS, "ctr")]["status"]["phase"] == "Running"  # what they now show
