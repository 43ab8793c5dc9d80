"""The operator's shard plan is where TensorFlow really puts the shards.

For several table configurations, the planner's ``ps_of_shard`` and ``rows_per_shard`` are
compared with the devices and shapes of the variables a real ParameterServerStrategy
coordinator (the trainer's chief) creates on real ps processes; optimizer slots must sit
on their shard's ps. The ps and worker processes are shared by the configurations; each
configuration gets its own chief.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from harness import LocalJob, job_spec, trainer_config

from etj.api.plan import ShardPlan

NUM_PS = 3


def _table(name: str, rows: int, **kw: Any) -> dict[str, Any]:
    return {"name": name, "vocabularySize": rows, "dimension": 8, **kw}


CONFIGS = {
    # Whole tables between split ones shift TensorFlow's round-robin counter by one.
    "mixed-adagrad": [
        _table("user_id", 5000),
        _table("country", 200),
        _table("item_id", 2500, idsPerExample=2),
        _table("ad_id", 300),
    ],
    "small-first-adam-ftrl-bf16": [
        _table("country", 100),
        _table("user_id", 3000, optimizer="adam"),
        _table("device", 50, dtype="bfloat16"),
        _table("item_id", 4000, dtype="bfloat16", optimizer="ftrl"),
    ],
    "sgd-uneven-rows": [
        _table("a", 4099, optimizer="sgd"),
        _table("b", 7),
        _table("c", 10001, optimizer="sgd"),
    ],
}


def _ps_index(device: str) -> int:
    match = re.search(r"/job:ps/replica:0/task:(\d+)/", device)
    assert match, f"not a ps device: {device}"
    return int(match.group(1))


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """ps and worker processes shared by every configuration."""
    first = trainer_config(_spec(CONFIGS["mixed-adagrad"]))
    job = LocalJob(first, tmp_path_factory.mktemp("placement"), workers=1, ps=NUM_PS)
    try:
        for i in range(NUM_PS):
            job.start("ps", i)
        job.start("worker", 0)
        yield job
    finally:
        job.close()


def _spec(tables: list[dict[str, Any]]) -> Any:
    return job_spec(
        replicas={"chief": {"replicas": 1}, "worker": {"replicas": 1}, "ps": {"replicas": NUM_PS}},
        model={"embeddings": tables, "denseFeatures": 2, "hiddenUnits": [8]},
        training={"batchSizePerReplica": 32, "steps": 20, "stepsPerExecution": 10},
        sharding={"maxShardBytes": "48Ki"},
    )


def _check(plan: ShardPlan, events: list[dict[str, Any]]) -> None:
    placed = {e["table"]: e for e in events if e["event"] == "placement"}
    assert list(placed) == [t.name for t in plan.tables], "tables created in spec order"
    for t in plan.tables:
        got = placed[t.name]
        assert [_ps_index(d) for d in got["devices"]] == t.ps_of_shard, t.name
        assert got["rows"] == t.rows_per_shard, t.name
        for slot, devices in got["slotDevices"].items():
            assert devices == got["devices"], f"{t.name} slot {slot} not with its shards"


# bf16 and adam/ftrl slots in make test-all only; CI places adagrad's and sgd's (and
# checks the bf16 slots' math under ParameterServer in task/test_low_precision.py).
PLACEMENTS = [
    pytest.param(name, marks=[pytest.mark.extended] if "bf16" in name else []) for name in CONFIGS
]


@pytest.mark.parametrize("name", PLACEMENTS)
def test_real_placement_matches_plan(servers: LocalJob, name: str) -> None:
    config = trainer_config(_spec(CONFIGS[name]))
    plan = config.shard_plan
    assert plan.ps_replicas == NUM_PS
    # The configuration must exercise split and whole tables alike.
    assert any(t.shards > 1 for t in plan.tables) and any(t.shards == 1 for t in plan.tables)
    servers.set_config(config)
    servers.start("chief", 0)
    servers.wait_done(timeout=180)
    _check(plan, servers.events())


def test_check_rejects_a_wrong_plan(servers: LocalJob) -> None:
    """The comparison itself is not vacuous: a plan shifted by one ps fails it."""
    config = trainer_config(_spec(CONFIGS["mixed-adagrad"]))
    events = [
        {
            "event": "placement",
            "table": t.name,
            "rows": t.rows_per_shard,
            "devices": [
                f"/job:ps/replica:0/task:{(p + 1) % NUM_PS}/device:CPU:0" for p in t.ps_of_shard
            ],
            "slotDevices": {},
        }
        for t in config.shard_plan.tables
    ]
    with pytest.raises(AssertionError):
        _check(config.shard_plan, events)
