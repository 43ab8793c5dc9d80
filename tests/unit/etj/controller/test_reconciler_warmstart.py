"""The reconciler and spec.warmStart (fake API): the namespace's jobs are read while the
source is not pinned, the pin is one status write with its Events after it and no pod,
the next pass makes the ConfigMap and pods from the pin (the source's claim read-only),
and nothing is listed or resolved again afterwards."""

from __future__ import annotations

import json
from typing import Any

from etj.api.warmstart import WARM_START_MOUNT
from tests.unit.etj.controller.test_reconciler import NS, PODS, Setup
from tests.unit.fake_api import stamp


def source_job(phase: str) -> dict[str, Any]:
    return {
        "apiVersion": "training.etj.dev/v1alpha1",
        "kind": "EmbeddingTrainingJob",
        "metadata": {"name": "day-1", "namespace": NS, "uid": "u-day-1", "labels": {"c": "x"}},
        "spec": {
            "model": {"embeddings": [{"name": "user_id", "vocabularySize": 1000, "dimension": 8}]},
            "checkpoint": {"storage": {}},
        },
        "status": {"phase": phase, "progress": {"step": 700, "lastCheckpointStep": 700}},
    }


def warm(s: Setup, warm_start: dict[str, Any]) -> None:
    job = s.api.jobs[(NS, "ctr")]
    job["spec"]["warmStart"] = warm_start
    job = stamp(job)
    s.api.jobs[(NS, "ctr")] = job
    assert s.cache is not None
    s.cache.on_job_event(None, job)


def status(s: Setup) -> dict[str, Any]:
    return dict(s.api.jobs[(NS, "ctr")].get("status") or {})


def pods_made(s: Setup) -> set[str]:
    return {c[2] for c in s.api.calls("create") if c[1] == "Pod"}


def test_waits_for_the_source_then_pins_it_then_makes_the_pods_reading_it_read_only():
    s = Setup()
    s.api.add_job(source_job("Running"))
    warm(s, {"fromJob": "day-1"})
    s.run()
    assert pods_made(s) == set() and not s.api.calls("create")
    assert ("list", "jobs", NS) in s.api.log
    c = next(c for c in status(s)["conditions"] if c["type"] == "WarmStarted")
    assert (c["status"], c["reason"]) == ("False", "WaitingForSource")
    assert [e.reason for e in s.events] == ["WaitingForSource"]

    # The source succeeds: the next pass pins it, with one status write, Events after it.
    s.api.jobs[(NS, "day-1")] = stamp(source_job("Succeeded"))
    patches = len(s.api.calls("patch"))
    s.run()
    assert len(s.api.calls("patch")) == patches + 1
    patch_at = max(i for i, c in enumerate(s.api.log) if c == ("patch", "status", "ctr"))
    events_at = [i for i, c in enumerate(s.api.log) if c == ("event", "SourceResolved")]
    assert len(events_at) == 1 and events_at[0] > patch_at
    assert pods_made(s) == set()
    ws = status(s)["warmStart"]
    assert ws["sourceJob"] == "day-1" and ws["step"] == 700
    assert ws["location"] == f"{WARM_START_MOUNT}/day-1"
    assert ws["tables"] == [
        {
            "name": "user_id",
            "action": "Restored",
            "reason": "adagrad state kept",
            "optimizerState": "Kept",
        }
    ]

    # The pods, from the pin; no more listing of jobs.
    listed = len([c for c in s.api.log if c[:2] == ("list", "jobs")])
    s.run()
    assert pods_made(s) == PODS
    config = json.loads(
        s.api.objects[("ConfigMap", NS, "ctr-trainer-config")]["data"]["trainer.json"]
    )
    assert config["warmStart"]["location"] == f"{WARM_START_MOUNT}/day-1"
    chief = s.api.objects[("Pod", NS, "ctr-chief-0")]
    volume = next(v for v in chief["spec"]["volumes"] if v["name"] == "warm-start")
    assert volume["persistentVolumeClaim"] == {"claimName": "day-1-checkpoints", "readOnly": True}
    s.run_all_pods()
    s.run()
    assert len([c for c in s.api.log if c[:2] == ("list", "jobs")]) == listed
    assert status(s)["warmStart"] == ws


def test_a_refused_source_fails_the_job_before_any_pod():
    s = Setup()
    failed = source_job("Failed")
    s.api.add_job(failed)
    warm(s, {"fromJob": "day-1"})
    s.run()
    assert pods_made(s) == set()
    st = status(s)
    assert st["phase"] == "Failed"
    c = next(c for c in st["conditions"] if c["type"] == "Failed")
    assert c["reason"] == "WarmStartRefused" and "it Failed" in c["message"]
