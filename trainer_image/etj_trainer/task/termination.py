"""Why this replica ended, told to Kubernetes and to the operator.

A container's termination message (the file at ``terminationMessagePath``) is copied by
the kubelet into the pod's status, where ``kubectl describe pod`` shows it and the
operator reads it. The trainer writes one line there when it fails: ``<Reason>: <message>``,
with the same reason as its ``error`` event (``WatchdogTimeout``, ``DataError``, ...). The
operator acts on the reason (a ParameterServer chief stopped by the watchdog restarts the
whole job); the message is for people.

The path comes from ``ETJ_TERMINATION_LOG`` (the rendered pod sets it); without it nothing
is written. Writing never fails the caller: the message is a courtesy, the exit code is
what counts. ``report_failure`` writes both records of a failure (the ``error`` event and
this message). No TensorFlow here.
"""

from __future__ import annotations

import contextlib
import os

from etj.api.constants import TERMINATION_LOG_ENV

# Kubernetes keeps at most 4096 bytes of a termination message.
MAX_BYTES = 4096


def termination_text(reason: str, message: str) -> str:
    """The one line written: the reason first, so a reader can split on the first colon."""
    line = " ".join(f"{reason}: {message}".split())
    return line.encode()[:MAX_BYTES].decode(errors="ignore")


def write_termination_message(reason: str, message: str) -> None:
    path = os.environ.get(TERMINATION_LOG_ENV)
    if not path:
        return
    with contextlib.suppress(OSError), open(path, "w", encoding="utf-8") as f:
        f.write(termination_text(reason, message))


def report_failure(reason: str, message: str, exit_code: int) -> None:
    """A failure's two records: the ``error`` event on stdout (the chief's log, ``etj run``)
    and the termination message (the pod's status, the operator)."""
    from etj_trainer.task.progress import emit  # numpy and prometheus: only when it is needed

    emit("error", reason=reason, message=message[:500], exitCode=exit_code)
    write_termination_message(reason, message)
