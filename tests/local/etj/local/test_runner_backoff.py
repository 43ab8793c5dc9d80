"""`etj run` follows the operator's restart back-off: replicas that crash at start-up are
retried after 1 s, then 2 s, until backoffLimit fails the job (a stand-in trainer that
exits 1 at once, so no TensorFlow)."""

from __future__ import annotations

import re
import time
from pathlib import Path

from etj.api import EmbeddingTrainingJob
from etj.core.planner import build_plan
from etj.local.launch import processes_under
from etj.local.runner import LocalRunner, RunEvents


def _crashing_job(tmp_path: Path, message: str) -> LocalRunner:
    """A job whose every replica prints ``message`` and exits 1 (under OnFailure)."""
    crashing = tmp_path / "crashing-python"
    crashing.write_text(f"#!/bin/sh\necho '{message}' >&2\nexit 1\n")
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
    return LocalRunner(
        job, build_plan(job.spec), tmp_path / "run", python=str(crashing), reporter=RunEvents()
    )


def test_a_crash_looping_chief_waits_out_its_back_off(tmp_path: Path):
    # A failure a restart may cure (a DataError or ModelError fails the job at once).
    runner = _crashing_job(tmp_path, "UnavailableError: ps-0 unreachable")
    reporter = runner.reporter
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


def test_bad_data_fails_the_job_at_once_under_on_failure(tmp_path: Path):
    """No restart can fix a malformed file: no back-off, no restart, the file and line."""
    runner = _crashing_job(tmp_path, "DataError: /data/x.csv:3: expected 40 fields, found 39")
    result = runner.run()
    assert result.status.phase == "Failed"
    assert not [e for e in runner.reporter.events if e.startswith("Restarting:")]
    failed = [c for c in result.status.conditions if c.type == "Failed"]
    assert failed and "/data/x.csv:3: expected 40 fields" in failed[0].message
    assert "fix the data" in failed[0].message
    assert processes_under(tmp_path / "run") == []
