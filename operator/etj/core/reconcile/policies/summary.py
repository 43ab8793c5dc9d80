"""The summary step of a pass that leaves the job running: recovered replicas forget their
failures (policies.recovery), and the phase and conditions say what the pods do —
Restarting while a replica is being replaced, Running once every replica runs (a change of
the worker count done once the new cluster runs: policies.scale), else Pending.

Pure: no I/O; the step changes the pass it is given.
"""

from __future__ import annotations

from etj.api.reasons import REASON_ALL_RUNNING, REASON_RUNNING, REASON_SCALED
from etj.api.roles import ReplicaSet
from etj.api.status import ConditionType, Phase
from etj.core.reconcile.conditions import condition_true
from etj.core.reconcile.policies.pass_state import _Pass
from etj.core.reconcile.policies.recovery import _forget_recovered
from etj.core.reconcile.policies.scale import scale_done
from etj.core.reconcile.status import all_running


def summarise(p: _Pass, replicas: ReplicaSet) -> None:
    _forget_recovered(p)
    if p.st.restarting_pods:
        p.st.phase = Phase.RESTARTING
        return
    if all_running(p.pods, replicas) and not p.d.create_pods:
        if p.st.phase != Phase.RUNNING:
            p.event("Normal", REASON_RUNNING, "all replicas are running")
        p.st.phase = Phase.RUNNING
        p.condition(ConditionType.RUNNING, True, REASON_ALL_RUNNING, "")
        p.condition(ConditionType.RESTARTING, False, REASON_ALL_RUNNING, "")
        assert p.w.plan is not None
        if condition_true(p.st.conditions, ConditionType.SCALING) and scale_done(
            p.w.plan.strategy, p.w.pods, replicas
        ):
            p.condition(
                ConditionType.SCALING,
                False,
                REASON_SCALED,
                f"{replicas.worker} workers running; training resumed from the checkpoint "
                "taken before the change",
            )
    elif p.st.phase not in (Phase.RUNNING, Phase.RESTARTING):
        p.st.phase = Phase.PENDING
