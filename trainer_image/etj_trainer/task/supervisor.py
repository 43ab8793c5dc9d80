"""The watchdog, as a small parent process around the training process.

A hung peer can block the training process inside TensorFlow while it holds Python's
GIL (measured: a checkpoint save under ParameterServerStrategy with one worker stopped
blocks the whole interpreter), so a watchdog thread in the same process may never run.
The supervisor therefore runs the trainer as a child and listens to its heartbeats on a
pipe: ``A`` arms the watchdog (training has started), ``.`` is a completed chunk of steps,
``D`` disarms it. When armed and silent for ``seconds``, the supervisor asks the child for
its Python stacks (``DUMP_SIGNAL``: the child registers ``faulthandler`` for it, which
writes them even while a stuck thread holds the GIL), kills it and exits with the
retryable code, with a clear message and the termination message ``WatchdogTimeout: ...``.
It forwards SIGTERM/SIGINT to the child and exits with the child's code (a signal N
becomes 128+N, as a shell reports it).

The child dies with its supervisor (PR_SET_PDEATHSIG), so killing the supervisor never
leaves an orphaned trainer. No TensorFlow here; this module never trains.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable

from etj_trainer import exitcodes

log = logging.getLogger(__name__)

HEARTBEAT_FD_ENV = "ETJ_HEARTBEAT_FD"
ARM, BEAT, DISARM = b"A", b".", b"D"
_PR_SET_PDEATHSIG = 1
# The child dumps every thread's stack on this signal (see ``install_stack_dump``).
DUMP_SIGNAL = signal.SIGUSR1
# How long the child gets to write its stacks before it is killed.
DUMP_GRACE_SECONDS = 2.0


class Heartbeat:
    """The child's side: write heartbeats to the supervisor (no-op when unsupervised)."""

    def __init__(self, fd: int | None):
        self.fd = fd

    @classmethod
    def from_env(cls) -> Heartbeat:
        value = os.environ.get(HEARTBEAT_FD_ENV)
        return cls(int(value) if value else None)

    def _send(self, what: bytes) -> None:
        if self.fd is None:
            return
        # A full pipe already tells the supervisor we are alive; a broken one means it is
        # gone, and PR_SET_PDEATHSIG ends us.
        with contextlib.suppress(BlockingIOError, BrokenPipeError):
            os.write(self.fd, what)

    def arm(self) -> None:
        self._send(ARM)

    def beat(self) -> None:
        self._send(BEAT)

    def disarm(self) -> None:
        self._send(DISARM)


def install_stack_dump() -> None:
    """In the child: dump every thread's Python stack to stderr on ``DUMP_SIGNAL``, so a
    watchdog kill leaves a record of where training was stuck."""
    import faulthandler

    faulthandler.register(DUMP_SIGNAL, file=sys.stderr, all_threads=True)


def die_with_parent(parent: int) -> None:
    """In the child: get SIGKILL when the supervisor dies (Linux); exit if it already has."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:
        os._exit(exitcodes.RETRYABLE)


class Supervisor:
    """Runs ``argv`` as a child and enforces the watchdog on its heartbeats."""

    def __init__(
        self,
        argv: list[str],
        seconds: float,
        on_timeout: Callable[[float], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.argv = argv
        self.seconds = seconds
        self.on_timeout = on_timeout or _report_timeout
        self.clock = clock
        self.child: subprocess.Popen[bytes] | None = None

    def _forward(self, signum: int, _frame: object) -> None:
        if self.child is not None and self.child.poll() is None:
            self.child.send_signal(signum)

    def run(self) -> int:
        read_fd, write_fd = os.pipe()
        os.set_blocking(write_fd, False)
        env = dict(os.environ)
        env[HEARTBEAT_FD_ENV] = str(write_fd)
        env["ETJ_SUPERVISOR_PID"] = str(os.getpid())
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._forward)
        self.child = subprocess.Popen(self.argv, env=env, pass_fds=(write_fd,))
        os.close(write_fd)
        try:
            return self._watch(read_fd)
        finally:
            os.close(read_fd)

    def _watch(self, read_fd: int) -> int:
        assert self.child is not None
        armed, last = False, self.clock()
        while True:
            code = self.child.poll()
            if code is not None:
                return code if code >= 0 else 128 - code
            ready, _, _ = select.select([read_fd], [], [], 1.0)
            if ready:
                for byte in os.read(read_fd, 4096):
                    last = self.clock()
                    if byte == ARM[0]:
                        armed = True
                    elif byte == DISARM[0]:
                        armed = False
            idle = self.clock() - last
            if armed and idle >= self.seconds:
                self.on_timeout(idle)
                self._dump_and_kill()
                return exitcodes.RETRYABLE

    def _dump_and_kill(self) -> None:
        assert self.child is not None
        with contextlib.suppress(ProcessLookupError):
            self.child.send_signal(DUMP_SIGNAL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            # It normally keeps running (the dump does not end it): the wait is the grace.
            self.child.wait(timeout=DUMP_GRACE_SECONDS)
        self.child.kill()
        self.child.wait()


def _report_timeout(idle: float) -> None:
    from etj.api.trainer_reasons import REASON_WATCHDOG
    from etj_trainer.task.termination import report_failure

    message = (
        f"watchdog: no training step completed for {idle:.0f}s (a worker or ps is hung or "
        "unreachable); stopping so the job restarts from the last checkpoint"
    )
    log.error(message)
    report_failure(REASON_WATCHDOG, message, exitcodes.RETRYABLE)
    sys.stderr.flush()


def supervise(argv: list[str], seconds: float) -> int:
    return Supervisor(argv, seconds).run()
