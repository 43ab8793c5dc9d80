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

Pure.
"""

from __future__ import annotations

from collections.abc import Sequence

from etj.api.roles import ReplicaSet
from etj.api.spec import Strategy
from etj.api.trainer_reasons import EXIT_RETRYABLE, REASON_WATCHDOG
from etj.core.reconcile.policies.restart import Failure, restart_group


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
