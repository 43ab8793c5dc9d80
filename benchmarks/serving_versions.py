"""What serving versions (``spec.export``) cost training, under ParameterServer and
MultiWorkerMirrored.

One job per strategy (chief + 2 workers + 2 ps; 2 mirrored workers), each run twice with
the same seed and steps: without versions, and with a version every ``--every`` steps.
Prints per run the training throughput (the median examples/s of its progress records,
the first, which includes compiling, left out) and, per version, how long its write took
and how many steps were trained meanwhile (the ``exported`` lines' ``seconds`` and
``trainedDuring``). Not a test: nothing is asserted.

``python benchmarks/serving_versions.py [--steps N] [--every K] [--rows R]``

Results: ``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for _p in (ROOT / "tests" / "trainer", ROOT / "operator", ROOT / "trainer_image"):
    sys.path.insert(0, str(_p))
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from harness import LocalJob, job_spec, trainer_config  # noqa: E402

from etj.api.trainer import TrainerExport  # noqa: E402


def _spec(strategy: str, steps: int, rows: int) -> Any:
    replicas = (
        {"chief": {"replicas": 1}, "worker": {"replicas": 2}, "ps": {"replicas": 2}}
        if strategy == "ParameterServer"
        else {"worker": {"replicas": 2}}
    )
    return job_spec(
        strategy=strategy,
        replicas=replicas,
        model={
            "embeddings": [
                {"name": "user_id", "vocabularySize": rows, "dimension": 16},
                {"name": "item_id", "vocabularySize": rows // 4, "dimension": 16},
            ],
            "denseFeatures": 4,
            "hiddenUnits": [64, 32],
        },
        training={
            "batchSizePerReplica": 256,
            "steps": steps,
            "optimizer": "adagrad",
            "learningRate": 0.05,
            "stepsPerExecution": 10,
        },
        sharding={"maxShardBytes": "8Mi"},
    )


def run(strategy: str, steps: int, rows: int, every: int | None, work: Path) -> dict[str, Any]:
    spec = _spec(strategy, steps, rows)
    export = (
        TrainerExport(directory=str(work / "ckpt" / "serving"), every_steps=every, keep=3)
        if every
        else None
    )
    config = trainer_config(
        spec, checkpoint_dir=work / "ckpt", every_steps=steps, export=export, watchdog_seconds=600
    )
    ps = config.shard_plan.ps_replicas
    chief = strategy == "ParameterServer"
    with LocalJob(config, work, workers=2, ps=ps, chief=chief) as job:
        job.start_all()
        job.wait_done(timeout=3600)
        events = job.events()
    progress = [e for e in events if e["event"] == "progress"]
    exported = [e for e in events if e["event"] == "exported"]
    rates = [e["examplesPerSecond"] for e in progress[1:] if e.get("examplesPerSecond")]
    return {
        "examples_per_second": statistics.median(rates) if rates else 0.0,
        "versions": [(e["step"], e["seconds"], e["trainedDuring"]) for e in exported],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--every", type=int, default=300)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--strategy", choices=["ParameterServer", "MultiWorkerMirrored"])
    args = parser.parse_args()
    strategies = [args.strategy] if args.strategy else ["ParameterServer", "MultiWorkerMirrored"]
    for strategy in strategies:
        for every in (None, args.every):
            with tempfile.TemporaryDirectory(prefix="etj-versions-") as tmp:
                result = run(strategy, args.steps, args.rows, every, Path(tmp))
            label = f"{strategy:20} {'versions every ' + str(every) if every else 'no versions':22}"
            print(f"{label} median examples/s {result['examples_per_second']:10,.0f}", flush=True)
            for step, seconds, during in result["versions"]:
                print(
                    f"    version at step {step:6}: {seconds:6.2f} s, {during:5} steps trained meanwhile"
                )


if __name__ == "__main__":
    main()
