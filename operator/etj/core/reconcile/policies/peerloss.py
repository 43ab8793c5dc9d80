"""Replicas that failed because a peer was lost with its node: not the job's failures.

A node that stops takes its replicas with it (``nodeloss``: a disruption, not counted
against backoffLimit), and their peers often end too: a ParameterServer chief whose ps is
gone, a MultiWorkerMirrored worker whose collective lost a member, exit with the trainer's
"a peer is unavailable" (138, ``etj.api.trainer_reasons.EXIT_RETRYABLE``). That end is the
node's doing, not the replica's: when the same pass sees a peer lost with its node, and the
replica restarts with that peer anyway (it is in the lost replica's restart group), its 138
is part of the same disruption and is not counted. A watchdog's 138 (a hang) and any other
exit code beside the loss are the replica's own failures and still count.

When the node's loss is seen first, its restart already takes the replica with it
(``restart_group``): its end after that is one of a restarting pod, never a failure.

The loss is usually seen last: the chief exits 138 within seconds of its ps' node
stopping, the ps is marked lost only after the node controller's grace and the pod's
tolerationSeconds (``nodeLossSeconds``), and meanwhile the chief's 138 (and its
replacement's) was counted. So a restart counted only for 138s is remembered in
``status.retryableRestarts`` (pods, time) for ``loss_window`` seconds; a peer of their
group seen lost with its node, that had started before they exited, refunds it: a node
loss costs the job none of its backoffLimit. Past the window the entry is forgotten (the
list stays short) and the restart stays counted.

Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from etj.api.roles import ReplicaSet
from etj.api.spec import EmbeddingTrainingJobSpec, Strategy
from etj.api.status import RetryableRestart
from etj.api.trainer_reasons import EXIT_RETRYABLE, REASON_WATCHDOG
from etj.core.reconcile.decision import iso, parse_time
from etj.core.reconcile.observe import PodState
from etj.core.reconcile.policies.restart import Failure, restart_group
from etj.core.tfconfig import pod_name

# kube-controller-manager's --node-monitor-grace-period (50 s since Kubernetes 1.32, 40 s
# before): how long a node that stopped reporting is still Ready, before its taints.
NODE_MONITOR_GRACE_SECONDS = 50
# The taint manager's eviction, the watch and the pass that sees it, on a loaded machine.
SEEN_SLACK_SECONDS = 30


def lost_with_a_peer(
    failures: Sequence[Failure], strategy: Strategy, replicas: ReplicaSet
) -> dict[str, str]:
    """The failures a peer lost with its node in the same pass explains: pod name -> the
    name of the lost peer."""
    lost = [f.pod for f in failures if f.pod.node_lost]
    explained: dict[str, str] = {}
    for f in failures:
        pod = f.pod
        if (
            pod.disrupted
            or pod.exit_code != EXIT_RETRYABLE
            or pod.trainer_reason == REASON_WATCHDOG
        ):
            continue
        peer = next(
            (
                p
                for p in lost
                if pod.key in restart_group(strategy, replicas, p.role, p.index, p.trainer_reason)
            ),
            None,
        )
        if peer is not None:
            explained[pod.name] = peer.name
    return explained


def retryable_only(failures: Sequence[Failure]) -> list[str]:
    """The pods of a counted restart when each failure it counts is a 138 a lost peer may
    explain (no watchdog's); [] when any is another failure (a crash: its own count)."""
    counted = [f.pod for f in failures if not f.pod.disrupted]
    if counted and all(
        p.exit_code == EXIT_RETRYABLE and p.trainer_reason != REASON_WATCHDOG for p in counted
    ):
        return sorted(p.name for p in counted)
    return []


def remembered(failures: Sequence[Failure], now: datetime) -> RetryableRestart | None:
    """The entry to keep for a restart counted in this pass, if only 138s counted it: its
    pods and when the last of them exited."""
    pods = retryable_only(failures)
    if not pods:
        return None
    ended = [f.pod.finished_at for f in failures if f.pod.name in pods and f.pod.finished_at]
    return RetryableRestart(pods=pods, time=iso(max(ended, default=now)))


def loss_window(spec: EmbeddingTrainingJobSpec, default_node_loss_seconds: int) -> float:
    """How long before a peer is seen lost its node may have stopped: the node
    controller's grace, the pods' tolerationSeconds (nodeLossSeconds: etj renders it;
    a job's own longer toleration of the taints makes this short, and its 138s stay
    counted) and the latency of seeing it."""
    seconds = spec.placement.node_loss_seconds
    seconds = default_node_loss_seconds if seconds is None else seconds
    return NODE_MONITOR_GRACE_SECONDS + seconds + SEEN_SLACK_SECONDS


def refunds(
    kept: Sequence[RetryableRestart],
    job: str,
    pods: Sequence[PodState],
    strategy: Strategy,
    replicas: ReplicaSet,
    now: datetime,
    window: float,
) -> tuple[list[RetryableRestart], dict[int, str]]:
    """The entries still kept (those within the window, not refunded) and the refunded
    ones: index in ``kept`` -> the lost peer that explains them."""
    since = now - timedelta(seconds=window)
    lost = [p for p in pods if p.node_lost]
    left: list[RetryableRestart] = []
    refunded: dict[int, str] = {}
    groups = {
        p.name: {
            pod_name(job, r, i)
            for r, i in restart_group(strategy, replicas, p.role, p.index, p.trainer_reason)
        }
        for p in lost
    }
    for i, entry in enumerate(kept):
        at = parse_time(entry.time)
        if at is None or at < since:
            continue  # forgotten: past any node loss that could explain it
        peer = next(
            (
                p
                for p in lost
                if p.started_at is not None
                and p.started_at <= at
                and p.name not in entry.pods
                and set(entry.pods) <= groups[p.name]
            ),
            None,
        )
        if peer is None:
            left.append(entry)
        else:
            refunded[i] = peer.name
    return left, refunded
