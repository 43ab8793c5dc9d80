"""Two operators as the chart runs them with replicaCount 2 (one leader Lease): exactly one
reconciles; the leader SIGKILLed in the middle of a burst of jobs is replaced by the standby
within 30 s; afterwards every job has exactly its pods and its restart count is right."""

from __future__ import annotations

import copy
import json
import re
import time
from pathlib import Path
from typing import Any

import pytest

from etj_testcluster import LocalCluster
from tests.integration.conftest import wait_for
from tests.integration.etj.controller.test_operator import PS_JOB, apply
from tests.integration.operator_helpers import (
    KubeletStandIn,
    OperatorProcess,
    job_status,
    live_pods,
    pods,
)

pytestmark = pytest.mark.integration

ROLES = ("chief-0", "worker-0", "worker-1", "ps-0", "ps-1")
BURST = [f"b{i}" for i in range(6)]


def named(name: str) -> dict[str, Any]:
    doc = copy.deepcopy(PS_JOB)
    doc["metadata"]["name"] = name
    return doc


def is_leader(op: OperatorProcess) -> bool:
    return re.search(r"^etj_leader 1\.0$", op.metrics(), re.M) is not None


def reconciled(op: OperatorProcess) -> bool:
    return 'etj_reconciles_total{result="ok"}' in op.metrics()


def test_one_leader_reconciles_and_the_standby_takes_over_when_it_is_killed(
    crds: LocalCluster, namespace: str, tmp_path: Path
):
    lease = ("--leader-election", f"{namespace}/etj")
    first = OperatorProcess(crds, namespace, tmp_path / "first.log", lease).start()
    wait_for(lambda: is_leader(first), 120, "the first operator leads")
    second = OperatorProcess(crds, namespace, tmp_path / "second.log", lease).start()
    try:
        with KubeletStandIn(crds, namespace) as kubelet:
            apply(crds, namespace, named("a"))
            wait_for(lambda: job_status(crds, namespace, "a").get("phase") == "Running", 120, "a")
            kubelet.terminate("a-worker-0", 137)
            wait_for(lambda: job_status(crds, namespace, "a").get("restarts") == 1, 120, "restart")
            wait_for(lambda: "a-worker-0" in live_pods(crds, namespace), 120, "a-worker-0 back")
            # The standby has done nothing at all.
            assert not is_leader(second) and not reconciled(second)

            # A burst of jobs; the leader dies as soon as their first pods appear.
            burst = {"apiVersion": "v1", "kind": "List", "items": [named(n) for n in BURST]}
            apply(crds, namespace, burst)
            wait_for(
                lambda: any(n.startswith("b") for n in pods(crds, namespace)), 120, "burst pods"
            )
            first.kill()
            killed = time.monotonic()
            wait_for(lambda: reconciled(second), 120, "the standby reconciles")
            takeover = time.monotonic() - killed
            assert is_leader(second)

            expected = {f"{job}-{role}" for job in ["a", *BURST] for role in ROLES}
            wait_for(
                lambda: set(live_pods(crds, namespace)) == expected,
                120,
                "every job with exactly its pods",
            )
            for job in ["a", *BURST]:
                wait_for(
                    lambda job=job: job_status(crds, namespace, job).get("phase") == "Running",
                    120,
                    f"{job} Running",
                )
            # Not one pod more: nothing was created twice, nothing is left over.
            assert set(pods(crds, namespace)) == expected
            a = job_status(crds, namespace, "a")
            assert a["restarts"] == 1 and a["replicaStatuses"]["worker"]["restarts"] == 1
            for job in BURST:
                assert job_status(crds, namespace, job)["restarts"] == 0
        holder = json.loads(
            crds.kubectl("get", "lease", "etj", "-n", namespace, "-o", "json").stdout
        )["spec"]
        assert holder["leaseTransitions"] == 1
        print(f"standby reconciled {takeover:.1f} s after the leader was SIGKILLed")
    finally:
        first.stop()
        second.stop()
