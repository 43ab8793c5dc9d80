"""TF_CONFIG for every replica, derived from one replica set so all tasks agree.

Pure. Addresses default to the in-cluster DNS names the headless Service gives
(``<job>-<type>-<index>.<job>.<namespace>.svc:<port>``); the local runner passes its own
``address`` function to map the same tasks to loopback ports.

TensorFlow's conventions followed here: under ParameterServer the cluster has ``chief``,
``worker`` and ``ps`` — or, for a job running its own command as a TFJob does (dist-mnist's
between-graph replication), ``worker`` and ``ps`` only; under MultiWorkerMirrored there is
no ``ps``. A role with no task has no entry, and without a chief worker 0 is the chief
(the leader rule). An ``evaluator`` is never part of ``cluster`` — it gets the training
cluster with ``task.type == "evaluator"``. The roles, the leader rule and ``ReplicaSet``
are the contract's (``etj.api.roles``); the keys and values written here are plain
strings, as TF_CONFIG has them.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from etj.api.constants import TF_PORT
from etj.api.roles import ALL_ROLES, TRAINING_ROLES, ReplicaSet, Role

AddressFn = Callable[[Role, int], str]


def pod_name(job: str, role: Role, index: int) -> str:
    return f"{job}-{role}-{index}"


def dns_address(job: str, namespace: str, port: int = TF_PORT) -> AddressFn:
    """In-cluster addressing through the job's headless Service."""

    def address(role: Role, index: int) -> str:
        return f"{pod_name(job, role, index)}.{job}.{namespace}.svc:{port}"

    return address


def cluster_spec(replicas: ReplicaSet, address: AddressFn) -> dict[str, list[str]]:
    """The ``cluster`` part of TF_CONFIG (training roles with at least one task)."""
    return {
        role.value: [address(role, i) for i in range(replicas.count(role))]
        for role in TRAINING_ROLES
        if replicas.count(role) > 0
    }


def tf_config(replicas: ReplicaSet, role: Role, index: int, address: AddressFn) -> str:
    """The TF_CONFIG JSON of one task."""
    if role not in ALL_ROLES or not 0 <= index < replicas.count(role):
        raise ValueError(f"no task {role}/{index} in {replicas}")
    doc = {
        "cluster": cluster_spec(replicas, address),
        "task": {"type": str(role), "index": index},
    }
    return json.dumps(doc, sort_keys=True, separators=(",", ":"))
