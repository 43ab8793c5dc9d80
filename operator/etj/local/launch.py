"""Start, poll and stop local processes so that none outlives its supervisor.

Each process gets its own session (a signal to the group reaches its children) and,
on Linux, PR_SET_PDEATHSIG so it is killed if the supervisor dies without cleaning up;
on request, a container's limits (no_new_privs, no capabilities) as a kubelet sets them.
Each also gets its own termination-log file (``ETJ_TERMINATION_LOG``), read back as a
kubelet reads ``terminationMessagePath`` under ``FallbackToLogsOnError``.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from etj.api.constants import CPUS_ENV, TERMINATION_LOG_ENV
from etj.local.placement import Task, bound_env, core_sets

_PR_SET_PDEATHSIG = 1
_PR_CAPBSET_DROP = 24
_PR_SET_NO_NEW_PRIVS = 38
# What a kubelet keeps of a termination message, and of the log it falls back to.
_MESSAGE_BYTES = 4096
_FALLBACK_LINES = 80


def _die_with_parent() -> None:
    # Not on Linux (no libc.so.6): the supervisor's own cleanup has to do.
    with contextlib.suppress(OSError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


@dataclass
class Proc:
    """One running (or finished) process and what the supervisor knows about it."""

    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path
    started: float = field(default_factory=time.monotonic)
    stopping: bool = False
    termination_path: Path | None = None

    @property
    def exit_code(self) -> int | None:
        """The exit code as a kubelet reports it: 128 + signal for a killed process."""
        code = self.popen.poll()
        if code is None:
            return None
        return 128 - code if code < 0 else code

    def termination_message(self) -> str | None:
        """What the process wrote to its termination log; after a failure with nothing
        written, the end of its log (the kubelet's ``FallbackToLogsOnError``)."""
        text = ""
        if self.termination_path is not None:
            with contextlib.suppress(OSError):
                text = self.termination_path.read_bytes()[:_MESSAGE_BYTES].decode(errors="replace")
        if not text.strip() and self.exit_code not in (None, 0):
            with contextlib.suppress(OSError):
                lines = self.log_path.read_bytes().splitlines()[-_FALLBACK_LINES:]
                text = b"\n".join(lines)[-_MESSAGE_BYTES:].decode(errors="replace")
        return text.strip() or None

    def stop(self, grace: float = 5.0) -> None:
        """SIGTERM the process group; SIGKILL it if it is still there after ``grace``."""
        self.stopping = True
        if self.popen.poll() is not None:
            return
        _signal_group(self.popen.pid, signal.SIGTERM)
        try:
            self.popen.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            _signal_group(self.popen.pid, signal.SIGKILL)
            self.popen.wait(timeout=10)

    def kill(self) -> None:
        _signal_group(self.popen.pid, signal.SIGKILL)


def _signal_group(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, sig)


def _last_capability() -> int:
    try:
        return int(Path("/proc/sys/kernel/cap_last_cap").read_text())
    except (OSError, ValueError):
        return 40  # CAP_CHECKPOINT_RESTORE, the last one of Linux 5.9+


def bind_to(cores: Sequence[int]) -> None:
    """Bind the calling process (and every thread it starts later) to ``cores``; where
    the system has no such call, or refuses those cores, it runs unbound."""
    if cores and hasattr(os, "sched_setaffinity"):
        with contextlib.suppress(OSError):
            os.sched_setaffinity(0, cores)


def _preexec(
    no_new_privs: bool, drop_capabilities: bool, cores: Sequence[int] = ()
) -> Callable[[], None]:
    """What runs in the child before exec: the death signal, its cores, then a container's
    limits. An empty bounding set leaves even a root process no capabilities after exec."""
    caps = range(_last_capability() + 1) if drop_capabilities else range(0)

    def run() -> None:
        _die_with_parent()
        bind_to(cores)
        if not (no_new_privs or caps):
            return
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        for cap in caps:
            if libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() != 22:
                raise OSError(ctypes.get_errno(), f"cannot drop capability {cap}")
        if no_new_privs and libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "cannot set no_new_privs")

    return run


def start(
    name: str,
    command: list[str],
    env: dict[str, str],
    log_path: Path,
    cwd: Path,
    no_new_privs: bool = False,
    drop_capabilities: bool = False,
    cores: Sequence[int] = (),
) -> Proc:
    """Start ``command``; ``no_new_privs`` and ``drop_capabilities`` apply a container's
    ``allowPrivilegeEscalation: false`` and ``capabilities.drop: [ALL]`` to the process,
    ``cores`` binds it to those cores (``placement.core_sets``; none: unbound)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    # A fresh termination log per start, as a container gets.
    termination = log_path.with_name(log_path.name + ".termination")
    termination.unlink(missing_ok=True)
    env = {**env, TERMINATION_LOG_ENV: str(termination)}
    log = open(log_path, "ab")  # noqa: SIM115 - handed to the child, closed below
    try:
        popen = subprocess.Popen(
            command,
            env=env,
            cwd=cwd,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=_preexec(no_new_privs, drop_capabilities, cores),
        )
    finally:
        log.close()
    return Proc(name=name, popen=popen, log_path=log_path, termination_path=termination)


def usable_cores() -> list[int]:
    """The cores this process may run on (a run started under ``taskset`` keeps to them)."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def machine_share(
    task: Task, tasks: Sequence[Task], env: dict[str, str], pin: bool = True
) -> tuple[dict[str, str], tuple[int, ...]]:
    """A local replica's part of this machine, ``etj run``'s rule: what its environment
    ``env`` gains (``ETJ_CPUS``, its share of the cores this run may use, and
    ``placement.bound_env``) and the cores it is bound to (none unless ``pin``)."""
    cores = usable_cores()
    bound = core_sets(cores, tasks).get(task, ()) if pin else ()
    return {CPUS_ENV: str(cpu_share(len(cores), len(tasks))), **bound_env(bound, env)}, bound


def cpu_share(cores: int, processes: int) -> float:
    """Each process's CPUs when ``processes`` share ``cores`` alike (at most all of them)."""
    return round(min(float(cores), cores / max(1, processes)), 3)


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def processes_under(directory: Path) -> list[int]:
    """Pids whose working directory is inside ``directory``: how the supervisors' tests
    check that nothing they started is left running."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if os.readlink(proc / "cwd").startswith(str(directory)):
                    found.append(int(proc.name))
            except OSError:
                continue
    return found


def processes_naming(*paths: Path) -> list[int]:
    """Live pids (this process excepted) whose command line names any of ``paths``: what a
    local cluster or node started, found again after its starter died (and by tests)."""
    needles = [str(p).encode() for p in paths]
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
            zombie = "State:\tZ" in (proc / "status").read_text()
        except OSError:
            continue
        if not zombie and any(n in cmdline for n in needles):
            found.append(int(proc.name))
    return found
