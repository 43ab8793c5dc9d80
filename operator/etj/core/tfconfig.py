"""TF_CONFIG for every replica, derived from one replica set so all tasks agree.

Pure. Addresses default to the in-cluster DNS names the headless Service gives
(``<job>-<type>-<index>.<job>.<namespace>.svc:<port>``); the local runner passes its own
``address`` function to map the same tasks to loopback ports.

TensorFlow's conventions followed here: under ParameterServer the cluster has ``chief``,
``worker`` and ``ps`` — or, for a job running its own command as a TFJob does (dist-mnist's
between-graph replication), ``worker`` and ``ps`` only; under MultiWorkerMirrored there is
no ``ps``. A role with no task has no entry, and without a chief worker 0 is the chief
(``ReplicaSet.leader``). An ``evaluator`` is never part of ``cluster`` — it gets the
training cluster with ``task.type == "evaluator"``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

from etj.api.constants import TF_PORT

# The roles in the order TensorFlow lists them.
TRAINING_ROLES = ("chief", "worker", "ps")
ALL_ROLES = (*TRAINING_ROLES, "evaluator")

AddressFn = Callable[[str, int], str]


@dataclass(frozen=True)
class ReplicaSet:
    """How many tasks of each role a job runs."""

    chief: int = 0
    worker: int = 0
    ps: int = 0
    evaluator: int = 0

    def count(self, role: str) -> int:
        return int(getattr(self, role))

    def tasks(self) -> list[tuple[str, int]]:
        """Every (role, index) of the job, in a stable order."""
        return [(role, i) for role in ALL_ROLES for i in range(self.count(role))]

    def leader(self) -> tuple[str, int]:
        """The replica whose success is the job's, which serves progress and checkpoints
        first: the chief, or worker 0 when there is none. The one home of this rule."""
        return ("chief", 0) if self.chief > 0 else ("worker", 0)


def pod_name(job: str, role: str, index: int) -> str:
    return f"{job}-{role}-{index}"


def dns_address(job: str, namespace: str, port: int = TF_PORT) -> AddressFn:
    """In-cluster addressing through the job's headless Service."""

    def address(role: str, index: int) -> str:
        return f"{pod_name(job, role, index)}.{job}.{namespace}.svc:{port}"

    return address


def cluster_spec(replicas: ReplicaSet, address: AddressFn) -> dict[str, list[str]]:
    """The ``cluster`` part of TF_CONFIG (training roles with at least one task)."""
    return {
        role: [address(role, i) for i in range(replicas.count(role))]
        for role in TRAINING_ROLES
        if replicas.count(role) > 0
    }


def tf_config(replicas: ReplicaSet, role: str, index: int, address: AddressFn) -> str:
    """The TF_CONFIG JSON of one task."""
    if role not in ALL_ROLES or not 0 <= index < replicas.count(role):
        raise ValueError(f"no task {role}/{index} in {replicas}")
    doc = {
        "cluster": cluster_spec(replicas, address),
        "task": {"type": role, "index": index},
    }
    return json.dumps(doc, sort_keys=True, separators=(",", ":"))
