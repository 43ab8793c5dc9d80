"""``model.embeddings[].storage``: a table kept on its parameter servers' local disks, its
hot rows cached in RAM (the trainer's ``etj_trainer.kernels.disk_table``).

The facts the planner, the renderer and the trainer share about such a table live here:
what one row costs on disk and in the cache, how the cache divides over the shards, where
the files go in a ps pod, and the rules that refuse what the kernels cannot do.

A shard's file holds every row as one float32 record: the weight row and its optimizer
slot row (none for SGD, one float for row-wise Adagrad, ``dimension`` for Adagrad). Its RAM
is the cache (``cacheRows`` records, each with its index entry and CLOCK state), one bit
per row (rows never written read as zeros) and the pieces a checkpoint save or restore
streams (``PIECE_BYTES`` at a time, never the whole shard).

Pure: no I/O, no environment, no kopf or Kubernetes client.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import Field, model_validator

from etj.api.base import ApiModel, Quantity
from etj.api.quantity import quantity_bytes
from etj.api.rules import Rule, cel_extra
from etj.api.sizing import Optimizer

# The optimizers the kernels apply in place (their names in the API).
DISK_OPTIMIZERS = (Optimizer.SGD, Optimizer.ADAGRAD, Optimizer.ROWWISE_ADAGRAD)
# The emptyDir's sizeLimit over the file bytes of the ps' shards: the files are sparse and
# never grow past their rows, but a ps restarted in the same pod (the kubelet keeps the
# emptyDir) briefly has the new files beside the old ones' blocks until they are unlinked.
DISK_MARGIN = 1.1
DISK_MARGIN_BYTES = 64 * 2**20
# RAM of one cached row besides its record: its row number (8), CLOCK's reference and
# dirty bytes (2) and its entry in the cache's hash index (an unordered_map node of
# 24 bytes in a 32-byte allocation, and a bucket pointer): 64 bytes, rounded up.
CACHE_ENTRY_BYTES = 64
# A checkpoint save or restore streams a shard in pieces of about this many bytes (the
# planner counts a few copies of one piece per ps, as of a restored variable).
PIECE_BYTES = 64 * 2**20

_DISK = "has(t.storage) && has(t.storage.disk)"


class DiskStorage(ApiModel):
    """A table on the ps' local disk, at most its cache in RAM."""

    model_config = ApiModel.model_config | {
        "json_schema_extra": cel_extra(
            (
                "has(self.cacheRows) != has(self.cacheBytes)",
                "storage.disk takes one of cacheRows or cacheBytes (the rows of the table kept "
                "in RAM, over all its shards)",
            )
        )
    }

    cache_rows: int | None = Field(
        default=None,
        ge=1,
        le=2**40,
        description=(
            "Rows of the table kept in RAM, over all its shards (each shard caches its "
            "share); the others are read from disk when looked up."
        ),
    )
    cache_bytes: Quantity | None = Field(
        default=None,
        description=(
            "RAM for the cache over all the table's shards, instead of cacheRows: rows with "
            "their optimizer slots and cache entries that fit in it."
        ),
    )
    path: str | None = Field(
        default=None,
        pattern=r"^/.*",
        max_length=1024,
        description=(
            "A directory in the ps pods for the files (a local SSD your ps template mounts); "
            "default: an emptyDir etj sizes to the ps' shards."
        ),
    )

    @model_validator(mode="after")
    def _one_size(self) -> DiskStorage:
        if (self.cache_rows is None) == (self.cache_bytes is None):
            raise ValueError(
                "storage.disk takes one of cacheRows or cacheBytes (the rows of the table "
                "kept in RAM, over all its shards)"
            )
        return self


class TableStorage(ApiModel):
    """Where a table's rows live: RAM (default, no storage) or the ps' disks."""

    disk: DiskStorage | None = Field(
        default=None,
        description=(
            "Keep the table in files on each ps' local disk, at most the cache in RAM "
            "(ParameterServer only; float32, sgd/adagrad/rowwiseAdagrad, not dynamic)."
        ),
    )


def disk_of(table: Any) -> DiskStorage | None:
    """The disk tier of an ``EmbeddingTable``, None for a table in RAM."""
    storage = getattr(table, "storage", None)
    return storage.disk if storage is not None else None


def slot_floats(optimizer: Optimizer, dimension: int) -> int:
    """Floats of optimizer state beside each row in a disk record."""
    return {Optimizer.SGD: 0, Optimizer.ADAGRAD: dimension, Optimizer.ROWWISE_ADAGRAD: 1}[optimizer]


def record_bytes(optimizer: Optimizer, dimension: int) -> int:
    """Bytes of one row with its slots, float32, as the file and the cache hold it."""
    return 4 * (dimension + slot_floats(optimizer, dimension))


def table_cache_rows(disk: DiskStorage, optimizer: Optimizer, dimension: int, rows: int) -> int:
    """Rows of the table cached over all its shards (at most its rows, at least one)."""
    if disk.cache_rows is not None:
        wanted = disk.cache_rows
    else:
        per_row = record_bytes(optimizer, dimension) + CACHE_ENTRY_BYTES
        wanted = quantity_bytes(disk.cache_bytes or "0") // per_row
    return max(1, min(rows, wanted))


