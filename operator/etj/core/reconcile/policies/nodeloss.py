"""Replicas lost with their node: how to tell, and what to do with their pods.

A node that stops answering is tainted ``node.kubernetes.io/unreachable`` (or
``not-ready``); once a replica's toleration of the taint runs out (etj renders a short one,
``placement.nodeLossSeconds``) the taint manager marks the pod ``DisruptionTarget`` with
reason ``DeletionByTaintManager`` and deletes it. Older control planes said ``NodeLost``
as the pod's reason. Either way the replica did not fail: it is a disruption, not counted
against backoffLimit (as batch/v1 Job's podFailurePolicy Ignore on DisruptionTarget).

Its kubelet is gone, so nothing ever confirms the deletion: the pod would stay
Terminating (and its name taken, so its replacement could not be made) until the node came
back or was deleted. The operator deletes such a pod at once (grace period 0), as a person
would with ``kubectl delete pod --force``: the node has been unreachable for the
toleration's seconds already, and a replica on the far side of a partition is unreachable
to its peers as well.

How a lost pod is told (``node_lost``) is in ``etj.core.reconcile.observe``. Pure.
"""

from __future__ import annotations

from etj.core.reconcile.observe import PodState


def pods_to_force_delete(pods: list[PodState]) -> list[str]:
    """Pods of lost nodes whose deletion no kubelet will finish."""
    return sorted(p.name for p in pods if p.node_lost and p.terminating and not p.finished)
