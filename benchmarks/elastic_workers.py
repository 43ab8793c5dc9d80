"""Examples/s of a ParameterServer job before and after workers are added while it trains.

The job runs under ``etj run``'s runner (``etj.local.runner``: every replica a local
process, supervised by the operator's own decisions). After ``--before`` seconds of
training the worker count goes from ``--workers`` to ``--to``, as ``kubectl scale
etj/NAME --replicas=N`` does in a cluster (``etj run --scale-workers STEP:N``); the chief
checkpoints, restarts with the new cluster and restores that checkpoint
(``etj.core.reconcile.policies.scale``). The runner is stopped ``--after`` seconds later.

Prints examples/s over the steady part of each phase (from the step counter the chief
reports, the first ``--settle`` seconds of each phase left out), the steps lost (the
restored step minus the step of the chief's stop: 0), how long training paused for the
change, and the load average. More workers help only where there are idle cores: on a
2-core machine shared with other work, the added processes mostly share the same cores.

Not a test: nothing is asserted. Results, dated: ``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from etj.api import EmbeddingTrainingJob
from etj.api.status import EmbeddingTrainingJobStatus
from etj.core.planner import build_plan
from etj.local.runner import LocalRunner, RunEvents

BATCH = 512


def job(workers: int) -> EmbeddingTrainingJob:
    return EmbeddingTrainingJob.from_manifest(
        {
            "apiVersion": "training.etj.dev/v1alpha1",
            "kind": "EmbeddingTrainingJob",
            "metadata": {"name": "elastic"},
            "spec": {
                "strategy": "ParameterServer",
                "replicas": {"worker": {"replicas": workers}, "ps": {"replicas": 2}},
                "model": {
                    "embeddings": [
                        {"name": "user_id", "vocabularySize": 200_000, "dimension": 16},
                        {"name": "item_id", "vocabularySize": 20_000, "dimension": 16},
                    ],
                    "denseFeatures": 8,
                    "hiddenUnits": [64, 32],
                },
                "training": {
                    "batchSizePerReplica": BATCH,
                    "steps": 10_000_000,  # stopped by time
                    "stepsPerExecution": 20,
                    "optimizer": "adagrad",
                    "learningRate": 0.05,
                },
                "checkpoint": {"everySteps": 2000, "keep": 2},
            },
        }
    )


class Stop(Exception):
    """The measurement is over: leave the runner's loop (it stops every replica)."""


def rate(samples: list[tuple[float, int]], start: float, end: float) -> float | None:
    """Examples/s between the first and last sample inside [start, end]."""
    inside = [(t, s) for t, s in samples if start <= t <= end]
    if len(inside) < 2 or inside[-1][0] <= inside[0][0]:
        return None
    (t0, s0), (t1, s1) = inside[0], inside[-1]
    return (s1 - s0) * BATCH / (t1 - t0)


def trainer_events(log: Path, kind: str) -> list[dict[str, Any]]:
    out = []
    for line in log.read_text().splitlines() if log.exists() else []:
        if line.startswith('{"') and f'"{kind}"' in line:
            try:
                doc = json.loads(line)
            except ValueError:  # a line still being written
                continue
            if doc.get("event") == kind:
                out.append(doc)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--to", type=int, default=3)
    parser.add_argument("--before", type=float, default=90.0, help="seconds before the change")
    parser.add_argument("--after", type=float, default=90.0, help="seconds after it")
    parser.add_argument("--settle", type=float, default=15.0, help="seconds left out per phase")
    args = parser.parse_args()

    samples: list[tuple[float, int]] = []
    marks: dict[str, float] = {}
    runner: LocalRunner | None = None
    workdir = Path(tempfile.mkdtemp(prefix="etj-elastic-"))
    log = workdir / "logs" / "elastic-chief-0.log"

    def on_status(st: EmbeddingTrainingJobStatus) -> None:
        now = time.monotonic()
        step = st.progress.step if st.progress else 0
        if step > 0:
            samples.append((now, step))
            marks.setdefault("first step", now)
        assert runner is not None
        if "scaled" not in marks and "first step" in marks:
            if now - marks["first step"] >= args.before:
                marks["scaled"] = now
                runner.scale_workers_at = (0, args.to)  # acted on in this pass
        elif "scaled" in marks and "resumed" not in marks:
            restored = trainer_events(log, "restored")
            if restored and step > restored[-1]["step"]:
                marks["resumed"] = now
        if "resumed" in marks and now - marks["resumed"] >= args.after:
            raise Stop

    spec = job(args.workers)
    runner = LocalRunner(
        spec, build_plan(spec.spec), workdir, reporter=RunEvents(on_status=on_status)
    )
    try:
        runner.run()
    except Stop:
        pass
    finally:
        runner.stop_all()
    stopped = trainer_events(log, "terminated")
    restored = trainer_events(log, "restored")
    s = args.settle
    before = rate(samples, marks["first step"] + s, marks["scaled"])
    after = rate(samples, marks["resumed"] + s, marks["resumed"] + args.after)
    print(f"workers {args.workers} -> {args.to}, batch {BATCH} per worker step")
    print(f"before: {before:,.0f} examples/s" if before else "before: -")
    print(f"after:  {after:,.0f} examples/s" if after else "after: -")
    if before and after:
        print(f"after/before = {after / before:.2f}")
    if stopped and restored:
        print(
            f"chief stopped at step {stopped[-1]['step']}, restored step {restored[-1]['step']} "
            f"(lost {stopped[-1]['step'] - restored[-1]['step']}), training paused "
            f"{marks['resumed'] - marks['scaled']:.0f} s"
        )
    print("load average: " + " ".join(f"{x:.2f}" for x in os.getloadavg()))


if __name__ == "__main__":
    main()
