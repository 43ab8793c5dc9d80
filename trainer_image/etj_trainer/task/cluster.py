"""What this process is in the training cluster, read from ``TF_CONFIG``.

Pure parsing and validation of the standard TF_CONFIG JSON; no TensorFlow import, so it
is cheap and testable. It must not guess: a TF_CONFIG that names a task the cluster does
not have is a usage error (exit 2), not something to paper over.

The roles (``Role``) and the leader rule (``is_leader``) are the contract's
(``etj.api.roles``), the operator's and the trainer's alike.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from etj.api.roles import ALL_ROLES, TRAINING_ROLES, Role, is_leader
from etj.api.spec import Strategy
from etj.api.trainer_reasons import REASON_CLUSTER_ERROR


class ClusterError(ValueError):
    """TF_CONFIG is malformed or inconsistent."""

    reason = REASON_CLUSTER_ERROR


@dataclass(frozen=True)
class Task:
    """This process's role, and the cluster it belongs to."""

    type: Role
    index: int
    cluster: dict[str, list[str]] = field(default_factory=dict)

    @property
    def distributed(self) -> bool:
        return bool(self.cluster)

    def count(self, role: str) -> int:
        return len(self.cluster.get(role, []))

    @property
    def num_workers(self) -> int:
        return self.count(Role.WORKER)

    @property
    def num_ps(self) -> int:
        return self.count(Role.PS)

    @property
    def address(self) -> str | None:
        tasks = self.cluster.get(self.type, [])
        return tasks[self.index] if self.index < len(tasks) else None

    def is_leader(self) -> bool:
        """The task that reports progress, serves metrics and exports (``is_leader``)."""
        return is_leader(self.type, self.index, self.count(Role.CHIEF) > 0)

    def __str__(self) -> str:
        return f"{self.type}/{self.index}"


LOCAL = Task(type=Role.CHIEF, index=0, cluster={})


def parse_tf_config(text: str | None) -> Task:
    """The task described by a TF_CONFIG value; no TF_CONFIG means one local process."""
    if text is None or not text.strip():
        return LOCAL
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise ClusterError(f"TF_CONFIG is not JSON: {e}") from e
    if not isinstance(doc, dict):
        raise ClusterError("TF_CONFIG must be a JSON object with 'cluster' and 'task'")
    cluster = _cluster(doc.get("cluster"))
    task = doc.get("task")
    if not isinstance(task, dict):
        raise ClusterError("TF_CONFIG has no 'task' object")
    role, index = task.get("type"), task.get("index", 0)
    if role not in ALL_ROLES:
        raise ClusterError(f"TF_CONFIG task.type {role!r} is not one of {', '.join(ALL_ROLES)}")
    if not isinstance(index, int) or index < 0:
        raise ClusterError(f"TF_CONFIG task.index {index!r} is not a non-negative integer")
    # TensorFlow's convention: the evaluator is not part of the cluster dict.
    if role != Role.EVALUATOR and index >= len(cluster.get(role, [])):
        raise ClusterError(
            f"TF_CONFIG task {role}/{index} is not in the cluster "
            f"({len(cluster.get(role, []))} {role} task(s) listed)"
        )
    return Task(type=Role(role), index=index, cluster=cluster)


def _cluster(value: object) -> dict[str, list[str]]:
    if not isinstance(value, dict) or not value:
        raise ClusterError("TF_CONFIG has no 'cluster' object")
    cluster: dict[str, list[str]] = {}
    for role, addresses in value.items():
        if role not in TRAINING_ROLES:
            raise ClusterError(f"TF_CONFIG cluster has an unknown role {role!r}")
        if not isinstance(addresses, list) or not all(isinstance(a, str) for a in addresses):
            raise ClusterError(f"TF_CONFIG cluster.{role} must be a list of host:port strings")
        cluster[role] = list(addresses)
    return cluster


def check_strategy(task: Task, strategy: Strategy) -> None:
    """The cluster must have the roles the strategy needs."""
    if not task.distributed:
        return
    if strategy == Strategy.PARAMETER_SERVER:
        missing = [r.value for r in TRAINING_ROLES if task.count(r) == 0]
        if missing:
            raise ClusterError(
                f"strategy ParameterServer needs chief, worker and ps tasks; TF_CONFIG has no "
                f"{', '.join(missing)}"
            )
        if task.count(Role.CHIEF) != 1:
            raise ClusterError("strategy ParameterServer needs exactly one chief")
    elif task.count(Role.PS):
        raise ClusterError("strategy MultiWorkerMirrored takes no ps tasks; TF_CONFIG lists some")
