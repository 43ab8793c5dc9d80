"""The disk table's tests once more with the kernels built under AddressSanitizer: an
out-of-bounds access, a use after free or a double free in the cache's bookkeeping
aborts the run with the sanitizer's report (detect_leaks off: Python and TensorFlow
keep allocations to exit, which are not the kernels').

``extended``: ~35 s of CPU (the sanitized build ~16 s, the suite under it ~18 s), but
3-4 min of a loaded two-core CI machine (116 s for the run alone at load 18). Its faster
sibling in CI is the property test of ``test_disk_table``, the same ops against NumPy.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from etj_trainer.kernels import build, library

HERE = Path(__file__).resolve().parent


def _preload() -> str:
    # libasan first; libstdc++ with it, or the sanitizer cannot intercept the C++
    # exceptions TensorFlow's Python bindings throw (python itself links no libstdc++).
    libs = []
    for name in ("libasan.so", "libstdc++.so.6"):
        found = subprocess.run(
            ["g++", f"-print-file-name={name}"], capture_output=True, text=True, timeout=120
        ).stdout.strip()
        assert os.path.isabs(found), f"g++ has no {name}"
        libs.append(found)
    return " ".join(libs)


@pytest.mark.extended
def test_the_kernels_pass_their_tests_under_addresssanitizer():
    path = build.build("asan")
    assert b"__asan_report_load" in path.read_bytes(), "the library is not instrumented"
    env = {
        **os.environ,
        library.VARIANT_ENV: "asan",
        "LD_PRELOAD": _preload(),
        "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=1",
    }
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            str(HERE / "test_disk_table.py"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert "AddressSanitizer" not in done.stderr + done.stdout, done.stderr[-6000:]
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert " passed" in done.stdout
