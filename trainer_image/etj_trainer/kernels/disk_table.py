"""A table shard whose rows live in a file on local disk and whose hot rows are cached in
RAM: the Python side of ``disk_table.cc``, for tables larger than their parameter servers'
memory.

TensorFlow's variables are tensors in memory and its hash tables maps in memory; no op of
TensorFlow 2.21 keeps a table on disk, and no maintained library does for a current
TensorFlow (TFRA stops at 2.16, DeepRec and Monolith are forks of TF 1.15 and 2.4), hence
a kernel of our own. One ``DiskTable`` is one resource in the process that runs its ops
(the ps that holds the shard): a file of fixed-size records, each a weight row and its
optimizer slot row in float32, and a cache of at most ``cache_rows`` of them in RAM. The
RAM it takes is the cache (``cache_rows`` x the record), one bit per row and the cache's
index; the file takes ``rows`` x the record on disk.

The cache is CLOCK with write-back. A CTR model's ids are heavy-tailed, so a cache far
smaller than the table serves most lookups, and CLOCK keeps the recently used rows about
as well as LRU does on such streams, while a hit costs one byte written instead of LRU's
list splice (no pointer chasing, no list in RAM beside the rows). A frequency policy
(LFU) would hold a fixed Zipf head a little better but forgets slowly when the hot ids
drift from day to day, as a click log's do.

Training is exact: a lookup returns the current row, cached or not, and an update reads
the row through the cache, changes it in place and marks it dirty; it reaches the disk
when evicted. SGD and Adagrad are TensorFlow's fused sparse kernels' math element by
element (bitwise equal to ``ResourceSparseApplyAdagradV2`` and a scatter-sub, tested);
row-wise Adagrad is ``rowupdate``'s, whose mean of squares TensorFlow sums in another
order (equal to float reassociation: a few ulps). Gradient rows apply one by one in order;
``deduplicate=True`` sums repeated ids first as ``optim.dedup`` does.

Checkpoints go through ``save`` (the ps writes its shard as a tensor bundle, a piece of
rows at a time) and ``import_rows`` in pieces of rows: neither ever holds more than one
piece in RAM. The file is scratch (removed when the table is destroyed).

This module neither decides a table's sizes (the planner) nor checkpoints by itself.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import tensorflow as tf

from etj_trainer.kernels import library

# The optimizers the kernel applies, and the slot row each keeps beside a weight row.
OPTIMIZERS = ("sgd", "adagrad", "rowwise_adagrad")
STATS = (
    "hits",
    "misses",
    "disk_reads",
    "disk_writes",
    "evictions",
    "cached",
    "lookups",
    "lookup_misses",
)


def slot_width(optimizer: str, dim: int) -> int:
    """Floats of optimizer state per row: none (SGD), one (row-wise Adagrad), ``dim``."""
    if optimizer not in OPTIMIZERS:
        raise ValueError(
            f"a disk table's optimizer is one of {', '.join(OPTIMIZERS)}, not {optimizer!r}"
        )
    return {"sgd": 0, "adagrad": dim, "rowwise_adagrad": 1}[optimizer]


class DiskTable:
    """One table shard of ``rows`` x ``dim`` float32 on disk at ``path``, at most
    ``cache_rows`` of them in RAM; rows start at zero, their slots at ``slot_init``.

    Created in the current device scope (a ps's, under ParameterServer). With
    ``directory_env`` naming an environment variable set in the process that creates it,
    the file is ``path``'s file name in that directory (a ps pod's disk-table volume, which
    the chief that builds the op does not see).
    """

    def __init__(
        self,
        path: str,
        rows: int,
        dim: int,
        optimizer: str,
        cache_rows: int,
        slot_init: float = 0.0,
        name: str = "disk_table",
        epsilon: float = 1e-7,
        directory_env: str = "",
    ) -> None:
        self._ops = library.load()
        self.rows, self.dim, self.optimizer, self.cache_rows = rows, dim, optimizer, cache_rows
        self.slot_width = slot_width(optimizer, dim)
        self.epsilon = epsilon
        # A name of its own: two tables of one name in one process are two resources.
        self.handle = self._ops.etj_disk_table_handle(shared_name=f"{name}_{uuid.uuid4().hex}")
        self._ops.etj_disk_table_create(
            self.handle,
            path=path,
            rows=rows,
            dim=dim,
            slot_width=self.slot_width,
            cache_rows=cache_rows,
            slot_init=slot_init,
            directory_env=directory_env,
        )

    def lookup(self, ids: Any) -> tf.Tensor:
        """The current rows of ``ids`` (int64 row numbers in the shard), ``[n, dim]``."""
        return self._ops.etj_disk_table_lookup(self.handle, tf.cast(ids, tf.int64), dim=self.dim)

    def apply(self, ids: Any, grads: Any, lr: Any, deduplicate: bool = False) -> Any:
        """One optimizer step of the rows ``ids`` with their gradient rows ``grads``."""
        ids = tf.cast(ids, tf.int64)
        grads = tf.cast(grads, tf.float32)
        if deduplicate:
            ids, position = tf.unique(ids)
            grads = tf.math.unsorted_segment_sum(grads, position, tf.shape(ids)[0])
        return self._ops.etj_disk_table_apply(
            self.handle,
            ids,
            grads,
            tf.cast(lr, tf.float32),
            optimizer=self.optimizer,
            epsilon=self.epsilon,
        )

    def export(self, first: int, count: int) -> tuple[tf.Tensor, tf.Tensor]:
        """Rows ``[first, first + count)``: (weights ``[count, dim]``, slots)."""
        weights, slots = self._ops.etj_disk_table_export(
            self.handle,
            tf.constant(first, tf.int64),
            tf.constant(count, tf.int64),
            dim=self.dim,
            slot_width=self.slot_width,
        )
        return weights, slots

    def pieces(self, piece_rows: int) -> Iterator[tuple[int, tf.Tensor, tf.Tensor]]:
        """The whole shard as (first row, weights, slots), ``piece_rows`` rows at a time."""
        for first in range(0, self.rows, piece_rows):
            yield first, *self.export(first, min(piece_rows, self.rows - first))

    def save(
        self, prefix: Any, key: str, full_shape: list[int], offset: int, slot: bool, piece_rows: int
    ) -> Any:
        """Write the shard's weights (``slot``: its slot rows) as a tensor bundle at
        ``prefix``: slices of ``piece_rows`` rows of the tensor ``key`` of ``full_shape``,
        the shard's rows from row ``offset`` of it; one piece in RAM at a time. Merge the
        bundle into a checkpoint with ``MergeV2Checkpoints``."""
        return self._ops.etj_disk_table_save(
            self.handle,
            prefix,
            key,
            tf.constant(full_shape, tf.int64),
            tf.constant(offset, tf.int64),
            slot=slot,
            piece_rows=piece_rows,
        )

    def import_rows(self, first: int, weights: Any, slots: Any) -> Any:
        """Set rows ``first`` on to ``weights`` and their slots to ``slots``."""
        return self._ops.etj_disk_table_import(
            self.handle,
            tf.constant(first, tf.int64),
            tf.cast(weights, tf.float32),
            tf.reshape(tf.cast(slots, tf.float32), [-1, self.slot_width]),
        )

    def stats(self) -> dict[str, int]:
        """Cache hits and misses (lookups and updates), rows read from and written to
        disk, evictions, cached rows, rows looked up and the lookups' misses: counts since
        creation."""
        return dict(zip(STATS, self.counters().numpy().tolist(), strict=True))

    def counters(self) -> tf.Tensor:
        """The counters of ``stats`` as an int64 vector, in ``STATS``' order (an op: in a
        function, read where the table is)."""
        return self._ops.etj_disk_table_stats(self.handle)

    def close(self) -> None:
        """Destroy the resource (its file goes with it)."""
        tf.raw_ops.DestroyResourceOp(resource=self.handle, ignore_lookup_error=True)
