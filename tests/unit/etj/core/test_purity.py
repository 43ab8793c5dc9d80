"""The pure core imports neither kopf, the Kubernetes client nor TensorFlow.

import-linter checks the static imports in `make lint`; this test checks what is really
loaded, in a fresh interpreter, after exercising the core end to end.
"""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import sys, yaml
from etj.api import EmbeddingTrainingJob
from etj.core.planner import build_plan
from etj.core.render import build_objects
from etj.core.validation import validate_manifest
from etj.core.crd import crd_yaml
import etj.cli.main
doc = yaml.safe_load(open("examples/quickstart.yaml"))
job = EmbeddingTrainingJob.from_manifest(doc)
build_objects(job, build_plan(job.spec)); validate_manifest(doc); crd_yaml()
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("kopf", "kubernetes", "tensorflow", "aiohttp"))
print(",".join(heavy))
"""


def test_pure_core_loads_no_heavy_module():
    from tests.unit.conftest import ROOT

    out = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == ""
