"""`etj run` binds each replica to its cores (``etj.local.placement``), or to none with
``--no-pin-cores``: stand-in replicas that write the cores they may run on (no TensorFlow)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from etj.api import EmbeddingTrainingJob
from etj.core.planner import build_plan
from etj.local.launch import processes_under, usable_cores
from etj.local.placement import core_sets
from etj.local.runner import LocalRunner, RunEvents

# A replica that writes its task and cores; the chief then succeeds once every replica has
# written its own (a chief that left after a fixed second had the others stopped before a
# busy machine had started them: issue 36), the others wait to be stopped (as servers do).
STAND_IN = """#!{python}
import glob, json, os, sys, time
task = json.loads(os.environ["TF_CONFIG"])["task"]
line = {{"role": task["type"], "index": task["index"], "cores": sorted(os.sched_getaffinity(0)),
        "interop": os.environ.get("TF_NUM_INTEROP_THREADS")}}
path = os.path.join({out!r}, f"{{task['type']}}-{{task['index']}}.json")
with open(path + ".tmp", "w") as f:
    json.dump(line, f)
os.rename(path + ".tmp", path)
if task["type"] != "chief":
    time.sleep(3600)
from etj_testcluster.waiting import wait_for
# Some replica never started: the chief fails (exit 1), the job, and so does the test.
wait_for(lambda: len(glob.glob(os.path.join({out!r}, "*.json"))) >= {replicas}, 600,
         "every replica's cores", every=0.1)
"""

pytestmark = pytest.mark.skipif(
    len(usable_cores()) < 2, reason="binding needs at least two cores to choose from"
)


def _run(tmp_path: Path, pin: bool) -> dict[tuple[str, int], dict]:
    out = tmp_path / "cores"
    out.mkdir()
    stand_in = tmp_path / "stand-in-python"
    stand_in.write_text(STAND_IN.format(python=sys.executable, out=str(out), replicas=5))
    stand_in.chmod(0o755)
    job = EmbeddingTrainingJob.from_manifest(
        {
            "apiVersion": "training.etj.dev/v1alpha1",
            "kind": "EmbeddingTrainingJob",
            "metadata": {"name": "cores"},
            "spec": {
                "strategy": "ParameterServer",
                "replicas": {
                    "chief": {"replicas": 1},
                    "worker": {"replicas": 2},
                    "ps": {"replicas": 2},
                },
                "model": {"embeddings": [{"name": "u", "vocabularySize": 100, "dimension": 4}]},
            },
        }
    )
    runner = LocalRunner(
        job,
        build_plan(job.spec),
        tmp_path / "run",
        python=str(stand_in),
        reporter=RunEvents(),
        pin_cores=pin,
    )
    assert runner.run().status.phase == "Succeeded"
    assert processes_under(tmp_path / "run") == []
    seen = [json.loads(p.read_text()) for p in out.glob("*.json")]
    return {(s["role"], s["index"]): s for s in seen}


def test_each_replica_runs_on_the_cores_placement_gives_it(tmp_path: Path):
    seen = _run(tmp_path, pin=True)
    tasks = [("chief", 0), ("worker", 0), ("worker", 1), ("ps", 0), ("ps", 1)]
    assert set(seen) == set(tasks)
    expected = core_sets(usable_cores(), tasks)
    assert {t: tuple(s["cores"]) for t, s in seen.items()} == expected
    # Bound for real: the two workers never share a core.
    assert seen[("worker", 0)]["cores"] != seen[("worker", 1)]["cores"]
    # However few its cores, TensorFlow gets two inter-op threads at least (one deadlocks).
    assert all(int(s["interop"]) >= max(2, len(s["cores"])) for s in seen.values())


def test_no_pin_cores_leaves_every_replica_every_core(tmp_path: Path):
    seen = _run(tmp_path, pin=False)
    assert len(seen) == 5
    assert all(s["cores"] == usable_cores() and s["interop"] is None for s in seen.values())
