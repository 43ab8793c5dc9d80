"""The watchdog supervisor: it kills a silent child, leaves the stacks and a termination
message, and passes exit codes and SIGTERM."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from harness import trainer_env

from etj_trainer import exitcodes
from etj_trainer.task.supervisor import Supervisor

_CHILD = """
import os, sys, time, signal
fd = int(os.environ["ETJ_HEARTBEAT_FD"])
mode = sys.argv[1]
if mode == "hang":
    os.write(fd, b"A.."); time.sleep(60)
elif mode == "hang-dumping":
    from etj_trainer.task.supervisor import install_stack_dump
    install_stack_dump()
    def stuck_in_a_step():
        os.write(fd, b"A."); time.sleep(60)
    stuck_in_a_step()
elif mode == "exit3":
    os.write(fd, b"A.D"); sys.exit(3)
elif mode == "term":
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(143))
    os.write(fd, b"A"); print("ready", flush=True)
    while True:
        os.write(fd, b"."); time.sleep(0.2)
"""


def test_supervisor_watchdog_kills_a_silent_child() -> None:
    # The child would sleep out its 60 s and exit 0: the retryable code and the report are
    # the watchdog's (no stopwatch: how soon depends on the machine's load).
    fired: list[float] = []
    code = Supervisor([sys.executable, "-c", _CHILD, "hang"], 2, on_timeout=fired.append).run()
    assert code == exitcodes.RETRYABLE and fired and fired[0] >= 2


def test_watchdog_leaves_the_stacks_and_a_termination_message(tmp_path: Path) -> None:
    """Where training was stuck goes to the log; why it stopped goes to the termination
    message, whose first word the operator acts on."""
    script = tmp_path / "sup.py"
    script.write_text(
        "import sys\nfrom etj_trainer.task.supervisor import Supervisor\n"
        f"sys.exit(Supervisor([sys.executable, '-c', {_CHILD!r}, 'hang-dumping'], 2).run())\n"
    )
    termination = tmp_path / "termination-log"
    result = subprocess.run(
        [sys.executable, str(script)],
        env=trainer_env({"ETJ_TERMINATION_LOG": str(termination)}),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == exitcodes.RETRYABLE
    assert "in stuck_in_a_step" in result.stderr, result.stderr[-2000:]
    message = termination.read_text()
    assert message.startswith("WatchdogTimeout: watchdog: no training step completed for ")


def test_supervisor_passes_exit_codes_and_sigterm(tmp_path: Path) -> None:
    assert Supervisor([sys.executable, "-c", _CHILD, "exit3"], 2).run() == 3
    script = tmp_path / "sup.py"
    script.write_text(
        "import sys\nfrom etj_trainer.task.supervisor import Supervisor\n"
        f"sys.exit(Supervisor([sys.executable, '-c', {_CHILD!r}, 'term'], 30).run())\n"
    )
    proc = subprocess.Popen(
        [sys.executable, str(script)], env=trainer_env(), stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=120) == exitcodes.TERMINATED
