"""Kueue's plain-Pod group while a job lives: what etj does so a preempted job is requeued
and resumes, and so a finished job's group is counted finished.

How Kueue (v0.15, pkg/controller/jobs/pod) treats a group: every pod carries Kueue's
finalizer, so a deleted pod stays until Kueue lets it go; Kueue lets a failed pod go only
once a replacement pod of the same role exists beside it, and counts the group finished
when every pod succeeded or — with a pod annotated ``retriable-in-group: "false"`` — when
no pod is active any more. When Kueue preempts a running group it marks each pod
``TerminationTarget`` (reason ``WorkloadEvicted``, message "Preempted to accommodate ..."),
deletes them, and once none runs it releases the quota and marks the Workload Requeued;
new pods of the group are gated until it is admitted again.

So etj keeps every pod retriable while the job runs (an unretriable pod would make a
preempted group Finished, not requeued) and marks the pods still there unretriable only
when the job has finished or is suspended (``pods_to_mark_unretriable``): then Kueue counts
the group finished once none is active and frees its quota. etj's replicas keep their
names, so a replacement cannot stand beside the pod it replaces: etj itself lets go of its
own failed pods being replaced (``pods_to_release``), all but one while no pod of the group
is alive, so the group — and its Workload, which its pods own (the garbage collector
deletes it with the last of them) — never has no pod at all. That last one goes only once
Kueue names every new pod among the Workload's owners (it adds them on its next pass over
the group, which on a busy control plane comes seconds later): let go before, it takes
the Workload's last owner with it, the garbage collector deletes the Workload, and Kueue
— finding running pods and no Workload — neither counts the group again nor finishes it.
The operator reads the owners (``owners_wanted`` says when) and asks to look again soon
while they are not all there (``ADOPTION_RECHECK_SECONDS``).

Pure: pods (and the uids owning the Workload) in, pod names out.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from etj.api.reasons import REASON_EVICTED, REASON_PREEMPTED
from etj.core.reconcile.observe import PodState

# A Kueue eviction whose message says so (Kueue's scheduler writes "Preempted to
# accommodate a workload ..."); other evictions (deactivation, node failures) say otherwise.
_PREEMPTED_PREFIX = "Preempted"
QUEUE_REASONS = frozenset({REASON_PREEMPTED, REASON_EVICTED})


# How soon to look again at a group whose new pods Kueue has not all adopted yet: Kueue's
# update of its Workload is no pod event, so nothing else would wake the reconcile.
ADOPTION_RECHECK_SECONDS = 1.0


def _ended_and_deleted(pods: list[PodState]) -> list[str]:
    # Ended, or deleted before it was ever scheduled (nothing more will happen to it).
    return sorted(
        p.name
        for p in pods
        if p.queue_held and p.terminating and (p.finished or p.node_name is None)
    )


def owners_wanted(pods: Iterable[PodState]) -> bool:
    """Whether a pass must know the Workload's owners (``pods_to_release``'s ``owners``):
    a held pod is ready to go while others of the group are alive — perhaps the group's
    last pod from before them."""
    pods = list(pods)
    return bool(_ended_and_deleted(pods)) and any(not p.terminating for p in pods)


class Release(NamedTuple):
    """``pods``: to let go now; ``awaiting_adoption``: one is held only until Kueue's
    Workload names the new pods among its owners (look again soon)."""

    pods: list[str]
    awaiting_adoption: bool = False


def pods_to_release(
    pods: Iterable[PodState], group_size: int, owners: frozenset[str] | None = None
) -> Release:
    """Pods whose Kueue finalizer etj removes: its own pods that ended (or never ran) and
    are being deleted (replaced, or stopped by Kueue), and whether one is held back only
    until Kueue adopts the new pods. While the group's other replicas are not all alive
    (not being deleted), or Kueue's Workload does not yet name every one of them (uids in
    ``owners``; None: not known, e.g. no Workload or no right to read it) among its owners,
    the first of them stays, so the Workload always has an owner; its turn comes once they
    are. A group of one pod has no other to wait for: its pod goes, Kueue's Workload with
    it, and the replacement is queued as a new Workload."""
    pods = list(pods)
    done = _ended_and_deleted(pods)
    alive = [p for p in pods if not p.terminating]
    if group_size <= 1:
        return Release(done)
    if not alive or len(alive) < group_size - len(done):
        return Release(done[1:])
    if owners is None or all(p.uid in owners for p in alive):
        return Release(done)
    return Release(done[1:], awaiting_adoption=bool(done))


def pods_to_mark_unretriable(pods: Iterable[PodState]) -> list[str]:
    """The pods of a finished or suspended job's Kueue group to annotate unretriable, so
    Kueue counts the group finished once none is active (the ps never succeed: etj stops
    them). Every pod still there that is not marked yet: one would do, each is as good."""
    return sorted(p.name for p in pods if p.in_queue_group and not p.unretriable)


def queue_eviction(pods: Iterable[PodState]) -> tuple[str, str] | None:
    """(reason, Kueue's message) when Kueue stopped any of these pods, else None:
    ``Preempted`` for a preemption, ``EvictedByQueue`` for another eviction."""
    for p in sorted(pods, key=lambda p: p.name):
        if p.stopped_by_queue is not None:
            message = p.stopped_by_queue
            reason = REASON_PREEMPTED if message.startswith(_PREEMPTED_PREFIX) else REASON_EVICTED
            return reason, message
    return None
