"""A change of the worker count (``kubectl scale etj/NAME --replicas=N``, an autoscaler)
applied to a running job without losing a step or counting a restart.

A pod's TF_CONFIG is fixed when the pod is made, and every pod says how many workers it
names (``PodState.cluster_workers``, from the pod's annotation). When that differs from
the spec's count, the pods whose cluster must change are restarted in an order that keeps
the training state:

- ParameterServer: ``ClusterCoordinator`` takes its cluster when it starts, so the chief
  restarts with the new TF_CONFIG. It is stopped first and alone: on SIGTERM it finishes
  the chunks in flight, checkpoints and exits (``etj_trainer.task.loop``), and the new
  chief restores that checkpoint. The ps and the other workers keep running (a coordinator
  gives every task its cluster when it connects); added workers are made at once; workers
  past the new count are kept until the chief that used them has stopped.
- MultiWorkerMirrored: every worker takes part in each collective, so all of them (and the
  chief) restart with the new TF_CONFIG. The leader is stopped first (it checkpoints on
  SIGTERM, the others wait in their next collective), then the others once it is gone, and
  none is made again while a pod of the old cluster remains: the new cluster resumes from
  the checkpoint the leader took.

A pod that does not say its worker count (made by an older etj) is left alone. None of
this is a failure: ``backoffLimit`` and the restart counts do not move.

Pure.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from etj.api.roles import ReplicaSet, Role
from etj.api.spec import Strategy
from etj.core.reconcile.observe import PodState


@dataclass(frozen=True)
class ScaleStep:
    """What one pass does for a change of the worker count."""

    # Pods to delete now (a graceful stop: the leader checkpoints on SIGTERM).
    stop: list[str] = field(default_factory=list)
    # Pods that leave for the change, not because they failed: kept in restartingPods
    # (never counted as failures; made again with the new TF_CONFIG once gone).
    replacing: list[str] = field(default_factory=list)
    # Tasks no pod is made for, and whose pods are not deleted, in this pass.
    hold: frozenset[tuple[Role, int]] = frozenset()
    # Workers before and after; ``message`` says what happens, when the change begins now.
    before: int | None = None
    after: int = 0
    message: str | None = None


def _old(pods: Iterable[PodState], workers: int, roles: tuple[Role, ...]) -> list[PodState]:
    """The pods of ``roles`` whose TF_CONFIG names another worker count."""
    return [
        p
        for p in pods
        if p.role in roles and p.cluster_workers is not None and p.cluster_workers != workers
    ]


def _before(old: list[PodState]) -> int | None:
    return max((p.cluster_workers for p in old if p.cluster_workers is not None), default=None)


def scale_step(
    strategy: Strategy, replicas: ReplicaSet, pods: list[PodState], restarting: Iterable[str]
) -> ScaleStep:
    """This pass's part of applying ``replicas.worker`` to the running pods."""
    if strategy == Strategy.MULTI_WORKER_MIRRORED:
        return _mirrored(replicas, pods, set(restarting))
    if replicas.chief == 0:
        # A TFJob-shaped program of the user's own: no coordinator of etj's to restart.
        return ScaleStep(after=replicas.worker)
    return _parameter_server(replicas, pods, set(restarting))


def _parameter_server(
    replicas: ReplicaSet, pods: list[PodState], restarting: set[str]
) -> ScaleStep:
    workers = replicas.worker
    old = _old(pods, workers, (Role.CHIEF,))
    if not old:
        return ScaleStep(after=workers)
    stop = [p.name for p in old if not p.terminating]
    # Workers past the new count stay while the chief that schedules on them drains.
    hold = frozenset(
        p.key for p in pods if p.role == Role.WORKER and p.index >= workers and not p.terminating
    )
    before = _before(old)
    message = None
    if any(name not in restarting for name in stop):
        message = (
            f"workers {before} -> {workers}: the chief checkpoints and restarts with a cluster "
            f"of {workers} workers, training resumes from that checkpoint (not counted "
            "against backoffLimit)"
        )
    return ScaleStep(
        stop=stop,
        replacing=[p.name for p in old],
        hold=hold,
        before=before,
        after=workers,
        message=message,
    )


def _mirrored(replicas: ReplicaSet, pods: list[PodState], restarting: set[str]) -> ScaleStep:
    workers = replicas.worker
    old = _old(pods, workers, (Role.CHIEF, Role.WORKER))
    if not old:
        return ScaleStep(after=workers)
    group = frozenset(p.key for p in pods if p.role in (Role.CHIEF, Role.WORKER)) | frozenset(
        t for t in replicas.tasks() if t[0] in (Role.CHIEF, Role.WORKER)
    )
    leader = next((p for p in old if p.key == replicas.leader()), None)
    if leader is not None and not leader.terminating and not leader.finished:
        stop = [leader.name]  # alone first: it checkpoints while the others wait for it
    elif leader is not None and leader.terminating:
        stop = []  # still checkpointing
    else:
        stop = [p.name for p in old if not p.terminating]
    before = _before(old)
    message = None
    if any(p.name not in restarting for p in old):
        message = (
            f"workers {before} -> {workers}: the leader checkpoints, then every worker "
            f"restarts with a cluster of {workers}, training resumes from that checkpoint "
            "(not counted against backoffLimit)"
        )
    return ScaleStep(
        stop=stop,
        replacing=[p.name for p in old],
        hold=group,
        before=before,
        after=workers,
        message=message,
    )


def scale_done(strategy: Strategy, pods: list[PodState], replicas: ReplicaSet) -> bool:
    """Every pod whose cluster follows the worker count runs the spec's (ParameterServer:
    the chief; the ps and workers keep the cluster they were made with)."""
    if strategy == Strategy.MULTI_WORKER_MIRRORED:
        return not _old(pods, replicas.worker, (Role.CHIEF, Role.WORKER))
    return not _old(pods, replicas.worker, (Role.CHIEF,))
