"""A dynamic table under ParameterServer on a real cluster (chief + 2 workers + 2 ps on
127.0.0.1): its pool sharded over the ps as the plan says, each shard's index and row state
on that shard's ps, keys routed to shards by key, the invariants holding per shard in every
checkpoint, the progress record and metrics showing rows used / capacity, admitted, evicted
and fallback lookups; a ps killed mid-training, the job restored, invariants kept and the
loss going on from where it was.

One job runs through the module, the scenarios in order on the same processes. Minutes:
`make test-all` runs it; its in-process sibling (`test_dynamic_shards.py`: the same sharded
table over a two-shard pool, routing, per-shard invariants, slot resets, save and restore)
runs in `make test`.
"""

from __future__ import annotations

import signal
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from harness import (
    LocalJob,
    assert_restored_as_saved,
    job_spec,
    saved_invariants,
    trainer_config,
    wait_for,
)

from etj_trainer import exitcodes

CAPACITY = 600
FALLBACK = 4
EVERY = 100
MAINTAIN = 20

pytestmark = pytest.mark.extended  # make test-all (minutes); see the module docstring


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Any:
    workdir = tmp_path_factory.mktemp("dynamic-ps")
    spec = job_spec(
        model={
            "embeddings": [
                {
                    "name": "user_id",
                    "vocabularySize": FALLBACK,
                    "dimension": 8,
                    "dynamic": {
                        "capacity": CAPACITY,
                        "admitAfter": 2,
                        "evictAfterSteps": 40,
                        "maintainEverySteps": MAINTAIN,
                    },
                },
                {"name": "item_id", "vocabularySize": 2000, "dimension": 8, "idsPerExample": 3},
            ],
            "denseFeatures": 4,
            "hiddenUnits": [16],
        },
        training={
            "batchSizePerReplica": 128,
            "steps": 1_000_000,
            "optimizer": "adagrad",
            "learningRate": 0.1,
            "stepsPerExecution": 10,
        },
    )
    config = trainer_config(spec, checkpoint_dir=workdir / "ckpt", every_steps=EVERY, keep=40)
    j = LocalJob(config, workdir, workers=2, ps=2)
    try:
        yield j.start_all()
    finally:
        j.close()


def _checkpoint_steps(job: LocalJob) -> list[int]:
    return [e["step"] for e in job.events() if e["event"] == "checkpoint"]


def _wait_checkpoint_after(job: LocalJob, step: int, timeout: float = 180) -> int:
    def found() -> int:
        job.check_chief_alive()
        return max([s for s in _checkpoint_steps(job) if s > step], default=0)

    return int(wait_for(found, timeout, f"a checkpoint after step {step}"))


def _losses(events: list[dict[str, Any]]) -> list[float]:
    return [e["loss"] for e in events if e["event"] == "progress" and "loss" in e]


def test_the_pool_and_its_index_are_sharded_over_the_ps_as_planned(job: LocalJob) -> None:
    job.wait_step(2 * MAINTAIN + 10, timeout=240)
    plan = next(t for t in job.config.shard_plan.tables if t.name == "user_id")
    assert plan.shards >= 2 and len(set(plan.ps_of_shard)) == 2
    placed = next(e for e in job.events() if e["event"] == "placement" and e["table"] == "user_id")
    shards = placed["dynamicShards"]
    # Every pool shard holds pool rows (the fallback rows are few), each shard's index and
    # row state on its pool shard's ps, the pool shards where the plan puts them.
    assert len(shards) == plan.shards
    assert [s["pool"] for s in shards] == placed["devices"]
    for s in shards:
        assert s["index"] == s["pool"] == s["rowState"]
    assert sum(s["capacity"] for s in shards) == CAPACITY
    assert {f"task:{p}" for p in plan.ps_of_shard} == {
        "task:" + d.split("task:")[1].split("/")[0] for d in placed["devices"]
    }


def test_progress_and_metrics_show_rows_used_admitted_evicted_fallback(job: LocalJob) -> None:
    job.wait_step(4 * MAINTAIN, timeout=240)

    def reported() -> dict[str, Any] | None:
        for e in reversed(job.events()):
            stats = (e.get("dynamicTables") or {}).get("user_id")
            if e["event"] == "progress" and stats and stats["evicted"] > 0:
                return dict(stats)
        return None

    stats = wait_for(reported, 120, "a progress record with evictions")
    assert stats["capacity"] == CAPACITY
    assert 0 < stats["rowsUsed"] <= CAPACITY
    assert stats["admitted"] == stats["rowsUsed"] + stats["evicted"]
    assert stats["fallbackLookups"] > 0
    page = urllib.request.urlopen(f"http://127.0.0.1:{job.metrics_port}/metrics").read().decode()
    assert 'etj_trainer_dynamic_capacity{table="user_id"} 600.0' in page
    assert 'etj_trainer_dynamic_rows_used{table="user_id"}' in page


def test_every_checkpoint_keeps_the_invariants_per_shard(job: LocalJob) -> None:
    step = _wait_checkpoint_after(job, 0)
    shards = next(t for t in job.config.shard_plan.tables if t.name == "user_id").shards
    path = str(Path(job.config.checkpoint.directory) / f"ckpt-{step}")  # type: ignore[union-attr]
    total = saved_invariants(path, shards)
    assert total["capacity"] == CAPACITY
    assert 0 < total["used"] <= CAPACITY and total["evicted"] > 0


def test_ps_killed_restore_keeps_the_invariants_and_the_loss_goes_on(job: LocalJob) -> None:
    _wait_checkpoint_after(job, job.step())
    before = _losses(job.events())
    job.kill("ps", 1, signal.SIGKILL)
    assert job.wait_exit("chief", 0, timeout=120) == exitcodes.RETRYABLE
    job.start("ps", 1)
    latest = max(_checkpoint_steps(job))
    total = latest + 2 * EVERY
    job.set_steps(total)
    job.start("chief", 0)
    restored = dict(wait_for(lambda: job.last("restored"), 180, "the chief to restore"))
    assert restored["step"] == latest
    assert_restored_as_saved(restored)
    done = job.wait_done(timeout=300)
    assert done["step"] == total
    shards = next(t for t in job.config.shard_plan.tables if t.name == "user_id").shards
    final = saved_invariants(str(Path(restored["path"]).parent / f"ckpt-{total}"), shards)
    assert 0 < final["used"] <= CAPACITY
    after = _losses(job.events())
    # Training went on from the restored state, not from scratch: the loss right after
    # the restore is near the loss before the kill.
    assert after and abs(after[0] - before[-1]) < 0.05, (before[-5:], after[:5])
