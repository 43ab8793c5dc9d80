"""A table on its parameter servers' disks (``model.embeddings[].storage.disk``) as the model
and the checkpoints see it: one ``etj_trainer.kernels.disk_table.DiskTable`` per planned
shard, on the ps the plan names, behind the few things the trainer asks of a table shard.

``DiskTableShards`` is the table (``CtrModel.tables[i]``): its shards are ``DiskShard``s, each
with a variable's ``shape``, ``device`` and ``dtype``, ``gather`` (the rows of shard-local
ids) and ``apply`` (one optimizer step of a sparse gradient, the kernels' exact math), so
the fused reads and updates of ``etj_trainer.models.fused`` route to it as to a variable.

Checkpoints hold the table with the keys and layout of a table in RAM: the weights under
the table's key (``model/tables/<i>``), each optimizer slot under the slot's
(``slots/tables/<name>/<slot>``, ``DiskSlotView``), as slices of the whole ``[rows, dim]``
(or ``[rows]``: row-wise Adagrad) tensor, one slice per piece of ``piece_rows`` rows (one
piece per shard: the unsliced tensor or a ShardedVariable's slices). Each ps writes its
shards' slices itself, a piece at a time (``DiskTable.save``, through a registered
checkpoint saver): a save never holds a shard in RAM. A checkpoint of either
restores into the other, into any shard and ps count (``etj_trainer.task.restore`` reads by
slice). Restoring goes a piece at a time (``DiskPart.pieces``: never the whole shard in
RAM); a piece of the weights reads the piece's records, replaces their weights and writes
them back, keeping the slots, and a slot's piece the same way.

Initial rows are the in-RAM table's initializer per piece (the partition shape and offset
of the piece): a shard of one piece starts from exactly the rows the same shard of a table
in RAM starts from; slots start at the optimizer's initial value.

This module neither plans the shards (``config.shard_plan``) nor decides when to save.
"""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Callable
from typing import Any

import tensorflow as tf
from tensorflow.python.ops import io_ops
from tensorflow.python.saved_model import registration
from tensorflow.python.trackable import base as trackable
from tensorflow.python.trackable import trackable_utils

from etj.api.constants import DISK_MOUNT, DISK_TABLES_ENV
from etj.api.disk import COUNTERS, record_bytes
from etj.api.disk import piece_rows as default_piece_rows
from etj.api.plan import TablePlan
from etj.api.spec import EmbeddingTable, Optimizer
from etj_trainer.kernels.disk_table import OPTIMIZERS, STATS, DiskTable

VALUE = "VARIABLE_VALUE"
# Where Adagrad's accumulators start (``etj_trainer.task.optim`` uses it for every table).
INITIAL_ACCUMULATOR = 0.1
# The kernels' name of each optimizer (``DiskTable``'s) and the slot a record keeps.
KERNEL_OPTIMIZER = dict(
    zip((Optimizer.SGD, Optimizer.ADAGRAD, Optimizer.ROWWISE_ADAGRAD), OPTIMIZERS, strict=True)
)

# An initial value of ``(rows, dim)`` rows at row ``offset`` of the table.
Initializer = Callable[..., tf.Tensor]


def _slice(full: list[int], first: int, count: int) -> str:
    """The checkpoint slice spec of rows ``[first, first + count)`` ("" for all of them)."""
    if first == 0 and count == full[0]:
        return ""
    rest = "".join(":-" for _ in full[1:])
    return " ".join(str(d) for d in full) + f" {first},{count}{rest}"


