"""``_Pass``: the mutable state of one decision (the world, the new status, the Decision
being made), so each rule of ``decide`` is a short function of it.

Pure: no I/O; the caller passes the time.
"""

from __future__ import annotations

from dataclasses import replace

from etj.api.reasons import REASON_CHECKPOINT_READ
from etj.api.roles import ReplicaSet, Role
from etj.api.status import ConditionType, EmbeddingTrainingJobStatus, ExportStatus, Phase
from etj.core.reconcile.conditions import set_condition
from etj.core.reconcile.decision import Decision, Event, World, iso
from etj.core.reconcile.policies.completion import pods_to_clean
from etj.core.reconcile.policies.queue import pods_to_mark_unretriable
from etj.core.reconcile.policies.warmstart import event_message, summary_lines
from etj.core.reconcile.status import replica_statuses, worker_selector, workers_column
from etj.core.render.trainer_config import trainer_export


class _Pass:
    """The mutable state of one decision, so each rule is a short method."""

    def __init__(self, world: World):
        self.w = world
        self.job = world.job
        status = world.job.status or EmbeddingTrainingJobStatus()
        # A shallow copy (a deep one of the whole status, shard plan and conditions
        # included, costs a tenth of every pass): the rules give the status new values (new
        # lists, conditions, counts, back-off entries) and change in place only the
        # back-off map, copied here; the world's status is never changed (the unit tests
        # check it after every decision).
        self.st = status.model_copy(update={"restart_backoff": dict(status.restart_backoff)})
        self.d = Decision()
        self.now = iso(world.now)
        self.gen = world.job.metadata.generation
        self.pods = {p.key: p for p in world.pods}

    def event(self, type_: str, reason: str, message: str) -> None:
        self.d.events.append(Event(type_, reason, message))
        self.st.message = message

    def condition(self, type_: ConditionType, status: bool, reason: str, message: str = "") -> None:
        self.st.conditions = set_condition(
            self.st.conditions, type_, status, reason, message, self.now, self.gen
        )

    def finish(self, phase: Phase, reason: str, message: str) -> None:
        self.st.phase = phase
        self.st.completion_time = self.st.completion_time or self.now
        self.st.restarting_pods = []
        self.stop_waiting()
        self.condition(ConditionType(phase), True, reason, message)
        self.condition(ConditionType.RUNNING, False, reason, message)
        self.condition(ConditionType.RESTARTING, False, reason, "")
        self.event("Normal" if phase == Phase.SUCCEEDED else "Warning", reason, message)
        self.d.delete_pods = pods_to_clean(self.w.pods, self.job.spec.run_policy.clean_pod_policy)
        self.d.mark_unretriable = pods_to_mark_unretriable(self.w.pods)

    def stop_waiting(self) -> None:
        """No restart is pending any more: back-off times go, failure counts stay."""
        self.st.restart_backoff = {
            n: e.model_copy(update={"next_restart_time": None})
            for n, e in self.st.restart_backoff.items()
            if e.failures
        }

    def _trainer_warm_start(self) -> None:
        """A location's warm start is decided table by table by the trainer, which alone
        reads the checkpoint: its report fills status.warmStart once (one Event, a line per
        decision)."""
        pinned, report = self.st.warm_start, self.w.warm_start_report
        if pinned is None or pinned.tables or pinned.location is None or report is None:
            return
        step, tables = report
        self.st.warm_start = pinned.model_copy(
            update={"tables": tables, "step": pinned.step if step is None else step}
        )
        message = event_message(summary_lines(self.st.warm_start))
        self.d.events.append(Event("Normal", REASON_CHECKPOINT_READ, message))

    def export_status(self, reported: ExportStatus | None) -> ExportStatus | None:
        """A serving version the leader reported, with the base path it is under (the
        metrics page does not say it; the job's spec does)."""
        export = trainer_export(self.job)
        if reported is None or export is None or reported.location is not None:
            return reported
        return reported.model_copy(update={"location": export.directory})

    def requeue(self, seconds: float | None) -> None:
        if seconds is not None:
            current = self.d.requeue_after
            self.d.requeue_after = seconds if current is None else min(current, seconds)

    def done(self, replicas: ReplicaSet | None = None) -> Decision:
        if replicas is not None:
            # The pods this pass deletes are stopping, not active: the status is written
            # once, and a finished job may see no pass after its pods are gone.
            stopping = set(self.d.delete_pods)
            pods = [
                replace(pod, terminating=True) if pod.name in stopping else pod
                for pod in self.w.pods
            ]
            self.st.replica_statuses = replica_statuses(pods, replicas, self.st.replica_statuses)
            self.st.workers = workers_column(self.st.replica_statuses, replicas)
            # The scale subresource's status (kubectl scale, autoscalers).
            self.st.worker_replicas = sum(
                1 for pod in pods if pod.role == Role.WORKER and pod.active
            )
            self.st.worker_selector = worker_selector(self.job.name)
        if self.w.progress is not None and self.st.phase != Phase.SUCCEEDED:
            self.st.progress = self.w.progress
        if self.w.evaluation is not None and self.st.phase != Phase.SUCCEEDED:
            self.st.evaluation = self.w.evaluation
        if self.w.export is not None and self.st.phase != Phase.SUCCEEDED:
            self.st.export = self.export_status(self.w.export)
        self._trainer_warm_start()
        self.st.observed_generation = self.gen
        self.d.status = self.st
        return self.d
