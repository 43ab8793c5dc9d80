"""Replicas coming back: a restarted replica's back-off entry, and the failure counts of
replicas that have run cleanly for resetAfterSeconds.

Pure: no I/O; each rule changes the pass it is given.
"""

from __future__ import annotations

from etj.core.reconcile.policies.backoff import recovered, seconds_to_recovery
from etj.core.reconcile.policies.pass_state import _Pass


def _restarted(p: _Pass, name: str) -> None:
    entry = p.st.restart_backoff.get(name)
    if entry is None:
        return
    if entry.failures:
        p.st.restart_backoff[name] = entry.model_copy(update={"next_restart_time": None})
    else:
        del p.st.restart_backoff[name]


def _forget_recovered(p: _Pass) -> None:
    """A replica that has run cleanly for resetAfterSeconds loses its failure count; the
    decision asks to be requeued when the next one will have (a change of the time alone:
    the operator does not decide again on an unchanged world before its requeue)."""
    policy = p.job.spec.run_policy.restart_backoff
    running = {pod.name: pod for pod in p.w.pods}
    kept = {}
    for n, e in p.st.restart_backoff.items():
        pod = running.get(n)
        if e.next_restart_time is not None or pod is None:
            kept[n] = e
        elif not recovered(pod, policy, p.w.now):
            kept[n] = e
            p.requeue(seconds_to_recovery(pod, policy, p.w.now))
    p.st.restart_backoff = kept