class DiskPart:
    """The weights or the slot row of shard rows ``[0, rows)`` of one ``DiskTable`` (a
    component of a table or of a slot, as its variable would be)."""

    def __init__(self, shard: DiskShard, slot: bool) -> None:
        self.shard = shard
        self.slot = slot
        width = shard.table.slot_width if slot else shard.table.dim
        row_slot = slot and shard.table.optimizer == KERNEL_OPTIMIZER[Optimizer.ROWWISE_ADAGRAD]
        self.shape = tf.TensorShape([shard.rows] if row_slot else [shard.rows, width])
        self.dtype = tf.float32

    @property
    def device(self) -> str:
        return self.shard.device

    @property
    def name(self) -> str:
        return f"{self.shard.name}{'/slot' if self.slot else ''}"

    def read(self, first: int, count: int) -> tf.Tensor:
        """Rows ``[first, first + count)`` of this part (call in ``device``'s scope)."""
        weights, slots = self.shard.table.export(first, count)
        value = slots if self.slot else weights
        return tf.reshape(value, [count, *self.shape[1:]])

    def write(self, first: int, value: Any) -> Any:
        """Set rows ``first`` on of this part to ``value``, the other part kept."""
        value = tf.cast(value, tf.float32)
        count = int(value.shape[0])
        weights, slots = self.shard.table.export(first, count)
        if self.slot:
            return self.shard.table.import_rows(first, weights, value)
        return self.shard.table.import_rows(first, value, slots)

    def ranges(self) -> list[tuple[int, int]]:
        """The pieces of the shard as (first row, rows)."""
        step = self.shard.piece_rows
        return [(f, min(step, self.shard.rows - f)) for f in range(0, self.shard.rows, step)]

    def pieces(self) -> list[DiskPiece]:
        """The part as pieces a restore assigns one at a time."""
        return [DiskPiece(self, first, count) for first, count in self.ranges()]

    def read_value(self) -> tf.Tensor:
        """The whole part (a shard's worth of RAM: for small tables and tests)."""
        with tf.device(self.device):
            return tf.concat([self.read(f, n) for f, n in self.ranges()], 0)

    def assign(self, value: Any) -> None:
        for piece in self.pieces():
            piece.assign(value[piece.first : piece.first + piece.count])

    def sum(self) -> tf.Tensor:
        """The float64 sum of the part, piece by piece on its device."""
        with tf.device(self.device):
            return tf.add_n(
                [tf.reduce_sum(tf.cast(self.read(f, n), tf.float64)) for f, n in self.ranges()]
            )


class DiskPiece:
    """Rows ``[first, first + count)`` of a ``DiskPart``, as a restore assigns them."""

    def __init__(self, part: DiskPart, first: int, count: int) -> None:
        self.part, self.first, self.count = part, first, count
        self.shape = tf.TensorShape([count, *part.shape[1:]])
        self.device = part.device
        self.dtype = tf.float32

    def assign(self, value: Any) -> Any:
        with tf.device(self.device):
            return self.part.write(self.first, value)

    def read_value(self) -> tf.Tensor:
        with tf.device(self.device):
            return self.part.read(self.first, self.count)


class DiskShard(DiskPart):
    """Shard ``index`` of a disk table: rows ``[offset, offset + rows)`` of the table, its
    weights as a component (``DiskPart``) and the reads and updates of the fused path."""

    def __init__(
        self,
        table: DiskTable,
        device: str,
        name: str,
        offset: int,
        rows: int,
        piece_rows: int,
    ) -> None:
        self.table, self._device, self.shard_name = table, device, name
        self.offset, self.rows, self.piece_rows = offset, rows, piece_rows
        super().__init__(self, slot=False)
        self.slot_part = DiskPart(self, slot=True) if table.slot_width else None

    @property
    def device(self) -> str:
        return self._device

    @property
    def name(self) -> str:
        return self.shard_name

    def gather(self, ids: tf.Tensor) -> tf.Tensor:
        """The current rows of shard-local ``ids`` (int64), ``[n, dim]``."""
        return self.table.lookup(ids)

    def apply(self, grad: tf.IndexedSlices, lr: float) -> Any:
        """One optimizer step of the rows ``grad.indices`` (shard-local), rows applied in
        order (repeated ids repeatedly, as the fused kernels of a table in RAM do)."""
        return self.table.apply(grad.indices, grad.values, lr)


