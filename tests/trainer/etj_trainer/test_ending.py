"""etj_trainer.ending: what a role keeps is never torn down, and the process leaves with its
code and its output flushed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from harness import trainer_env, wait_for

SCRIPT = """
import sys
from pathlib import Path
from etj_trainer.ending import end, keep

marker = Path(sys.argv[1])


class TornDown:
    # Stands for a TensorFlow object whose destructor waits on a peer.
    def __del__(self):
        marker.write_text("torn down")


def role(kept):
    built = TornDown()
    if kept:
        keep(locals())
    return 7


code = role(sys.argv[2] == "keep")
print("no newline, still buffered", end="")
end(code)
"""


def _run(tmp_path: Path, how: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    marker = tmp_path / f"{how}.marker"
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(marker), how],
        env=trainer_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done, marker


def test_what_a_role_keeps_is_never_torn_down(tmp_path: Path):
    done, marker = _run(tmp_path, "keep")
    assert done.returncode == 7, done.stderr
    assert done.stdout == "no newline, still buffered"
    assert not marker.exists()


def test_without_keep_the_role_tears_down_as_it_returns(tmp_path: Path):
    """The control: the destructor runs when the role's frame goes (where the MWMS leader
    waited), before ``end`` is reached."""
    done, marker = _run(tmp_path, "drop")
    assert done.returncode == 7, done.stderr
    assert marker.read_text() == "torn down"


# The mechanism itself, with TensorFlow (issue 36): a tf.data iterator one of whose threads
# is blocked (here in a py_function waiting on a gate nobody opens; on the MultiWorkerMirrored
# leader, on a peer that was gone). Freeing the iterator waits for that thread, forever.
TF_SCRIPT = """
import sys
import threading
from pathlib import Path

import tensorflow as tf
from etj_trainer.ending import end, keep

entered = Path(sys.argv[1])
gate = threading.Event()


def blocked(x):
    if int(x) > 0:
        entered.write_text("blocked")
        gate.wait()
    return x


def role(kept):
    ds = tf.data.Dataset.range(100).map(
        lambda x: tf.py_function(blocked, [x], tf.int64), num_parallel_calls=2
    ).prefetch(2)
    it = iter(ds)
    assert int(next(it)) == 0  # element 0 passes; the pool's threads block on the next ones
    while not entered.exists():
        gate.wait(0.05)
    if kept:
        keep(locals())
    print("role returns", flush=True)
    return 3


code = role(sys.argv[2] == "keep")
print("after role", flush=True)
end(code)
"""


def _start_tf(tmp_path: Path, how: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", TF_SCRIPT, str(tmp_path / f"{how}.entered"), how],
        env=trainer_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )


def test_a_kept_iterator_whose_thread_is_blocked_does_not_hold_the_exit(tmp_path: Path):
    proc = _start_tf(tmp_path, "keep")
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 3
    assert out.splitlines() == ["role returns", "after role"]


@pytest.mark.extended  # the control: shows what the test above guards against (TensorFlow's behaviour, not ours)
def test_control_freeing_that_iterator_never_returns(tmp_path: Path):
    proc = _start_tf(tmp_path, "drop")
    try:
        assert proc.stdout is not None
        assert wait_for(proc.stdout.readline, 300, "the role to return") == "role returns\n"
        # A negative can only be watched for a while: 20 s after the role's return the process
        # is still freeing its frame (a busy machine only makes that longer).
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(timeout=20)
    finally:
        proc.kill()
        proc.wait(timeout=120)
    assert "after role" not in proc.stdout.read()
