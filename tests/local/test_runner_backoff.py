"""`etj run` follows the operator's restart back-off: replicas that crash at start-up are
retried after 1 s, then 2 s, until backoffLimit fails the job (a stand-in trainer that
exits 1 at once, so no TensorFlow)."""

from __future__ import annotations

import re
import time
from pathlib import Path

from etj.api import EmbeddingTrainingJob
from etj.local.procs import processes_under
from etj.local.runner import LocalRunner, Reporter
from etj.planner import build_plan


def test_a_crash_looping_chief_waits_out_its_back_off(tmp_path: Path):
    crashing = tmp_path / "crashing-python"
    crashing.write_text("#!/bin/sh\necho 'DataError: /data/x.csv:3: bad' >&2\nexit 1\n")
    crashing.chmod(0o755)
    job = EmbeddingTrainingJob.from_manifest(
        {
            "apiVersion": "training.etj.dev/v1alpha1",
            "kind": "EmbeddingTrainingJob",
            "metadata": {"name": "loop"},
            "spec": {
                "strategy": "ParameterServer",
                "replicas": {"worker": {"replicas": 1}, "ps": {"replicas": 1}},
                "model": {"embeddings": [{"name": "u", "vocabularySize": 100, "dimension": 4}]},
                "runPolicy": {
                    "backoffLimit": 2,
                    "restartBackoff": {"initialSeconds": 1, "maxSeconds": 60},
                },
            },
        }
    )
    reporter = Reporter()
    runner = LocalRunner(
        job, build_plan(job.spec), tmp_path / "run", python=str(crashing), reporter=reporter
    )
    started = time.monotonic()
    result = runner.run()
    assert result.status.phase == "Failed"
    restarting = [e for e in reporter.events if e.startswith("Restarting:")]
    # Each failure of the replicas waits twice as long as the one before.
    waits = [re.search(r"restarting [^;]*? in (\d+)s, at", e) for e in restarting]
    assert [int(m.group(1)) for m in waits if m] == [1, 2]
    assert any(
        "BackoffLimitExceeded" in e or "backoffLimit 2 reached" in e for e in reporter.events
    )
    # The runner really waited: at least the 1 s + 2 s of back-off.
    assert time.monotonic() - started >= 3
    assert processes_under(tmp_path / "run") == []
