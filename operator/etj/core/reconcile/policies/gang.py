"""Gang scheduling: is a gang-scheduled job's gang placed, waiting, or unplaceable? Pure.

The scheduler binds a gang's pods all together or none (etj.core.render.scheduling makes the
gang object). What the job says comes from its pods: those bound (``spec.nodeName``)
against the gang's minimum, and the scheduler's ``PodScheduled=False/Unschedulable``
message on any that cannot be placed (the v1.35 Workload has no status of its own; a
PodGroup's phase says no more than its pods do). ``gang_step`` is the step of a pass
(``decide``) that keeps the gang object and the Scheduled condition.
"""

from __future__ import annotations

from dataclasses import dataclass

from etj.api.reasons import (
    REASON_GANG_SCHEDULED,
    REASON_GANG_UNAVAILABLE,
    REASON_GANG_UNSCHEDULABLE,
    REASON_GANG_WAITING,
)
from etj.api.roles import ReplicaSet, Role
from etj.api.spec import GangScheduler
from etj.api.status import ConditionType, EmbeddingTrainingJobStatus
from etj.core.reconcile.conditions import set_condition
from etj.core.reconcile.observe import PodState
from etj.core.reconcile.policies.pass_state import _Pass
from etj.core.render.scheduling import min_available

# The job's condition type (its reasons: etj.api.reasons, REASON_GANG_*).
CONDITION_SCHEDULED = ConditionType.SCHEDULED


@dataclass(frozen=True)
class GangState:
    scheduled: bool
    reason: str
    message: str


def gang_state(pods: list[PodState], min_count: int, backend: GangScheduler) -> GangState:
    """Where the gang of ``min_count`` pods stands, from the job's current pods."""
    current = [p for p in pods if not p.terminating]
    bound = sum(1 for p in current if p.node_name)
    if bound >= min_count:
        return GangState(
            True, REASON_GANG_SCHEDULED, f"{bound} pods bound ({backend} gang of {min_count})"
        )
    stuck = sorted((p for p in current if p.unschedulable and not p.node_name), key=_key)
    if stuck:
        first = stuck[0]
        return GangState(
            False,
            REASON_GANG_UNSCHEDULABLE,
            f"the {backend} gang of {min_count} pods cannot be placed ({bound} bound, "
            f"{len(stuck)} unschedulable); {first.name}: {first.unschedulable}",
        )
    return GangState(
        False,
        REASON_GANG_WAITING,
        f"waiting for the scheduler to place the {backend} gang of {min_count} ({bound} bound)",
    )


def _key(p: PodState) -> tuple[Role, int]:
    return (p.role, p.index)


def gang_unavailable(
    status: EmbeddingTrainingJobStatus, message: str, now: str, generation: int | None
) -> EmbeddingTrainingJobStatus:
    """The status of a job whose gang object could not be made (no pod is created without
    it): Scheduled False with the API server's reason; the next pass tries again."""
    st = status.model_copy(deep=True)
    st.message = message
    st.conditions = set_condition(
        st.conditions, CONDITION_SCHEDULED, False, REASON_GANG_UNAVAILABLE, message, now, generation
    )
    return st


def gang_step(p: _Pass, replicas: ReplicaSet) -> None:
    """Keep the gang object as the plan wants it; say whether the gang is placed."""
    if p.w.gang is None:
        return
    p.d.apply_gang = not p.w.gang_current
    state = gang_state(p.w.pods, min_available(p.job, replicas), p.w.gang)
    old = next((c for c in p.st.conditions if c.type == CONDITION_SCHEDULED), None)
    if old is None or old.reason != state.reason:
        if state.reason == REASON_GANG_UNSCHEDULABLE:
            p.event("Warning", state.reason, state.message)
        elif state.reason == REASON_GANG_SCHEDULED:
            p.event("Normal", state.reason, state.message)
    p.condition(CONDITION_SCHEDULED, state.scheduled, state.reason, state.message)