class _Saved(trackable.Trackable):
    """One checkpoint value of a disk table (its weights or a slot) over all its shards:
    slices of the whole tensor, a piece of rows each."""

    def __init__(self, parts: list[DiskPart]) -> None:
        self._parts = parts

    @property
    def components(self) -> list[DiskPart]:
        return list(self._parts)

    @property
    def full_shape(self) -> list[int]:
        rows = sum(p.shard.rows for p in self._parts)
        return [rows, *self._parts[0].shape[1:]]

    def save(self, key: str, file_prefix: Any) -> list[tf.Tensor]:
        """Write every part as a bundle of its own, on its device, a piece at a time
        (``DiskTable.save``); the bundles' prefixes, each once its bundle is written."""
        full = self.full_shape
        written = []
        for j, part in enumerate(self._parts):
            with tf.device(part.device):
                prefix = tf.strings.join([file_prefix, f"_{j}"])
                done = part.shard.table.save(
                    prefix, key, full, part.shard.offset, part.slot, part.shard.piece_rows
                )
                with tf.control_dependencies([done]):
                    written.append(tf.identity(prefix))
        return written

    def restore(self, key: str, path: Any) -> None:
        """Assign every part from the checkpoint at ``path``, a piece at a time on its
        device (what ``etj_trainer.task.restore`` does for the trainer's own restores)."""
        full = self.full_shape
        for part in self._parts:
            for piece in part.pieces():
                spec = _slice(full, part.shard.offset + piece.first, piece.count)
                with tf.device(part.device):
                    value = io_ops.restore_v2(path, [key], [spec], [tf.float32])[0]
                piece.assign(value)


def _save(trackables: dict[str, _Saved], file_prefix: Any) -> list[tf.Tensor]:
    """The registered saver of disk tables: every table and slot, by its checkpoint key."""
    written: list[tf.Tensor] = []
    for name, saved in sorted(trackables.items()):
        key = trackable_utils.checkpoint_key(name, VALUE)
        written += saved.save(key, tf.strings.join([file_prefix, f"_{len(written)}"]))
    return written


def _restore(trackables: dict[str, _Saved], merged_prefix: Any) -> None:
    for name, saved in sorted(trackables.items()):
        saved.restore(trackable_utils.checkpoint_key(name, VALUE), merged_prefix)


# Saving a disk table goes through its own op, not ``_serialize_to_tensors``: TensorFlow
# writes what that returns with one SaveV2 per device, which takes every tensor of the
# device as an input at once (a ps would hold its whole shard in RAM). Registered savers
# are TensorFlow's hook for this: their bundles are merged into the checkpoint with the
# others, under the keys and slices a table in RAM has. Not strict: a checkpoint of a disk
# table restores into a table in RAM by TensorFlow's own restore too.
registration.register_checkpoint_saver(
    package="etj",
    name="DiskTable",
    predicate=lambda x: isinstance(x, _Saved),
    save_fn=_save,
    restore_fn=_restore,
    strict_predicate_restore=False,
)


class DiskSlotView(_Saved):
    """A disk table's optimizer slot as the checkpoint sees it (``slots/tables/<name>/<slot>``)."""

    @property
    def variables(self) -> list[DiskPart]:
        return self.components