def shard_cache_rows(cache_rows: int, rows: int, shard_rows: int) -> int:
    """A shard's share of its table's cache: proportional to its rows, rounded up."""
    return max(1, min(shard_rows, -(-cache_rows * shard_rows // rows)))


def piece_rows(record: int) -> int:
    """Rows a checkpoint save or restore streams at a time."""
    return max(1, PIECE_BYTES // record)


def shard_ram_bytes(record: int, shard_rows: int, cache_rows: int) -> int:
    """RAM of a disk shard: its cache and its bitmap of written rows (the piece a
    checkpoint streams is counted per ps, as a restored variable is)."""
    return cache_rows * (record + CACHE_ENTRY_BYTES) + 8 * -(-shard_rows // 64)


def disk_volume_bytes(file_bytes: int) -> int:
    """The sizeLimit of a ps' disk-table emptyDir holding ``file_bytes`` of shard files."""
    return math.ceil(file_bytes * DISK_MARGIN) + DISK_MARGIN_BYTES


# The kernels' counters of one shard (``etj_trainer.kernels.disk_table.STATS``) this module
# reads; the trainer adds the table's shape to them (``rows``, ``cache_rows``,
# ``record_bytes``).
COUNTERS = ("lookups", "lookup_misses", "disk_reads", "disk_writes", "cached")


def disk_table_stats(
    now: dict[str, int], before: dict[str, int] | None, seconds: float
) -> dict[str, float | int]:
    """One disk table's stats as the progress record carries them (``DISK_GAUGES``' wire
    names) from its shards' counters summed (``COUNTERS`` and the shape) at a report and,
    with ``before``, at the report before, ``seconds`` earlier: the hit rate and the rates
    are of that interval; without it (or after the counters restarted: new tables), of
    everything counted. No lookup in the interval: a hit rate of 1 (nothing missed)."""
    if before is None or now["lookups"] < before.get("lookups", 0):
        before, seconds = dict.fromkeys(COUNTERS, 0), 0.0
    d = {k: now[k] - before.get(k, 0) for k in COUNTERS}
    per_second = (lambda n: round(n / seconds, 1)) if seconds > 0 else (lambda n: 0.0)
    return {
        "cacheHitRate": round(1 - d["lookup_misses"] / d["lookups"], 6) if d["lookups"] else 1.0,
        "cachedRows": now["cached"],
        "cacheRows": now["cache_rows"],
        "rows": now["rows"],
        "diskBytes": now["rows"] * now["record_bytes"],
        "rowsReadPerSecond": per_second(d["disk_reads"]),
        "rowsWrittenPerSecond": per_second(d["disk_writes"]),
        "lookups": now["lookups"],
        "lookupMisses": now["lookup_misses"],
    }


# Rules on the whole spec: a table's optimizer defaults to training.optimizer, and the
# strategy is the spec's.
DISK_SPEC_RULES = (
    Rule(
        f"!has(self.strategy) || self.strategy != 'MultiWorkerMirrored' || "
        f"!self.model.embeddings.exists(t, {_DISK})",
        "storage.disk is for strategy ParameterServer: under MultiWorkerMirrored every "
        "worker holds the whole table and updates it by collectives, which a table on disk "
        "behind a cache cannot join; use strategy ParameterServer (or Auto)",
        lambda s: (
            s.strategy != "MultiWorkerMirrored" or not any(disk_of(t) for t in s.model.embeddings)
        ),
    ),
    Rule(
        f"!self.model.embeddings.exists(t, {_DISK} && has(t.dynamic))",
        "storage.disk cannot be used with dynamic (a dynamic table's index and admission "
        "counters live in RAM beside its pool); drop one of them",
        lambda s: not any(disk_of(t) and t.dynamic for t in s.model.embeddings),
    ),
    Rule(
        f"!self.model.embeddings.exists(t, {_DISK} && has(t.dtype) && t.dtype != 'float32')",
        "storage.disk keeps float32 rows (the kernels update them in place in float32): a "
        "bfloat16 or float16 table cannot be on disk; use dtype float32",
        lambda s: not any(disk_of(t) and t.dtype != "float32" for t in s.model.embeddings),
    ),
    Rule(
        f"!self.model.embeddings.exists(t, {_DISK} && !((has(t.optimizer) ? t.optimizer : "
        "(has(self.training) && has(self.training.optimizer) ? self.training.optimizer : "
        "'adagrad')) in ['sgd', 'adagrad', 'rowwiseAdagrad']))",
        "storage.disk takes the optimizers its kernels apply in place: sgd, adagrad or "
        "rowwiseAdagrad (set the table's optimizer or training.optimizer)",
        lambda s: (
            not any(
                disk_of(t) and (t.optimizer or s.training.optimizer) not in DISK_OPTIMIZERS
                for t in s.model.embeddings
            )
        ),
    ),
)
