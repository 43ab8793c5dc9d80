"""A ParameterServer chief killed again and again while its workers are mid-chunk: how long
each new chief takes to train again, and whether any hangs (issue 39).

A chief, ``--workers`` workers and ``--ps`` ps train on 127.0.0.1 (``tests/trainer/harness``'s
``LocalJob``: every task a real ``python -m etj_trainer`` process). ``--kills`` times: once the
chief has trained a few chunks past its restore (chunks in flight on every worker), it is
SIGKILLed and a new one started with new workers, as the operator does
(``etj.core.reconcile.policies.restart``; ``--keep-workers``: the chief alone, the rule
before issue 39). Per kill it prints the seconds from the new chief's start to its restore
and to its first chunk after the restore, the steps lost (the step at the kill minus the
restored one: at most the checkpoint interval plus the chunks in flight), and whether its
watchdog (``--watchdog`` seconds) had to stop it; then the load average.

Not a test: nothing is asserted. Results, dated: ``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# tests/trainer (harness) after the product: its etj_trainer/ holds the trainer's tests.
for _p in (ROOT / "tests" / "trainer", ROOT / "operator", ROOT / "trainer_image"):
    sys.path.insert(0, str(_p))

from harness import LocalJob, job_spec, trainer_config, wait_for  # noqa: E402


def _progress_after(job: LocalJob, step: int) -> dict[str, Any] | None:
    """The chief's first progress record past ``step`` (None while there is none); raises
    when the chief ended (its watchdog, a crash)."""
    for e in job.events():
        if e["event"] == "progress" and e["step"] > step:
            return e
    code = job.procs[("chief", 0)].poll()
    if code is not None:
        raise RuntimeError(f"the chief exited {code}")
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--ps", type=int, default=2)
    parser.add_argument("--every", type=int, default=200, help="checkpoint.everySteps")
    parser.add_argument("--watchdog", type=int, default=300, help="runPolicy.watchdogSeconds")
    parser.add_argument("--keep-workers", action="store_true", help="restart the chief alone")
    args = parser.parse_args()
    spec = job_spec(
        training={"batchSizePerReplica": 64, "steps": 10_000_000, "optimizer": "adagrad"}
    )
    workdir = Path(tempfile.mkdtemp(prefix="etj-chief-restarts-"))
    config = trainer_config(
        spec,
        checkpoint_dir=workdir / "ckpt",
        every_steps=args.every,
        watchdog_seconds=args.watchdog,
    )
    job = LocalJob(config, workdir, workers=args.workers, ps=args.ps)
    rows = []
    try:
        job.start_all()
        restored = at_kill = 0
        for kill in range(args.kills + 1):
            started = time.monotonic()
            if kill:
                if not args.keep_workers:
                    job.restart_workers()
                job.start("chief", 0)
                event = wait_for(lambda: job.last("restored"), 600, "the new chief to restore")
                restored = int(event["step"])
            at_restore = time.monotonic() - started
            outcome = "resumed"
            try:
                wait_for(lambda r=restored: _progress_after(job, r), 3600, "training again")
            except RuntimeError as e:
                outcome = str(e)
            resumed = time.monotonic() - started
            if kill:
                rows.append((kill, restored, at_kill - restored, at_restore, resumed, outcome))
                print(
                    f"kill {kill}: restored step {restored} ({at_kill - restored} steps lost) "
                    f"{at_restore:.0f} s after the start, training again at {resumed:.0f} s: "
                    f"{outcome}",
                    flush=True,
                )
            if outcome != "resumed":
                break
            # A few chunks past the restore: every worker has one in flight.
            step = job.step()
            wait_for(lambda s=step: job.step() >= s + 30, 600, "chunks past the restore")
            at_kill = job.step()
            job.kill("chief", 0, signal.SIGKILL)
    finally:
        job.close()
    print(f"\nrule: {'the chief alone' if args.keep_workers else 'the chief with new workers'}")
    print("kill  restored  lost  restore_s  training_again_s  outcome")
    for kill, step, lost, at_restore, resumed, outcome in rows:
        print(f"{kill:4}  {step:8}  {lost:4}  {at_restore:9.0f}  {resumed:16.0f}  {outcome}")
    print(f"load average: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
