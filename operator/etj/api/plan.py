"""The shard plan as data: how tables are split and where each shard lives.

Computed by ``etj.core.planner``; written to ``status.shardPlan`` and into the trainer config,
so the operator, the trainer and the user all read the same plan. Pure data.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from etj.api.base import WIRE_STRING, ApiModel
from etj.api.spec import (
    OPTIMIZER_SLOTS,
    Dtype,
    Optimizer,
    Strategy,
    largest_variable_row_bytes,
    slot_bytes_per_row,
)


class DiskTablePlan(ApiModel):
    """Where a disk table's shards live (``model.embeddings[].storage.disk``)."""

    record_bytes: int = Field(ge=1, description="Bytes of one row with its slots on disk.")
    file_bytes: int = Field(ge=0, description="Bytes of the table's files, all shards.")
    cache_rows_per_shard: list[int] = Field(
        description="Rows each shard keeps in RAM, in shard order."
    )
    path: str = Field(description="Directory of the shard files in each ps.")


class TablePlan(ApiModel):
    """How one embedding table is split."""

    name: str = Field(description="Table name.")
    rows: int = Field(
        ge=1,
        description="Rows of the table: its vocabulary size (a dynamic table's: + capacity).",
    )
    dimension: int = Field(ge=1, description="Embedding width.")
    dtype: Annotated[Dtype, WIRE_STRING] = Field(description="Storage dtype.")
    optimizer: Annotated[Optimizer, WIRE_STRING] = Field(
        description="The optimizer that updates this table."
    )
    bytes: int = Field(
        ge=0,
        description=(
            "RAM of the table with its optimizer slots (a dynamic table's: with its index "
            "and admission counters; a disk table's: its cache, bitmap and one streamed "
            "checkpoint piece per shard)."
        ),
    )
    shards: int = Field(ge=1, description="Number of shards (partitions along the rows).")
    rows_per_shard: list[int] = Field(description="Rows of each shard, in shard order.")
    ps_of_shard: list[int] = Field(
        description="Index of the ps task holding each shard (empty without ps)."
    )
    capacity: int | None = Field(
        default=None, description="A dynamic table's pool rows (the last rows); unset: fixed."
    )
    disk: DiskTablePlan | None = Field(
        default=None, description="A disk table's files and caches; unset: in RAM."
    )

    @property
    def bytes_per_row(self) -> float:
        return self.bytes / self.rows

    def shard_bytes(self, shard: int) -> int:
        """Bytes of one shard, with its optimizer slots."""
        return self.bytes * self.rows_per_shard[shard] // self.rows

    def piece_bytes(self, shard: int) -> int:
        """Bytes of the largest variable of a shard: the shard itself, or one of its slots."""
        per_row = largest_variable_row_bytes(self.dtype, self.optimizer, self.dimension)
        return self.rows_per_shard[shard] * per_row

    @property
    def slot_bytes(self) -> int:
        """Bytes of the table's optimizer slots (float32) in RAM, all shards together (a
        disk table's are in its records, counted in its cache)."""
        if self.disk is not None:
            return 0
        per_slot = slot_bytes_per_row(self.optimizer, self.dimension)
        return self.rows * per_slot * OPTIMIZER_SLOTS[self.optimizer]


class PsPlan(ApiModel):
    """What one parameter server holds."""

    index: int = Field(ge=0, description="ps task index.")
    bytes: int = Field(
        ge=0, description="RAM of the shards it holds, with optimizer slots (disk: caches)."
    )
    memory_request_bytes: int = Field(
        ge=0,
        description="Memory the ps pod requests: shard bytes x headroom + base memory + "
        "what restoring a checkpoint briefly needs (3 copies of its largest variable: a "
        "shard or one of its optimizer slots).",
    )
    shards: list[str] = Field(description="Shards it holds, as table/shard.")
    disk_bytes: int = Field(
        default=0, ge=0, description="Bytes of the disk tables' shard files it holds."
    )


class ShardPlan(ApiModel):
    """How the embedding tables are sharded over parameter servers."""

    strategy: Annotated[Strategy, WIRE_STRING] = Field(
        description="The strategy the plan is for (Auto resolved)."
    )
    ps_replicas: int = Field(ge=0, description="Number of ps tasks (0 under MultiWorkerMirrored).")
    total_bytes: int = Field(ge=0, description="Bytes of all tables with optimizer slots.")
    tables: list[TablePlan] = Field(description="Per-table sharding.")
    ps: list[PsPlan] = Field(description="Per-ps contents and memory.")
    replica_memory_bytes: int | None = Field(
        default=None,
        description="Under MultiWorkerMirrored: memory each worker needs for its table copies.",
    )
