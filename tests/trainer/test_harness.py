"""The trainer tests' harness (tests/trainer/harness.py): what its own defects would make
a trainer test fail on."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.trainer.harness import LocalJob, job_spec, trainer_config

READER = """
import json, sys, time
path, end = sys.argv[1], time.monotonic() + float(sys.argv[2])
bad = 0
while time.monotonic() < end:
    try:
        json.loads(open(path).read())
    except ValueError:
        bad += 1
print(bad)
"""


def test_a_new_config_is_never_seen_half_written(tmp_path: Path) -> None:
    # A task started just before set_steps (the ps restarted, then the step total raised)
    # reads trainer.json while it is rewritten: it must read the old file or the new one,
    # never an empty or partial one (CI at cold1: the new ps exited on "trainer.json is
    # invalid: EOF while parsing", and the chief waited 600 s for it).
    job = LocalJob(trainer_config(job_spec()), tmp_path, workers=1, ps=1)
    reader = subprocess.Popen(
        [sys.executable, "-c", READER, str(job.config_path), "4"], stdout=subprocess.PIPE
    )
    rewrites = 0
    while reader.poll() is None:
        job.set_steps(1000 + rewrites % 7)
        rewrites += 1
    out, _ = reader.communicate()
    assert rewrites > 100, rewrites
    assert int(out) == 0, f"{int(out)} reads of a half-written trainer.json in {rewrites} rewrites"
    assert json.loads(job.config_path.read_text())["training"]["steps"] == 1000 + (rewrites - 1) % 7


# Busy (importing), then asleep, then marks a file and works: a server's start, its rest
# between closures, and a closure.
WORKER = """
import sys, time
from pathlib import Path
end = time.monotonic() + 1.0
while time.monotonic() < end:
    pass
time.sleep(1.5)
Path(sys.argv[1]).write_text("working")
while True:
    pass
"""


def test_a_task_is_frozen_inside_its_work_never_in_its_start(tmp_path: Path) -> None:
    # CI (stop 52): the Kafka ParameterServer test killed a worker when the chief's progress
    # lines said a round was in flight; on a busy machine none of 5 kills landed in one.
    # freeze_when_busy stops a task only in work that follows a rest.
    job = LocalJob(trainer_config(job_spec()), tmp_path, workers=1, ps=1)
    marker = tmp_path / "marker"
    proc = subprocess.Popen([sys.executable, "-c", WORKER, str(marker)], start_new_session=True)
    job.procs[("worker", 0)] = proc
    try:
        job.freeze_when_busy("worker", 0, 120)
        assert marker.read_text() == "working"
        with open(f"/proc/{proc.pid}/stat") as f:
            assert f.read().rpartition(")")[2].split()[0] == "T"  # stopped, not ended
    finally:
        proc.kill()
        proc.wait(timeout=120)
