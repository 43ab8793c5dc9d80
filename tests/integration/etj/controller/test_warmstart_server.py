"""spec.warmStart on the real API server, with the operator: a job warm-starting from
another job waits (no pod, WarmStarted False) until that job has Succeeded, then pins it
in status.warmStart with its table decisions and an Event, and its pods mount the source's
checkpoint claim read-only; a selector takes the newest Succeeded match; a changed
vocabularySize fails the job before any pod, naming the table.

The source jobs are managed by another controller (runPolicy.managedBy), so the operator
leaves them alone and the test sets their status as a finished job's would be."""

from __future__ import annotations

import json
from typing import Any

import pytest

from etj_testcluster import LocalCluster
from tests.integration.conftest import wait_for
from tests.integration.operator_helpers import (
    OperatorProcess,
    events,
    job_status,
    live_pods,
    ps_job,
    ps_job_pods,
)

pytestmark = pytest.mark.integration

OTHER = "example.com/another-controller"


def apply(cluster: LocalCluster, namespace: str, doc: dict[str, Any]) -> None:
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(doc))


def source(
    cluster: LocalCluster, namespace: str, name: str, labels: dict[str, str] | None = None
) -> None:
    doc = ps_job(name, checkpoint={"storage": {"size": "1Gi"}}, runPolicy={"managedBy": OTHER})
    doc["metadata"]["labels"] = labels or {}
    apply(cluster, namespace, doc)


def set_phase(
    cluster: LocalCluster, namespace: str, name: str, phase: str, completed: str | None = None
) -> None:
    status: dict[str, Any] = {"phase": phase, "progress": {"step": 500, "lastCheckpointStep": 500}}
    if completed:
        status["completionTime"] = completed
    cluster.kubectl(
        "patch",
        "etj",
        name,
        "-n",
        namespace,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": status}),
    )


def condition(cluster: LocalCluster, namespace: str, name: str, type_: str) -> Any:
    st = job_status(cluster, namespace, name)
    return next((c for c in st.get("conditions") or [] if c["type"] == type_), None)


def test_waits_for_the_source_then_pins_it_and_mounts_its_claim_read_only(
    crds: LocalCluster, namespace: str, operator: OperatorProcess
):
    source(crds, namespace, "day-1")
    set_phase(crds, namespace, "day-1", "Running")
    apply(crds, namespace, ps_job("day-2", warmStart={"fromJob": "day-1"}))
    waiting = wait_for(
        lambda: condition(crds, namespace, "day-2", "WarmStarted"), 120, "WarmStarted False"
    )
    assert (waiting["status"], waiting["reason"]) == ("False", "WaitingForSource")
    assert waiting["message"] == "waiting for job day-1 to succeed (it is Running)"
    assert not any(n.startswith("day-2-") for n in live_pods(crds, namespace))

    set_phase(crds, namespace, "day-1", "Succeeded", "2026-11-27T10:00:00Z")
    pinned = wait_for(lambda: job_status(crds, namespace, "day-2").get("warmStart"), 120, "the pin")
    assert pinned["sourceJob"] == "day-1" and pinned["step"] == 500
    assert pinned["location"] == "/var/lib/etj/warm-start/day-1"
    assert [(t["name"], t["action"]) for t in pinned["tables"]] == [("user_id", "Restored")]
    resolved = condition(crds, namespace, "day-2", "WarmStarted")
    assert (resolved["status"], resolved["reason"]) == ("True", "SourceResolved")
    made = wait_for(
        lambda: ps_job_pods("day-2") <= set(live_pods(crds, namespace)) or None, 120, "pods"
    )
    assert made
    chief = live_pods(crds, namespace)["day-2-chief-0"]
    volume = next(v for v in chief["spec"]["volumes"] if v["name"] == "warm-start")
    assert volume["persistentVolumeClaim"] == {"claimName": "day-1-checkpoints", "readOnly": True}
    mount = next(
        m for m in chief["spec"]["containers"][0]["volumeMounts"] if m["name"] == "warm-start"
    )
    assert mount["readOnly"] is True
    said = [e["message"] for e in events(crds, namespace) if e["reason"] == "SourceResolved"]
    assert said and said[0].startswith("warm start from job day-1 (fromJob) at step 500")
    assert "table user_id: restored (adagrad state kept)" in said[0]


def test_a_selector_takes_the_newest_succeeded_and_a_resized_table_is_refused(
    crds: LocalCluster, namespace: str, operator: OperatorProcess
):
    chain = {"chain": "ctr"}
    for name, completed in (("ctr-a", "2026-11-25T10:00:00Z"), ("ctr-b", "2026-11-26T10:00:00Z")):
        source(crds, namespace, name, chain)
        set_phase(crds, namespace, name, "Succeeded", completed)
    apply(crds, namespace, ps_job("ctr-c", warmStart={"selector": {"matchLabels": chain}}))
    pinned = wait_for(lambda: job_status(crds, namespace, "ctr-c").get("warmStart"), 120, "the pin")
    assert pinned["sourceJob"] == "ctr-b"

    resized = ps_job("ctr-d", warmStart={"fromJob": "ctr-b"})
    resized["spec"]["model"]["embeddings"][0]["vocabularySize"] = 2000
    apply(crds, namespace, resized)
    failed = wait_for(lambda: condition(crds, namespace, "ctr-d", "Failed"), 120, "Failed")
    assert failed["reason"] == "WarmStartRefused"
    assert "table user_id: vocabularySize 1000 in the checkpoint, 2000 here" in failed["message"]
    assert not any(n.startswith("ctr-d-") for n in live_pods(crds, namespace))
