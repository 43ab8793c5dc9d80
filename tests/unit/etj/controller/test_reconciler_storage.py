"""The reconciler and a job's checkpoint storage (fake API): checkpoint.storage's claim is
made before the first pod and kept; a claim the job names is read once, before any pod,
and one its pods cannot share fails the job with StorageNotShared naming the field."""

from __future__ import annotations

from typing import Any

from tests.unit.etj.controller.test_reconciler import NS, PODS, Setup
from tests.unit.fake_api import stamp


def with_checkpoint(s: Setup, checkpoint: dict[str, Any]) -> None:
    job = s.api.jobs[(NS, "ctr")]
    job["spec"]["checkpoint"] = checkpoint
    job = stamp(job)
    s.api.jobs[(NS, "ctr")] = job
    assert s.cache is not None
    s.cache.on_job_event(None, job)


def add_claim(s: Setup, name: str, modes: list[str]) -> None:
    s.api.objects[("PersistentVolumeClaim", NS, name)] = {
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"accessModes": modes},
    }


def test_the_checkpoint_claim_is_made_before_any_pod_owned_by_the_job():
    s = Setup()
    with_checkpoint(s, {"storage": {"size": "2Gi"}})
    s.run()
    log = s.api.log
    claim_at = log.index(("create", "PersistentVolumeClaim", "ctr-checkpoints"))
    first_pod = next(i for i, c in enumerate(log) if c[:2] == ("create", "Pod"))
    assert claim_at < first_pod
    claim = s.api.objects[("PersistentVolumeClaim", NS, "ctr-checkpoints")]
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    assert claim["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    assert {c[2] for c in s.api.calls("create") if c[1] == "Pod"} == PODS
    # Once the pods are there, no pass makes (or deletes) it again.
    s.run_all_pods()
    before = len(s.api.calls("create"))
    s.run()
    assert len(s.api.calls("create")) == before


def test_a_read_write_once_claim_fails_the_job_before_any_pod_saying_why():
    s = Setup()
    with_checkpoint(s, {"volume": {"persistentVolumeClaim": {"claimName": "ckpt"}}})
    add_claim(s, "ckpt", ["ReadWriteOnce"])
    s.run()
    assert not [c for c in s.api.calls("create") if c[1] == "Pod"]
    status = s.api.jobs[(NS, "ctr")]["status"]
    assert status["phase"] == "Failed"
    failed = next(c for c in status["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "StorageNotShared"
    assert failed["message"].startswith(
        "spec.checkpoint.volume: claim ckpt has accessModes ReadWriteOnce, so this job's 5 pods"
    )
    assert [e.reason for e in s.events] == ["StorageNotShared"]


def test_a_read_write_many_claim_is_read_once_and_the_pods_are_made():
    s = Setup()
    with_checkpoint(s, {"volume": {"persistentVolumeClaim": {"claimName": "ckpt"}}})
    add_claim(s, "ckpt", ["ReadWriteMany"])
    s.run()
    assert {c[2] for c in s.api.calls("create") if c[1] == "Pod"} == PODS
    s.run_all_pods()
    s.run()
    assert s.api.calls("get") == [("get", "PersistentVolumeClaim", "ckpt")]


def old_claim(s: Setup, **metadata: Any) -> None:
    """The checkpoint claim an earlier job of the same name left: owned by that job (uid
    u-0), which the garbage collector is deleting or is about to."""
    s.api.objects[("PersistentVolumeClaim", NS, "ctr-checkpoints")] = {
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": "ctr-checkpoints",
            "namespace": NS,
            "ownerReferences": [
                {"apiVersion": "training.etj.dev/v1alpha1", "kind": "EmbeddingTrainingJob",
                 "name": "ctr", "uid": "u-0", "controller": True}
            ],
            **metadata,
        },
        "spec": {"accessModes": ["ReadWriteMany"]},
    }  # fmt: skip


def test_a_recreated_job_waits_for_its_predecessors_claim_to_go_then_makes_its_own():
    """`kubectl delete` then `apply` of a job of the same name: the old claim, owned by the
    deleted job, is still there (Terminating while the old pods let go of it). Pods made now
    would mount a claim about to vanish and stay Pending for good; so no pod until the old
    claim is gone, then a claim of this job's own, then the pods."""
    s = Setup()
    with_checkpoint(s, {"storage": {"size": "2Gi"}})
    old_claim(s, deletionTimestamp="2026-11-26T00:00:00Z")
    s.run()
    assert not [c for c in s.api.calls("create") if c[1] == "Pod"]
    # Not yet marked for deletion, but owned by the deleted job: the collector takes it.
    old_claim(s)
    s.run()
    assert not [c for c in s.api.calls("create") if c[1] == "Pod"]
    del s.api.objects[("PersistentVolumeClaim", NS, "ctr-checkpoints")]
    s.run()
    claim = s.api.objects[("PersistentVolumeClaim", NS, "ctr-checkpoints")]
    assert claim["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    assert {c[2] for c in s.api.calls("create") if c[1] == "Pod"} == PODS


def test_a_retained_claim_of_an_earlier_job_is_used_as_it_is():
    """retain: the claim outlives its job, unowned, so that a job of the same name goes on
    from its checkpoints: it is used, not waited for."""
    s = Setup()
    with_checkpoint(s, {"storage": {"size": "2Gi", "retain": True}})
    old_claim(s, ownerReferences=[])
    s.run()
    assert {c[2] for c in s.api.calls("create") if c[1] == "Pod"} == PODS
