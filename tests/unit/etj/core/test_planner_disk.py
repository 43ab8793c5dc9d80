"""Disk tables in the plan: a ps' memory counts a disk table's cache (not its rows), its
disk bytes are counted apart, ps: auto fits the cache, and the render gives each ps an
emptyDir sized to its shard files (or none when the table names its own path)."""

from __future__ import annotations

import copy
from typing import Any

from rich.console import Console

from etj.api import EmbeddingTrainingJob
from etj.api.constants import DISK_MOUNT, DISK_TABLES_ENV, VOLUME_DISK_TABLES
from etj.api.disk import CACHE_ENTRY_BYTES, PIECE_BYTES, disk_volume_bytes
from etj.api.quantity import human_bytes, quantity_bytes
from etj.api.spec import EmbeddingTrainingJobSpec, Strategy
from etj.cli.planview import print_plan
from etj.core.planner import RESTORE_COPIES, build_plan
from etj.core.render import RenderSettings, build_pod
from tests.unit.conftest import job_manifest

ROWS = 50_000_000
DIM = 16
RECORD = 4 * (DIM + 1)  # rowwiseAdagrad: one float of state a row
BODY: dict[str, Any] = {
    "strategy": "ParameterServer",
    "replicas": {"ps": {"replicas": 2, "resources": {"limits": {"memory": "2Gi"}}}},
    "model": {
        "embeddings": [
            {
                "name": "user",
                "vocabularySize": ROWS,
                "dimension": DIM,
                "storage": {"disk": {"cacheRows": ROWS // 100}},
            },
            {"name": "item", "vocabularySize": 1000, "dimension": DIM},
        ]
    },
    "training": {"optimizer": "rowwiseAdagrad"},
    "checkpoint": {"storage": {"size": "1Gi"}},
}


def _body(**changes: Any) -> dict[str, Any]:
    body = copy.deepcopy(BODY)
    body.update(changes)
    return body


def _spec(body: dict[str, Any]) -> EmbeddingTrainingJobSpec:
    return EmbeddingTrainingJobSpec.model_validate(body)


def test_a_disk_tables_ram_is_its_cache_and_its_rows_are_on_disk():
    plan = build_plan(_spec(BODY))
    user = plan.tables[0]
    assert user.disk is not None and plan.tables[1].disk is None
    assert user.disk.file_bytes == ROWS * RECORD
    assert user.disk.record_bytes == RECORD and user.disk.path == DISK_MOUNT
    cached = sum(user.disk.cache_rows_per_shard)
    assert ROWS // 100 <= cached <= ROWS // 100 + user.shards
    # The cache (1 % of the rows, with their entries) and a bit a row: under 3 % of what
    # the rows would take in RAM.
    assert cached * (RECORD + CACHE_ENTRY_BYTES) <= user.bytes < ROWS * RECORD * 3 // 100
    # Every row's file is on some ps, and the ps' disk bytes add up to the table's files.
    assert sum(p.disk_bytes for p in plan.ps) == user.disk.file_bytes
    for p in plan.ps:
        mine = [
            n for n, ps in zip(user.rows_per_shard, user.ps_of_shard, strict=True) if ps == p.index
        ]
        assert p.disk_bytes == sum(mine) * RECORD
        # The ps' memory is its RAM (cache) x headroom + base + a few streamed pieces.
        assert p.memory_request_bytes < quantity_bytes("2Gi")
        assert p.memory_request_bytes >= RESTORE_COPIES * min(PIECE_BYTES, max(mine) * RECORD)


def test_the_same_table_in_ram_does_not_fit_where_the_disk_table_does():
    plan = build_plan(_spec(BODY))
    assert plan.ps_replicas == 2
    in_ram = copy.deepcopy(BODY)
    del in_ram["model"]["embeddings"][0]["storage"]
    in_ram["replicas"]["ps"]["replicas"] = "auto"
    ram_plan = build_plan(_spec(in_ram))
    # 3.4 GB of rows need several 2Gi ps in RAM; on disk two hold them with room to spare.
    assert ram_plan.ps_replicas > 2
    assert ram_plan.total_bytes > 10 * plan.total_bytes


def test_ps_auto_fits_the_cache_and_a_larger_cache_needs_more_ps():
    small = copy.deepcopy(BODY)
    small["replicas"]["ps"]["replicas"] = "auto"
    assert build_plan(_spec(small)).ps_replicas == 1
    large = copy.deepcopy(small)
    large["model"]["embeddings"][0]["storage"] = {"disk": {"cacheRows": ROWS // 2}}
    assert build_plan(_spec(large)).ps_replicas > 1


def test_cache_bytes_bound_the_tables_ram():
    body = copy.deepcopy(BODY)
    body["model"]["embeddings"][0]["storage"] = {"disk": {"cacheBytes": "100Mi"}}
    user = build_plan(_spec(body)).tables[0]
    assert user.disk is not None
    cached = sum(user.disk.cache_rows_per_shard)
    assert cached * (RECORD + CACHE_ENTRY_BYTES) <= quantity_bytes("100Mi") + user.shards * (
        RECORD + CACHE_ENTRY_BYTES
    )


def test_max_shard_bytes_bounds_a_disk_shards_file():
    plan = build_plan(_spec(BODY))
    user = plan.tables[0]
    assert max(user.rows_per_shard) * RECORD <= quantity_bytes("512Mi")
    assert user.shards % plan.ps_replicas == 0


def test_strategy_auto_picks_parameter_server_for_a_disk_table():
    body = _body(strategy="Auto")
    del body["replicas"]
    body["model"]["embeddings"] = [
        {
            "name": "tiny",
            "vocabularySize": 100,
            "dimension": 4,
            "storage": {"disk": {"cacheRows": 10}},
        }
    ]
    assert build_plan(_spec(body)).strategy == Strategy.PARAMETER_SERVER


def _job(body: dict[str, Any]) -> EmbeddingTrainingJob:
    return EmbeddingTrainingJob.from_manifest(job_manifest(body, name="big", uid="u-1"))


def _pod(j: EmbeddingTrainingJob, role: str, index: int = 0) -> dict[str, Any]:
    return build_pod(j, build_plan(j.spec), role, index, RenderSettings())


def test_each_ps_gets_an_empty_dir_sized_to_its_shard_files_and_is_told_where():
    j = _job(BODY)
    plan = build_plan(j.spec)
    for p in plan.ps:
        pod = _pod(j, "ps", p.index)
        volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
        limit = quantity_bytes(volumes[VOLUME_DISK_TABLES]["emptyDir"]["sizeLimit"])
        assert limit >= disk_volume_bytes(p.disk_bytes) > p.disk_bytes
        container = pod["spec"]["containers"][0]
        assert {"name": VOLUME_DISK_TABLES, "mountPath": DISK_MOUNT} in container["volumeMounts"]
        assert {"name": DISK_TABLES_ENV, "value": DISK_MOUNT} in container["env"]
    for role in ("chief", "worker"):
        pod = _pod(j, role)
        assert VOLUME_DISK_TABLES not in {v["name"] for v in pod["spec"]["volumes"]}


def test_a_table_with_its_own_path_gets_no_empty_dir():
    body = copy.deepcopy(BODY)
    body["model"]["embeddings"][0]["storage"]["disk"]["path"] = "/mnt/ssd"
    j = _job(body)
    assert build_plan(j.spec).tables[0].disk.path == "/mnt/ssd"  # type: ignore[union-attr]
    pod = _pod(j, "ps")
    assert VOLUME_DISK_TABLES not in {v["name"] for v in pod["spec"]["volumes"]}


def test_etj_plan_shows_ram_and_disk_per_ps():
    j = _job(BODY)
    plan = build_plan(j.spec)
    console = Console(width=200, record=True, color_system=None)
    print_plan(j, plan, console)
    text = console.export_text()
    assert "Tables on disk" in text and DISK_MOUNT in text
    assert human_bytes(plan.tables[0].disk.file_bytes) in text  # type: ignore[union-attr]
    for p in plan.ps:
        line = next(row for row in text.splitlines() if row.startswith(f"│  {p.index} "))
        assert human_bytes(p.disk_bytes) in line and human_bytes(p.bytes) in line
