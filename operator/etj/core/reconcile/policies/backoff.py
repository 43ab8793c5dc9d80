"""Restart back-off: how long a failed replica waits before it is recreated.

As batch/v1 Job and the kubelet's CrashLoopBackOff do: the n-th consecutive failure of a
replica waits ``initialSeconds * 2**(n-1)``, capped at ``maxSeconds``; a replica that ran
``resetAfterSeconds`` before it failed counts from one again. A worker under
ParameterServer whose pod was deleted or evicted (preempted, it did not crash) is replaced
at once and its count is left alone: the coordinator is waiting for it, and nothing says
it would fail again. So is any replica marked for disruption (``PodState.disrupted``:
Kubernetes' DisruptionTarget, Kueue's TerminationTarget).

The count and the time of the next restart live in ``status.restartBackoff`` (by pod
name), so an operator restart neither forgets a back-off nor restarts early.

Pure: the caller passes ``now``; nothing here reads the clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from etj.api.roles import Role
from etj.api.spec import RestartBackoff, Strategy
from etj.api.status import PodPhase, ReplicaBackoff
from etj.core.reconcile.observe import PodState


@dataclass(frozen=True)
class Wait:
    """The back-off decided for one failed replica."""

    failures: int  # its consecutive failures, this one included (unchanged if immediate)
    seconds: float  # 0: restart at once


def delay_seconds(failures: int, policy: RestartBackoff) -> float:
    """The wait after the ``failures``-th consecutive failure: 10 s, 20 s, 40 s, ... capped."""
    if failures <= 0 or policy.initial_seconds == 0:
        return 0.0
    # Past 2**20 the cap has long been reached; bound the exponent to keep it an int.
    return float(min(policy.max_seconds, policy.initial_seconds * 2 ** min(failures - 1, 20)))


def replaced_at_once(strategy: Strategy, pod: PodState) -> bool:
    """A disrupted replica (any role), or a preempted ParameterServer worker: no back-off,
    no count."""
    return pod.disrupted or (
        strategy == Strategy.PARAMETER_SERVER and pod.role == Role.WORKER and pod.preempted
    )


def restart_wait(
    pod: PodState,
    previous: ReplicaBackoff | None,
    strategy: Strategy,
    policy: RestartBackoff,
    now: datetime,
) -> Wait:
    """How long ``pod``'s replica waits before it is recreated, and its new count."""
    before = previous.failures if previous else 0
    if replaced_at_once(strategy, pod):
        return Wait(before, 0.0)
    ran = pod.ran_seconds(now)
    ran_cleanly = ran is not None and ran >= policy.reset_after_seconds
    failures = 1 if ran_cleanly else before + 1
    return Wait(failures, delay_seconds(failures, policy))


def waiting_seconds(entry: ReplicaBackoff | None, now: datetime) -> float:
    """Seconds until a replica waiting in back-off may be recreated (0: now)."""
    if entry is None or entry.next_restart_time is None:
        return 0.0
    due = datetime.fromisoformat(entry.next_restart_time.replace("Z", "+00:00"))
    return max(0.0, (due - now).total_seconds())


def recovered(pod: PodState, policy: RestartBackoff, now: datetime) -> bool:
    """The replica has run cleanly long enough for its count to be forgotten."""
    ran = pod.ran_seconds(now)
    return pod.phase == PodPhase.RUNNING and ran is not None and ran >= policy.reset_after_seconds


def seconds_to_recovery(pod: PodState, policy: RestartBackoff, now: datetime) -> float | None:
    """Seconds until ``recovered`` holds for ``pod`` with nothing else changing (0: it does);
    None when time alone cannot make it hold (the pod is not running, or when it started
    is unknown)."""
    ran = pod.ran_seconds(now)
    if pod.phase != PodPhase.RUNNING or ran is None:
        return None
    return max(0.0, policy.reset_after_seconds - ran)


def due_time(now: datetime, seconds: float) -> datetime:
    """``now + seconds``, rounded up to a whole second: status times are written without
    fractions, and the restart must not come before the time the Event names."""
    due = now + timedelta(seconds=seconds)
    return due.replace(microsecond=0) + timedelta(seconds=1) if due.microsecond else due