class DiskTableShards(_Saved):
    """A disk table's shards (``CtrModel.tables[i]``), saved under the table's key."""

    def __init__(self, shards: list[DiskShard]) -> None:
        super().__init__(list(shards))
        self.shards = shards

    @property
    def variables(self) -> list[DiskShard]:
        return list(self.shards)

    def slot_view(self) -> DiskSlotView | None:
        """The slot of every shard as one checkpoint value (None: SGD keeps none)."""
        parts = [s.slot_part for s in self.shards]
        return DiskSlotView([p for p in parts if p is not None]) if parts[0] else None

    def counters(self) -> tf.Tensor:
        """Its shards' kernel counters (``STATS``' order) summed, each read on its ps."""
        parts = []
        for shard in self.shards:
            with tf.device(shard.device):
                parts.append(shard.table.counters())
        return tf.add_n(parts)

    def stats(self, counters: Any) -> dict[str, int]:
        """What ``etj.api.disk.disk_table_stats`` reads of the table: the counters it
        names (from ``counters``' values) and the table's shape."""
        values = dict(zip(STATS, [int(v) for v in counters], strict=True))
        table = self.shards[0].table
        return {
            **{k: values[k] for k in COUNTERS},
            "rows": sum(s.rows for s in self.shards),
            "cache_rows": sum(s.table.cache_rows for s in self.shards),
            "record_bytes": 4 * (table.dim + table.slot_width),
        }

    def lookup(self, ids: tf.Tensor) -> tf.Tensor:
        """The rows of table ids ``ids`` (int64), each from the shard that holds it."""
        if len(self.shards) == 1:
            return self.shards[0].gather(ids)
        bounds = tf.constant([s.offset for s in self.shards[1:]], tf.int64)
        which = tf.cast(tf.searchsorted(bounds, ids, side="right"), tf.int32)
        offsets = tf.constant([s.offset for s in self.shards], tf.int64)
        local = tf.dynamic_partition(ids - tf.gather(offsets, which), which, len(self.shards))
        where = tf.dynamic_partition(tf.range(tf.size(ids)), which, len(self.shards))
        rows = []
        for shard, part in zip(self.shards, local, strict=True):
            with tf.device(shard.device):
                rows.append(shard.gather(part))
        return tf.dynamic_stitch(where, rows)


def directory(plan: TablePlan, distributed: bool) -> tuple[str, str]:
    """Where a table's files go: (directory as the op names it, the environment variable
    that overrides it in the process that holds the shard, or "").

    Under ParameterServer the ps creates the files: the plan's directory, which for the
    default emptyDir (``DISK_MOUNT``) the ps finds in ``$ETJ_DISK_TABLES`` (the pod names it
    there; a process-backed node remaps it). One process (tests, an evaluator) keeps them in
    ``$ETJ_DISK_TABLES`` or a scratch directory of its own."""
    assert plan.disk is not None
    if distributed:
        env = DISK_TABLES_ENV if plan.disk.path == DISK_MOUNT else ""
        return plan.disk.path, env
    own = os.environ.get(DISK_TABLES_ENV) or tempfile.mkdtemp(prefix="etj-disk-tables-")
    return own, ""


def build(
    spec: EmbeddingTable,
    plan: TablePlan,
    optimizer: Optimizer,
    initial: Initializer,
    slot_init: float,
    devices: list[str],
    distributed: bool,
    piece_rows: int | None = None,
) -> DiskTableShards:
    """The disk table ``spec`` in the plan's shards, shard ``j`` created on ``devices[j]``
    and filled with its initial rows piece by piece there."""
    assert plan.disk is not None
    kernel_optimizer = KERNEL_OPTIMIZER[optimizer]
    record = record_bytes(optimizer, spec.dimension)
    step = piece_rows or default_piece_rows(record)
    folder, env = directory(plan, distributed)
    run = uuid.uuid4().hex[:12]
    shards, offset = [], 0
    for j, (rows, cache) in enumerate(
        zip(plan.rows_per_shard, plan.disk.cache_rows_per_shard, strict=True)
    ):
        with tf.device(devices[j]):
            table = DiskTable(
                f"{folder.rstrip('/')}/{spec.name}-{j}-{run}.rows",
                rows=rows,
                dim=spec.dimension,
                optimizer=kernel_optimizer,
                cache_rows=cache,
                slot_init=slot_init,
                name=f"disk_{spec.name}_{j}",
                directory_env=env,
            )
            shard = DiskShard(
                table, devices[j], f"embedding/{spec.name}/part_{j}", offset, rows, step
            )
            for first, count in shard.ranges():
                weights = initial(
                    partition_shape=(count, spec.dimension), partition_offset=(offset + first, 0)
                )
                slots = tf.fill([count, table.slot_width], tf.constant(slot_init, tf.float32))
                table.import_rows(first, weights, slots)
        shards.append(shard)
        offset += rows
    return DiskTableShards(shards)
