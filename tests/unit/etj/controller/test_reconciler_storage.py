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
