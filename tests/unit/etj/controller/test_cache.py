"""controller/cache: watch events and the operator's own writes kept by resourceVersion;
a full resync drops what the API no longer has; a re-listing that shows something new asks
for a resync."""

from __future__ import annotations

from typing import Any

from etj.controller.cache import WatchCache, newer


def job(name: str, rv: int, ns: str = "a", **status: Any) -> dict[str, Any]:
    return {
        "metadata": {"namespace": ns, "name": name, "resourceVersion": str(rv)},
        "status": status,
    }


def pod(name: str, job_name: str, rv: int, ns: str = "a") -> dict[str, Any]:
    return {
        "metadata": {
            "namespace": ns,
            "name": name,
            "resourceVersion": str(rv),
            "labels": {"training.etj.dev/job-name": job_name},
        }
    }


def test_an_older_copy_never_replaces_a_newer_one():
    cache = WatchCache()
    cache.put_job(job("j", 10, phase="Running"))  # the answer to our status patch
    cache.on_job_event("MODIFIED", job("j", 9, phase="Pending"))  # a late watch event
    assert cache.job("a", "j")["status"]["phase"] == "Running"
    cache.on_job_event("MODIFIED", job("j", 11, phase="Succeeded"))
    assert cache.job("a", "j")["status"]["phase"] == "Succeeded"
    assert newer(job("j", 12), job("j", 11)) and not newer(job("j", 2), job("j", 11))
    assert newer({"metadata": {"resourceVersion": "x"}}, job("j", 11))  # opaque: later wins


def test_pods_are_kept_by_job_and_deletions_remove_them():
    cache = WatchCache()
    cache.on_pod_event("ADDED", pod("j-chief-0", "j", 5))
    cache.on_pod_event("ADDED", pod("j-ps-0", "j", 6))
    cache.on_pod_event("ADDED", pod("k-chief-0", "k", 7))
    assert {p["metadata"]["name"] for p in cache.job_pods("a", "j")} == {"j-chief-0", "j-ps-0"}
    cache.on_pod_event("DELETED", pod("j-ps-0", "j", 8))
    assert [p["metadata"]["name"] for p in cache.job_pods("a", "j")] == ["j-chief-0"]
    assert cache.job_pods("b", "j") == []
    cache.on_pod_event("ADDED", {"metadata": {"namespace": "a", "name": "stray"}})
    assert cache.job_pods("a", "stray") == []


def test_a_resync_drops_what_a_broken_watch_hid_and_keeps_what_came_after():
    cache = WatchCache()
    cache.on_job_event(None, job("gone", 5))
    cache.on_job_event(None, job("stays", 6))
    cache.on_pod_event(None, pod("gone-chief-0", "stays", 7))
    cache.on_pod_event(None, pod("new-chief-0", "stays", 30))  # created after the list
    cache.put_child("Service", "a", "gone")
    cache.on_job_event(None, job("other-ns", 8, ns="b"))
    cache.replace([job("stays", 6)], "20", [], "20", namespace="a")
    assert cache.job("a", "gone") is None and cache.job("a", "stays") is not None
    assert [p["metadata"]["name"] for p in cache.job_pods("a", "stays")] == ["new-chief-0"]
    assert not cache.has("Service", "a", "gone")
    assert cache.job("b", "other-ns") is not None  # another namespace's list: untouched
    assert cache.synced


def test_every_relisting_asks_for_a_resync():
    cache = WatchCache()
    # Before the first resync, the initial listing is expected: no resync asked.
    assert not cache.on_job_event(None, job("j", 5)).resync
    cache.replace([job("j", 5)], "5", [], "5")
    # kopf re-lists after an expired watch: even the same versions ask (see below)...
    assert cache.on_job_event(None, job("j", 5)).resync
    assert cache.on_job_event(None, job("j", 9)).resync
    assert cache.on_pod_event(None, pod("j-chief-0", "j", 10)).resync
    # ...ordinary watch events never do.
    assert not cache.on_job_event("MODIFIED", job("j", 11)).resync
    assert not cache.on_pod_event("MODIFIED", pod("j-chief-0", "j", 12)).resync


def test_a_pod_deleted_while_the_watch_was_away_is_dropped_by_the_resync_its_relisting_asks():
    cache = WatchCache()
    cache.replace([job("j", 5)], "8", [pod("j-chief-0", "j", 6), pod("j-worker-1", "j", 7)], "8")
    # The watch expires; meanwhile j-worker-1 is deleted. The re-listing holds only what
    # is left, unchanged: nothing in it looks new, yet the cache is wrong.
    asked = [
        cache.on_job_event(None, job("j", 5)).resync,
        cache.on_pod_event(None, pod("j-chief-0", "j", 6)).resync,
    ]
    assert any(asked)
    assert {p["metadata"]["name"] for p in cache.job_pods("a", "j")} == {"j-chief-0", "j-worker-1"}
    cache.replace([job("j", 5)], "20", [pod("j-chief-0", "j", 6)], "20")
    assert [p["metadata"]["name"] for p in cache.job_pods("a", "j")] == ["j-chief-0"]


def test_children_are_forgotten_with_their_job():
    cache = WatchCache()
    cache.put_child("Service", "a", "j")
    cache.put_child("ConfigMap", "a", "j")
    cache.put_child("Service", "a", "k")
    cache.on_job_event("DELETED", job("j", 3))
    assert not cache.has("Service", "a", "j") and not cache.has("ConfigMap", "a", "j")
    assert cache.has("Service", "a", "k")


def test_managed_fields_are_not_kept():
    cache = WatchCache()
    fat = job("j", 3)
    fat["metadata"]["managedFields"] = [{"manager": "etj", "fieldsV1": {"f:status": {}}}]
    cache.put_job(fat)
    assert "managedFields" not in cache.job("a", "j")["metadata"]
    assert "managedFields" in fat["metadata"]  # the caller's object is left alone


def test_only_an_event_that_changes_what_a_reconcile_reads_is_news():
    """The job's loop is woken by news only: the echo of the operator's own write (its
    answer already cached), a late older copy or an unknown deletion is none."""
    cache = WatchCache()
    assert cache.on_job_event("ADDED", job("j", 5)).news
    cache.put_job(job("j", 7, phase="Running"))  # the answer to the operator's status write
    assert not cache.on_job_event("MODIFIED", job("j", 7, phase="Running")).news  # its echo
    assert not cache.on_job_event("MODIFIED", job("j", 6)).news  # a late older copy
    assert cache.on_job_event("MODIFIED", job("j", 8)).news
    cache.put_pod(pod("j-chief-0", "j", 9))  # the answer to the operator's create
    assert not cache.on_pod_event("ADDED", pod("j-chief-0", "j", 9)).news
    assert cache.on_pod_event("MODIFIED", pod("j-chief-0", "j", 10)).news
    assert not cache.on_pod_event("ADDED", {"metadata": {"namespace": "a", "name": "x"}}).news
    assert cache.on_pod_event("DELETED", pod("j-chief-0", "j", 11)).news
    assert not cache.on_pod_event("DELETED", pod("j-chief-0", "j", 11)).news  # already gone
    assert cache.on_job_event("DELETED", job("j", 12)).news
    assert not cache.on_job_event("DELETED", job("j", 12)).news
