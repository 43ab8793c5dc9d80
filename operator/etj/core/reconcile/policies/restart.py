"""Which failures are retried, and which replicas restart together (README.md's table
under "Failure handling").

restartPolicy: ``Never`` — every failure is permanent; ``OnFailure`` — every failure is
retried; ``ExitCode`` — exit codes 1-127 are permanent (the program said it cannot go on),
128+ (signals, OOM kills) and failures with no exit code (deleted, evicted, node lost)
are retried. A replica whose trainer says ``ModelError`` (the job's own model code cannot
be used), ``DataError`` (a malformed data file) or ``CheckpointMismatch`` (the checkpoint
does not fit the model) is permanent under every policy: a restart would fail the same way.

Restart groups — ParameterServer: a worker alone (the coordinator keeps training on the
others and takes it back); the chief together with every worker; a ps together with the
chief and every worker (the chief restores every shard from the last checkpoint), or alone
in a job without a chief (a TFJob-shaped program of the user's own: TFJob restarts the
failed replica only). The workers go with every new chief because a worker still running
a chunk of the chief before can hold the new chief's first chunk: seen on kind (the new
chief's ``RemoteValue.fetch`` waiting, its coordinator thread in
``execute_with_cancellation`` on that worker) until the watchdog restarted the job (issue
39). The workers are stateless servers under ParameterServer (the tables are on the ps,
the input is made anew for each chief), and they start while the new chief restores, so
restarting them costs the new chief nothing it would not wait for anyway.
MultiWorkerMirrored: any worker or the chief restarts all of them (collectives cannot lose
a member). An evaluator restarts alone.

Pure.
"""

from __future__ import annotations

from dataclasses import dataclass

from etj.api.roles import ReplicaSet, Role
from etj.api.spec import RestartPolicy, Strategy
from etj.api.trainer_reasons import PERMANENT_TRAINER_REASONS, REASON_WATCHDOG
from etj.core.reconcile.observe import PodState


@dataclass(frozen=True)
class Failure:
    """A replica that failed, and whether the policy lets it be retried."""

    pod: PodState
    permanent: bool
    why: str


def classify(pod: PodState, restart_policy: RestartPolicy) -> Failure:
    what = pod.describe()
    to_fix = PERMANENT_TRAINER_REASONS.get(pod.trainer_reason or "")
    if to_fix:
        # Every restart would fail the same way: say what a person must fix.
        return Failure(pod, True, f"{what}; fix {to_fix} (a restart cannot)")
    if restart_policy == RestartPolicy.NEVER:
        return Failure(pod, True, f"{what}; restartPolicy Never")
    if restart_policy == RestartPolicy.EXIT_CODE:
        code = pod.exit_code
        if code is not None and 1 <= code <= 127 and not pod.oom_killed:
            return Failure(
                pod, True, f"{what}; exit codes 1-127 are permanent under restartPolicy ExitCode"
            )
    return Failure(pod, False, what)


def restart_group(
    strategy: Strategy, replicas: ReplicaSet, role: Role, index: int, reason: str | None = None
) -> set[tuple[Role, int]]:
    """The replicas that restart when (role, index) fails; ``reason`` is the one its
    trainer gave (the pod's termination message), if any."""
    if role == Role.EVALUATOR:
        return {(role, index)}
    if strategy == Strategy.MULTI_WORKER_MIRRORED:
        return {(r, i) for r, i in replicas.tasks() if r in (Role.CHIEF, Role.WORKER)}
    if role == Role.CHIEF and reason == REASON_WATCHDOG:
        return {(r, i) for r, i in replicas.tasks() if r != Role.EVALUATOR}
    if role == Role.WORKER or not replicas.chief:
        return {(role, index)}
    # A new chief: with every worker (see the module docstring), and a ps with them.
    return {(role, index)} | {(r, i) for r, i in replicas.tasks() if r in _WITH_A_NEW_CHIEF}


_WITH_A_NEW_CHIEF = (Role.CHIEF, Role.WORKER)
