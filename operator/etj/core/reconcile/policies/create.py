"""The create step of a pass: pods held back by Kueue's group released; a changed worker
count applied (policies.scale: what must see the new cluster restarts, checkpoint first);
then the Service, the ConfigMap and every pod the spec wants and no pod has (a replica in
its restart back-off waits: the pass asks to be requeued when it is due), and the pods of
tasks the spec no longer has deleted.

Pure: no I/O; the step changes the pass it is given.
"""

from __future__ import annotations

from etj.api.reasons import REASON_CREATED, REASON_PODS_CREATED, REASON_SCALED, REASON_SCALING
from etj.api.roles import ReplicaSet, Role
from etj.api.status import ConditionType
from etj.core.reconcile.conditions import condition_true
from etj.core.reconcile.policies.backoff import waiting_seconds
from etj.core.reconcile.policies.pass_state import _Pass
from etj.core.reconcile.policies.queue import ADOPTION_RECHECK_SECONDS, pods_to_release
from etj.core.reconcile.policies.recovery import _restarted
from etj.core.reconcile.policies.scale import scale_step
from etj.core.tfconfig import pod_name


def create(p: _Pass, replicas: ReplicaSet) -> None:
    release = pods_to_release(p.w.pods, len(replicas.tasks()), p.w.queue_owners)
    p.d.release_pods = release.pods
    if release.awaiting_adoption:
        p.requeue(ADOPTION_RECHECK_SECONDS)
    _create_missing(p, replicas, _scale(p, replicas))


def _scale(p: _Pass, replicas: ReplicaSet) -> frozenset[tuple[Role, int]]:
    """Apply a change of the worker count (policies.scale); the tasks to leave alone."""
    assert p.w.plan is not None
    step = scale_step(p.w.plan.strategy, replicas, p.w.pods, p.st.restarting_pods)
    p.st.restarting_pods = sorted(set(p.st.restarting_pods) | set(step.replacing))
    p.d.delete_pods += [n for n in step.stop if n not in p.d.delete_pods]
    if step.message is not None:
        p.event("Normal", REASON_SCALED, step.message)
        p.condition(ConditionType.SCALING, True, REASON_SCALING, step.message)
    return step.hold


def _create_missing(
    p: _Pass, replicas: ReplicaSet, hold: frozenset[tuple[Role, int]] = frozenset()
) -> None:
    """Make the pods the spec wants and no pod has, delete those of tasks it no longer
    has; ``hold``: tasks left as they are in this pass (a change of the worker count)."""
    p.d.create_service = not p.w.has_service
    p.d.create_config_map = not p.w.has_config_map
    restarting = set(p.st.restarting_pods)
    deleting = set(p.d.delete_pods)
    desired = set(replicas.tasks())
    # Said once per job, even when the status write of the pass that created the pods
    # failed (the next pass then finds them there).
    first_time = not condition_true(p.st.conditions, ConditionType.CREATED)
    for key in replicas.tasks():
        pod = p.pods.get(key)
        name = pod_name(p.job.name, *key)
        if key in hold:
            continue
        if pod is None and name not in deleting:
            wait = waiting_seconds(p.st.restart_backoff.get(name), p.w.now)
            if name in restarting and wait > 0:
                p.requeue(wait)  # in back-off: come back when it is due
                continue
            p.d.create_pods.append(key)
            restarting.discard(name)
            _restarted(p, name)
        elif (
            pod is not None and name in restarting and not pod.terminating and name not in deleting
        ):
            # Still the old pod: its deletion did not go through; ask again.
            p.d.delete_pods.append(name)
    # Pods of tasks the spec no longer has (the job was scaled down).
    p.d.delete_pods += sorted(
        pod.name
        for key, pod in p.pods.items()
        if key not in desired and key not in hold and not pod.terminating
    )
    # A replica of a task the spec no longer has is not made again: once its pod is gone,
    # it is no longer restarting.
    wanted = {pod_name(p.job.name, *key) for key in desired} | {pod.name for pod in p.w.pods}
    p.st.restarting_pods = sorted(restarting & wanted)
    if first_time and (p.d.create_pods or p.w.pods):
        p.condition(
            ConditionType.CREATED, True, REASON_PODS_CREATED, f"{len(desired)} pods created"
        )
        p.event(
            "Normal",
            REASON_CREATED,
            f"created {len(desired)} pods ({p.w.plan.strategy if p.w.plan else ''}, {replicas.ps} ps)",
        )
