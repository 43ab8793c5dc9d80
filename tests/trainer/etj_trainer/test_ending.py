"""etj_trainer.ending: what a role keeps is never torn down, and the process leaves with its
code and its output flushed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from harness import trainer_env

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
