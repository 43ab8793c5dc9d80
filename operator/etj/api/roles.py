"""The roles of a training cluster, the leader rule, and how many tasks of each role a job runs.

The one home of these for the operator, the local runner and the trainer (which imports
them from here, not a copy of its own). TensorFlow's conventions: TF_CONFIG's ``cluster``
lists ``chief``, ``worker`` and ``ps`` tasks in that order; an ``evaluator`` is never part
of ``cluster``. TFJob's rule for the leader: the chief, else worker 0 when the job has no
chief.

Pure: no I/O, no environment.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum


class Role(StrEnum):
    """A task type of TensorFlow's cluster convention (TF_CONFIG ``task.type``), in the
    order TensorFlow lists them; also the replica-type label's value and the key of
    ``spec.replicas``."""

    CHIEF = "chief"
    WORKER = "worker"
    PS = "ps"
    EVALUATOR = "evaluator"


ALL_ROLES: tuple[Role, ...] = tuple(Role)
# The roles of the training cluster: TensorFlow's convention leaves the evaluator out of
# TF_CONFIG's ``cluster`` dict.
TRAINING_ROLES: tuple[Role, ...] = (Role.CHIEF, Role.WORKER, Role.PS)


def leader(has_chief: bool) -> tuple[Role, int]:
    """The replica whose success is the job's, which reports progress, serves metrics,
    writes checkpoints first and exports: the chief, or worker 0 of a job without a chief
    (TFJob's rule). The one home of this rule."""
    return (Role.CHIEF, 0) if has_chief else (Role.WORKER, 0)


def is_leader(role: Role, index: int, has_chief: bool) -> bool:
    """Whether the task (role, index) is the ``leader`` of a job with or without a chief. A
    chief always is: a process that runs alone (no TF_CONFIG, no cluster) is the chief."""
    return role == Role.CHIEF or (role == Role.WORKER and index == 0 and not has_chief)


@dataclass(frozen=True)
class ReplicaSet:
    """How many tasks of each role a job runs, keyed by ``Role``."""

    chief: int = 0
    worker: int = 0
    ps: int = 0
    evaluator: int = 0

    def count(self, role: Role) -> int:
        return int(getattr(self, Role(role).value))

    def items(self) -> Iterator[tuple[Role, int]]:
        """(role, count) for every role, in TensorFlow's order (zero counts included)."""
        return ((role, self.count(role)) for role in ALL_ROLES)

    def tasks(self) -> list[tuple[Role, int]]:
        """Every (role, index) of the job, in a stable order."""
        return [(role, i) for role, n in self.items() for i in range(n)]

    def leader(self) -> tuple[Role, int]:
        """The job's leader (``leader``): the chief, or worker 0 when there is none."""
        return leader(self.chief > 0)
