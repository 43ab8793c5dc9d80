"""etj.cli.planview: the shard plan as ``etj plan`` prints it."""

from __future__ import annotations

import copy

from rich.console import Console

from etj.api.quantity import human_bytes
from etj.cli.planview import _compress, print_plan
from etj.core.validation import validate_manifest
from tests.unit.conftest import job_manifest, load_example


def _printed(spec: dict) -> tuple[str, object]:
    result = validate_manifest(job_manifest(spec, name="view"))
    assert result.ok and result.plan is not None and result.job is not None
    console = Console(width=200, record=True, color_system=None)
    print_plan(result.job, result.plan, console)
    return console.export_text(), result.plan


def test_the_ps_of_a_tables_shards_are_listed_once_each():
    assert _compress([0, 1, 0, 1]) == "0,1"
    assert _compress([3, 1, 3]) == "1,3"
    assert _compress([]) == "-"


def test_a_parameter_server_plan_shows_tables_and_every_ps():
    text, plan = _printed(load_example("quickstart.yaml")["spec"])
    assert text.splitlines()[0].startswith(f"view: strategy {plan.strategy}, 2 ps, tables ")
    assert "Tables" in text and "Parameter servers" in text and "Dynamic tables" not in text
    for table in plan.tables:
        assert table.name in text and human_bytes(table.bytes) in text
    for ps in plan.ps:
        assert human_bytes(ps.memory_request_bytes) in text


def test_dynamic_tables_show_their_pool_and_fallback_rows():
    spec = copy.deepcopy(load_example("quickstart.yaml")["spec"])
    spec["model"]["embeddings"][0]["dynamic"] = {"capacity": 123456}
    text, _ = _printed(spec)
    assert "Dynamic tables" in text
    row = next(line for line in text.splitlines() if "123,456" in line and "user_id" in line)
    assert "200,000" in row  # the fallback rows: the table's vocabularySize


def test_without_ps_every_worker_holds_all_tables():
    spec = copy.deepcopy(load_example("mirrored.yaml")["spec"])
    text, plan = _printed(spec)
    assert "Parameter servers" not in text
    assert plan.replica_memory_bytes is not None
    assert f"memory request {human_bytes(plan.replica_memory_bytes)}" in text
