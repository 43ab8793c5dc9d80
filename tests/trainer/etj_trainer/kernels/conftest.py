"""The kernels' library for the tests that run its ops: built here when missing, through
the same cached step as ``make kernels`` (a fresh clone's first run compiles it once)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def kernels() -> Path:
    from etj_trainer.kernels import build

    return build.build(os.environ.get("ETJ_KERNELS_VARIANT", ""))
