"""Why this replica ended, told to Kubernetes and to the operator.

A container's termination message (the file at ``terminationMessagePath``) is copied by
the kubelet into the pod's status, where ``kubectl describe pod`` shows it and the
operator reads it. The trainer writes one line there when it fails: ``<Reason>: <message>``,
with the same reason as its ``error`` event (``WatchdogTimeout``, ``DataError``, ...). The
operator acts on the reason (a ParameterServer chief stopped by the watchdog restarts the
whole job); the message is for people.

The path comes from ``ETJ_TERMINATION_LOG`` (the rendered pod sets it); without it nothing
is written. Writing never fails the caller: the message is a courtesy, the exit code is
what counts. ``report_failure`` writes both records of a failure (the ``error`` event,
``etj_trainer.task.events``, and this message).

``permanent_failure`` finds a failure no restart cures (``PERMANENT_TRAINER_REASONS``: a
``DataError``, ``ModelError``, ``CheckpointMismatch``) wherever TensorFlow put it: as the
error itself, in its ``__cause__``/``__context__`` chain (autograph's ``StagingError``
and its re-created "in user code" exceptions keep the original there), or only as text
(an error re-raised from a worker, a ``py_function``'s traceback inside an
``InvalidArgumentError``). No TensorFlow here.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable, Iterator

from etj.api.constants import TERMINATION_LOG_ENV
from etj.api.trainer_reasons import PERMANENT_TRAINER_REASONS
from etj_trainer.task.events import emit

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


# A reason's own line in an error's text: "DataError: <message>", the class name possibly
# qualified ("etj_trainer.data.records.DataError: ..." in a Python traceback), indented in
# autograph's "in user code" message. Python prints an error by its class name, so for this
# path (an error that reached here as text only) each permanent class is named as its
# reason: tests/trainer/etj_trainer/task/test_termination.py fails on a class renamed alone.
_NAMED = re.compile(
    r"^[ \t]*(?:[A-Za-z_][\w.]*\.)?(" + "|".join(PERMANENT_TRAINER_REASONS) + r"): (\S.*)$", re.M
)


def exception_chain(error: BaseException) -> Iterator[BaseException]:
    """The error, then its causes and contexts, depth first, each once."""
    seen: set[int] = set()
    stack = [error]
    while stack:
        e = stack.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        yield e
        stack.extend(x for x in (e.__context__, e.__cause__) if x is not None)


def failure_reason(error: BaseException) -> str:
    """The reason a failure is reported under: an etj error's ``reason`` (data of its class,
    from ``etj.api.trainer_reasons``), else the class name of a foreign error (TensorFlow's,
    Python's), which no rule of the operator reads."""
    reason = getattr(type(error), "reason", None)
    return reason if isinstance(reason, str) else type(error).__name__


def _reason_of(error: BaseException) -> str | None:
    """The permanent reason this exception's class (or a base class) carries, if any."""
    reason = getattr(type(error), "reason", None)
    return reason if reason in PERMANENT_TRAINER_REASONS else None


def permanent_failure(
    error: BaseException, extract: Callable[[BaseException], BaseException | None] | None = None
) -> tuple[str, str] | None:
    """``(reason, message)`` of the permanent failure inside ``error``, or None.

    The innermost exception of a permanent class wins (autograph re-creates a ModelError
    with its stack around the message; the original is in the chain); then what
    ``extract`` finds in an exception (the DataError text a pipeline check marked); then
    a reason's own line in any exception's text (the first such line: the message is one
    line)."""
    chain = list(exception_chain(error))
    typed = [e for e in chain if _reason_of(e)]
    if typed:
        inner = typed[-1]
        reason = _reason_of(inner)
        assert reason is not None
        return reason, str(inner)
    for e in chain:
        found = extract(e) if extract else None
        if found is not None:
            return failure_reason(found), str(found)
    for e in chain:
        match = _NAMED.search(str(e))
        if match:
            return match.group(1), match.group(2).strip()
    return None


def report_failure(reason: str, message: str, exit_code: int) -> None:
    """A failure's two records: the ``error`` event on stdout (the chief's log, ``etj run``)
    and the termination message (the pod's status, the operator)."""
    emit("error", reason=reason, message=message[:500], exitCode=exit_code)
    write_termination_message(reason, message)
