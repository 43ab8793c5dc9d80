"""Human-readable views of a shard plan for the CLI (rich tables). Prints; no other I/O."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from etj.api.job import EmbeddingTrainingJob
from etj.api.plan import ShardPlan
from etj.api.quantity import human_bytes


def _compress(indices: list[int]) -> str:
    """The distinct ps a table's shards live on, e.g. [0, 1, 0, 1] -> "0,1"."""
    if not indices:
        return "-"
    distinct = sorted(set(indices))
    return ",".join(str(i) for i in distinct)


def print_plan(job: EmbeddingTrainingJob, plan: ShardPlan, console: Console | None = None) -> None:
    console = console or Console(width=120)
    slots = sum(t.slot_bytes for t in plan.tables)
    console.print(
        f"[bold]{job.name}[/]: strategy {plan.strategy}, {plan.ps_replicas} ps, "
        f"tables {human_bytes(plan.total_bytes)} with optimizer slots "
        f"({human_bytes(slots)} of slots, float32)"
    )
    tables = Table(title="Tables")
    for col in (
        "table",
        "rows",
        "dim",
        "dtype",
        "optimizer",
        "bytes",
        "slots",
        "shards",
        "bytes/shard",
        "on ps",
    ):
        tables.add_column(
            col, justify="left" if col in ("table", "dtype", "optimizer") else "right"
        )
    for t in plan.tables:
        tables.add_row(
            t.name,
            f"{t.rows:,}",
            str(t.dimension),
            t.dtype,
            t.optimizer,
            human_bytes(t.bytes),
            human_bytes(t.slot_bytes),
            str(t.shards),
            human_bytes(t.shard_bytes(0)),
            _compress(t.ps_of_shard),
        )
    console.print(tables)
    dynamic = [t for t in plan.tables if t.capacity is not None]
    if dynamic:
        pools = Table(title="Dynamic tables")
        for col in ("table", "capacity", "fallback rows", "bytes"):
            pools.add_column(col, justify="left" if col == "table" else "right")
        for t in dynamic:
            capacity = t.capacity or 0
            pools.add_row(t.name, f"{capacity:,}", f"{t.rows - capacity:,}", human_bytes(t.bytes))
        console.print(pools)
        console.print(
            "A dynamic table's bytes count its pool and fallback rows with optimizer slots, "
            "its index and its admission counters."
        )
    on_disk = [t for t in plan.tables if t.disk is not None]
    if on_disk:
        disks = Table(title="Tables on disk")
        for col in ("table", "cached rows", "cache %", "RAM", "disk", "path"):
            disks.add_column(col, justify="left" if col in ("table", "path") else "right")
        for t in on_disk:
            assert t.disk is not None
            cached = sum(t.disk.cache_rows_per_shard)
            disks.add_row(
                t.name,
                f"{cached:,}",
                f"{100 * cached / t.rows:.2g}",
                human_bytes(t.bytes),
                human_bytes(t.disk.file_bytes),
                t.disk.path,
            )
        console.print(disks)
        console.print(
            "A disk table's RAM is its cache (rows with slots and cache entries) and one bit "
            "a row; its rows with their slots are in files on each ps' local disk."
        )
    if plan.ps:
        ps = Table(title="Parameter servers")
        columns = ["ps", "shards", "bytes", "memory request"] + (["disk"] if on_disk else [])
        for col in columns:
            ps.add_column(col, justify="right")
        for p in plan.ps:
            row = [
                str(p.index),
                str(len(p.shards)),
                human_bytes(p.bytes),
                human_bytes(p.memory_request_bytes),
            ]
            ps.add_row(*row, *([human_bytes(p.disk_bytes)] if on_disk else []))
        console.print(ps)
    elif plan.replica_memory_bytes is not None:
        console.print(
            f"Every worker holds all tables: memory request {human_bytes(plan.replica_memory_bytes)}"
        )
