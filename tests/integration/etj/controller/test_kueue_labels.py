"""Kueue's plain-Pod group on the real API server, with the operator as a process: a job
labelled ``kueue.x-k8s.io/queue-name`` and created suspended creates no pod; on resume
every pod carries the queue, one group name and the group's total count as planned for
``ps: auto``, every pod retriable (so Kueue would requeue a preempted group); after the
chief succeeds the ps are deleted, no pod of the group stays active and the pods left are
marked unretriable, which is what lets Kueue count the group finished.

Kueue itself runs in test_kueue_admission.py when its binary can be built; this file needs
only the control plane."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from etj.api.constants import (
    KUEUE_POD_GROUP_NAME_LABEL,
    KUEUE_POD_GROUP_TOTAL_COUNT_ANNOTATION,
    KUEUE_QUEUE_NAME_LABEL,
    KUEUE_RETRIABLE_IN_GROUP_ANNOTATION,
    LABEL_REPLICA_TYPE,
)
from etj_testcluster import LocalCluster
from tests.integration.conftest import wait_for
from tests.integration.etj.controller.test_operator import PS_JOB, apply, phase
from tests.integration.operator_helpers import (
    KubeletStandIn,
    OperatorProcess,
    job_status,
    live_pods,
    pods,
)

pytestmark = pytest.mark.integration

QUEUE = "team-a"


def queued_job(**run_policy: Any) -> dict[str, Any]:
    doc = copy.deepcopy(PS_JOB)
    doc["metadata"]["labels"] = {KUEUE_QUEUE_NAME_LABEL: QUEUE}
    # ps: auto with room for little more than an empty ps each: the plan picks 3.
    doc["spec"]["replicas"]["ps"] = {
        "replicas": "auto",
        "resources": {"limits": {"memory": "780Mi"}},
    }
    doc["spec"]["runPolicy"].update(run_policy)
    return doc


def patch_suspend(cluster: LocalCluster, namespace: str, suspend: bool) -> None:
    body = json.dumps({"spec": {"runPolicy": {"suspend": suspend}}})
    cluster.kubectl("patch", "etj", "ctr", "-n", namespace, "--type=merge", "-p", body)


def test_a_queued_job_resumes_as_one_kueue_pod_group_that_can_finish(
    crds: LocalCluster, namespace: str, tmp_path: Path
):
    op = OperatorProcess(crds, namespace, tmp_path / "op.log").start()
    try:
        with KubeletStandIn(crds, namespace) as kubelet:
            apply(crds, namespace, queued_job(suspend=True))
            wait_for(lambda: phase(crds, namespace) == "Suspended", 120, "Suspended")
            assert pods(crds, namespace) == {}
            patch_suspend(crds, namespace, False)
            plan = wait_for(
                lambda: job_status(crds, namespace, "ctr").get("shardPlan"), 120, "the plan"
            )
            assert plan["psReplicas"] > 1
            expected = 1 + 2 + int(plan["psReplicas"])  # chief, workers, the planned ps
            created = wait_for(
                lambda: p if len(p := live_pods(crds, namespace)) == expected else None,
                120,
                f"{expected} pods",
            )
            uid = json.loads(
                crds.kubectl("get", "etj", "ctr", "-n", namespace, "-o", "json").stdout
            )["metadata"]["uid"]
            groups = set()
            for pod in created.values():
                labels, annotations = pod["metadata"]["labels"], pod["metadata"]["annotations"]
                assert labels[KUEUE_QUEUE_NAME_LABEL] == QUEUE
                groups.add(labels[KUEUE_POD_GROUP_NAME_LABEL])
                assert annotations[KUEUE_POD_GROUP_TOTAL_COUNT_ANNOTATION] == str(expected)
                # Retriable while the job runs: a preempted group is requeued by Kueue.
                assert KUEUE_RETRIABLE_IN_GROUP_ANNOTATION not in annotations
            assert groups == {f"ctr-{uid[:8]}"}
            wait_for(lambda: phase(crds, namespace) == "Running", 120, "Running")
            kubelet.terminate("ctr-chief-0", 0)
            for i in range(2):
                kubelet.terminate(f"ctr-worker-{i}", 0)
            wait_for(lambda: phase(crds, namespace) == "Succeeded", 120, "Succeeded")
            # The ps were stopped by etj; no pod of the group is still active.
            wait_for(
                lambda: all(
                    p["status"].get("phase") in ("Succeeded", "Failed")
                    for p in live_pods(crds, namespace).values()
                ),
                120,
                "no active pod in the group",
            )
            assert not any(
                p["metadata"]["labels"][LABEL_REPLICA_TYPE] == "ps"
                for p in live_pods(crds, namespace).values()
            )
            # Every pod left is marked unretriable: Kueue counts the group finished.
            wait_for(
                lambda: all(
                    p["metadata"]["annotations"].get(KUEUE_RETRIABLE_IN_GROUP_ANNOTATION) == "false"
                    for p in pods(crds, namespace).values()
                ),
                120,
                "the pods marked unretriable",
            )
    finally:
        op.stop()
