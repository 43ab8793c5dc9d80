"""Embedding reads and sparse updates fused per ps: one message each way per ps and step.

Under ParameterServerStrategy a worker reads table rows from the ps that hold them and
sends the gradient rows back. Done the plain way (``tf.nn.embedding_lookup`` on each
table, its gradient taken by the tape), every table shard costs four tensors over the
network per step (ids, rows, gradient values, gradient indices), each its own RPC with
its own thread wake-ups on both sides; on a machine where workers and ps share the
cores, that overhead, not the arithmetic, sets the speed (``benchmarks/trainer_throughput.py``;
its profiles in ``benchmarks/RESULTS.md``). Here the distinct ids of every lookup are packed
into one tensor per ps (a header of segment sizes, then the ids), the ps splits it,
gathers from each of its shards and sends every row back in one tensor; after the
backward pass the gradient rows go to each ps in one tensor, which applies them to its
shards with the ids it already holds. A step's gradient rows travel with the next step's
ids (``Pending``: the ps applies them, then gathers, the order of the plain path), and
the flat tower's weights and gradient with the rows of the tower's ps: two messages per
ps and step, whatever the number of tables and shards (the chunk's last step sends its
gradient alone).

The math is that of ``CtrModel.__call__`` with the tape's gradients: the same distinct
ids (``ctr.unique_ids``), the same rows (a shard holds the contiguous rows the
ShardedVariable assigns it), the gradient of each distinct row summed on the worker,
and per shard variable one sparse update with the rows of every lookup that reads it.

A dynamic table's lookup first counts its distinct keys and asks its index shards for
their rows: for a block of steps at once, one message of keys, counts and steps to each ps
holding index shards, one of rows back (``DynamicTable.observe_rows``: the counting of
``ShardedDynamicTable.observe``, then the lookup of ``rows``, from one read of the index;
``dynamic_rows`` says why that is the same math); from there its distinct rows travel
like a hashed table's ids, in the same packed tensors (distinct keys may share a
fallback row: the row is read once and its gradient summed, as ``CtrModel.embed`` does).

This module reads and routes rows; the caller computes the loss and supplies the update
of each shard (``etj_trainer.task.state``), so it knows no optimizer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import tensorflow as tf

from etj_trainer.models.ctr import CtrModel, DistinctIds, unique_ids
from etj_trainer.models.disk import DiskShard
from etj_trainer.models.dynamic import with_fallback

# The update of shard ``j`` of table ``i`` with a gradient, run on that shard's ps.
ApplyFn = Callable[[int, int, tf.IndexedSlices], Any]


@dataclass(frozen=True)
class _Segment:
    """The rows lookup ``lookup`` reads from shard ``shard`` of its table."""

    lookup: int
    table: int
    shard: int
    dimension: int


@dataclass
class Fetched:
    """One step's rows: per lookup its distinct ids and their float32 rows (what the tape
    watches), and what the update needs again (the shard of each distinct id, and per
    ps the ids it received, still on that ps)."""

    distinct: list[DistinctIds]
    rows: list[tf.Tensor]
    shard_of: list[tf.Tensor | None]
    received: list[list[tf.Tensor]]
    # The tower's weights (flat, float32) when they came with the rows, else None.
    tower: tf.Tensor | None = None


@dataclass
class Pending:
    """A step's gradient rows not yet sent: they go with the next step's ids."""

    fetched: Fetched
    grads: list[tf.Tensor]
    update: ApplyFn
    # The gradient of ``fetched.tower`` and its update (on the tower's ps), if it came.
    tower_grad: tf.Tensor | None = None
    tower_update: Callable[[tf.Tensor], Any] | None = None


def _gather(var: Any, ids: tf.Tensor) -> tf.Tensor:
    """Rows ``ids`` of a shard: a variable's, or a disk table shard's through its kernel."""
    return var.gather(ids) if isinstance(var, DiskShard) else tf.gather(var, ids)


def _distinct_rows(keys: DistinctIds, rows: tf.Tensor) -> DistinctIds:
    """A dynamic table's distinct keys as the distinct table rows they read (``rows``: an
    admitted key's own row, else its fallback row), each batch id's position in them."""
    unique, where = tf.unique(rows)
    return DistinctIds(unique, tf.gather(where, keys.position), keys.present)


class FusedTables:
    """Reads and updates of a model's tables, one packed tensor per ps each way."""

    def __init__(self, model: CtrModel, tower: tf.Variable | None = None):
        self.model = model
        # Row offsets of each table's shards (the last one is the table's size).
        self.offsets: list[list[int]] = []
        for i in range(len(model.tables)):
            bounds = [0]
            for v in model.table_components(i):
                bounds.append(bounds[-1] + int(v.shape[0]))
            self.offsets.append(bounds)
        # The segments each ps serves, by device, in a fixed order.
        groups: dict[str, list[_Segment]] = {}
        for k, (_, x) in enumerate(model.named_lookups):
            dim = model.specs[x.table].dimension
            for j, v in enumerate(model.table_components(x.table)):
                groups.setdefault(v.device, []).append(_Segment(k, x.table, j, dim))
        self.groups = list(groups.items())
        # A tower of one flat variable (every architecture's) on a ps that serves rows
        # travels in that ps's messages: its weights after the rows, its gradient after
        # theirs (two fewer messages a step). A custom tower's variables go as they are.
        devices = [device for device, _ in self.groups]
        self.tower = tower if tower is not None and tower.device in devices else None
        self.tower_group = devices.index(tower.device) if self.tower is not None else -1
        self.tower_size = int(tower.shape.num_elements()) if self.tower is not None else 0

    def _shards(self, table: int) -> int:
        return len(self.offsets[table]) - 1

    def dynamic_rows(
        self, batches: list[dict[str, tf.Tensor]], steps: list[tf.Tensor]
    ) -> list[dict[int, DistinctIds]]:
        """Per batch, per lookup of a dynamic table, its distinct keys counted at its step
        and turned into the distinct rows they read: for a whole block of steps, one message
        of keys, counts and steps to each ps that holds index shards and one of rows back
        (each shard counts, then reads its index once: ``DynamicTable.observe_rows``).

        The same math as counting and reading before each step: within a block only the
        counting writes (last-seen steps by maximum, candidate counts by sum) and no read
        depends on it; the index changes only in the passes between blocks (the
        coordinator's; alone, the step function runs its block of one step, then its pass)."""
        model = self.model
        keys: list[dict[int, DistinctIds]] = []
        # Per (batch, lookup): its keys and counts by index shard, and their positions
        # (None: one shard).
        parts: dict[tuple[int, int], tuple[list[Any], list[Any], list[Any] | None]] = {}
        by_device: dict[str, list[tuple[int, int, int]]] = {}
        for i, features in enumerate(batches):
            keys.append({})
            for k, (_, x) in enumerate(model.named_lookups):
                dynamic = model.dynamic.get(model.specs[x.table].name)
                if dynamic is None:
                    continue
                ids = tf.cast(features[x.key], tf.int64)
                unique, position, count = tf.unique_with_counts(tf.reshape(ids, [-1]))
                count = tf.cast(count, tf.int64)
                keys[i][k] = DistinctIds(unique, position, ids >= 0 if x.masked else None)
                n = len(dynamic.shards)
                if n == 1:
                    parts[(i, k)] = ([unique], [count], None)
                else:
                    which = dynamic.shard_of(unique)
                    parts[(i, k)] = (
                        tf.dynamic_partition(unique, which, n),
                        tf.dynamic_partition(count, which, n),
                        tf.dynamic_partition(tf.range(tf.size(unique)), which, n),
                    )
                for j, shard in enumerate(dynamic.shards):
                    by_device.setdefault(shard.device, []).append((i, k, j))
        if not by_device:
            return keys
        own: dict[tuple[int, int, int], tf.Tensor] = {}
        for device, segments in by_device.items():
            part_keys = [parts[(i, k)][0][j] for i, k, j in segments]
            sizes = [tf.size(p, out_type=tf.int64) for p in part_keys]
            m = len(segments)
            # [m steps, m sizes, every part's keys, every part's counts]
            packed = tf.concat(
                [
                    tf.stack([tf.cast(steps[i], tf.int64) for i, _, _ in segments]),
                    tf.stack(sizes),
                    *part_keys,
                    *(parts[(i, k)][1][j] for i, k, j in segments),
                ],
                0,
            )
            with tf.device(device):
                sizes_ps = packed[m : 2 * m]
                body = tf.split(packed[2 * m :], tf.concat([sizes_ps, sizes_ps], 0), num=2 * m)
                found = []
                for s, ((_, k, j), part, count) in enumerate(
                    zip(segments, body[:m], body[m:], strict=True)
                ):
                    table = model.dynamic[model.specs[model.named_lookups[k][1].table].name]
                    found.append(table.shards[j].observe_rows(part, count, packed[s]))
                reply = tf.concat(found, 0)
            for segment, got in zip(segments, tf.split(reply, sizes, num=m), strict=True):
                own[segment] = got
        out: list[dict[int, DistinctIds]] = []
        for i, per_lookup in enumerate(keys):
            out.append({})
            for k, d in per_lookup.items():
                x = model.named_lookups[k][1]
                dynamic = model.dynamic[model.specs[x.table].name]
                pieces = [own[(i, k, j)] for j in range(len(dynamic.shards))]
                where = parts[(i, k)][2]
                rows_k = pieces[0] if where is None else tf.dynamic_stitch(where, pieces)
                out[i][k] = _distinct_rows(d, with_fallback(rows_k, d.ids, dynamic.fallback_rows))
        return out

    def fetch(
        self,
        features: dict[str, tf.Tensor],
        pending: Pending | None = None,
        dynamic_rows: dict[int, DistinctIds] | None = None,
    ) -> Fetched:
        """The rows of every lookup's distinct ids (call in replica context, outside the
        tape: the reads are no part of the gradient).

        With ``pending`` (the previous step's gradient rows, not yet sent), each ps gets
        them in the same message as this step's ids and applies them before it gathers:
        the order and the math of ``apply`` then ``fetch``, one message fewer per ps."""
        model = self.model
        distinct: list[DistinctIds] = []
        shard_of: list[tf.Tensor | None] = []
        local: list[list[tf.Tensor]] = []
        order: list[list[tf.Tensor] | None] = []
        # A dynamic table's lookup reads the rows ``dynamic_rows`` gave its keys.
        dynamic_rows = dynamic_rows or {}
        for k, (_, x) in enumerate(model.named_lookups):
            d = (
                dynamic_rows[k]
                if k in dynamic_rows
                else unique_ids(model.specs[x.table], features[x.key], x.masked)
            )
            distinct.append(d)
            n = self._shards(x.table)
            if n == 1:
                shard_of.append(None)
                local.append([d.ids])
                order.append(None)
                continue
            bounds = tf.constant(self.offsets[x.table], tf.int64)
            shard = tf.cast(
                tf.searchsorted(bounds[1:-1], d.ids, side="right", out_type=tf.int32), tf.int32
            )
            shard_of.append(shard)
            local.append(tf.dynamic_partition(d.ids - tf.gather(bounds, shard), shard, n))
            order.append(tf.dynamic_partition(tf.range(tf.size(d.ids)), shard, n))

        sent = self._pack_grads(pending) if pending else None
        tower: tf.Tensor | None = None
        pieces: dict[tuple[int, int], tf.Tensor] = {}
        received: list[list[tf.Tensor]] = []
        for g, (device, segments) in enumerate(self.groups):
            ids = [local[s.lookup][s.shard] for s in segments]
            sizes = [tf.size(i, out_type=tf.int64) for i in ids]
            packed = tf.concat([tf.stack(sizes), *ids], axis=0)
            m = len(segments)
            if sent is not None:
                # One float32 message: the gradient rows, then the ids' bits (a bitcast
                # moves no value; the ps casts them back).
                packed = tf.concat([sent[g], tf.reshape(tf.bitcast(packed, tf.float32), [-1])], 0)
            with tf.device(device):
                if pending is not None:
                    # The ps splits the gradient off by the ids it kept last step.
                    rest = self._apply_on_ps(g, pending.fetched.received[g], packed, pending)
                    packed = tf.bitcast(tf.reshape(rest, [-1, 2]), tf.int64)
                parts = tf.split(packed[m:], packed[:m], num=m)
                rows = [
                    tf.reshape(tf.cast(_gather(self._var(s), p), tf.float32), [-1])
                    for s, p in zip(segments, parts, strict=True)
                ]
                if g == self.tower_group:
                    # Read after this message's updates (the order of the ops on one
                    # variable in the function is the order they were written in).
                    rows.append(tf.reshape(self.tower.read_value(), [-1]))  # type: ignore[union-attr]
                out = tf.concat(rows, axis=0)
            received.append(parts)
            lengths = [n * s.dimension for n, s in zip(sizes, segments, strict=True)]
            if g == self.tower_group:
                *flat, tower = tf.split(out, [*lengths, self.tower_size])
            else:
                flat = tf.split(out, lengths)
            for s, f in zip(segments, flat, strict=True):
                pieces[(s.lookup, s.shard)] = tf.reshape(f, [-1, s.dimension])

        rows_of: list[tf.Tensor] = []
        for k, (_, x) in enumerate(model.named_lookups):
            parts_k = [pieces[(k, j)] for j in range(self._shards(x.table))]
            where = order[k]
            rows_of.append(parts_k[0] if where is None else tf.dynamic_stitch(where, parts_k))
        return Fetched(distinct, rows_of, shard_of, received, tower)

    def _var(self, s: _Segment) -> Any:
        return self.model.table_components(s.table)[s.shard]

    def _pack_grads(self, pending: Pending) -> list[tf.Tensor]:
        """Per ps (in ``groups`` order), the gradient rows of the ids it sent, flat (and
        the tower's gradient after them on the tower's ps)."""
        fetched, grads = pending.fetched, pending.grads
        split: list[list[tf.Tensor]] = []
        for k, (_, x) in enumerate(self.model.named_lookups):
            shard = fetched.shard_of[k]
            n = self._shards(x.table)
            split.append([grads[k]] if shard is None else tf.dynamic_partition(grads[k], shard, n))
        out = []
        for g, (_, segments) in enumerate(self.groups):
            flat = [tf.reshape(split[s.lookup][s.shard], [-1]) for s in segments]
            if g == self.tower_group:
                flat.append(tf.reshape(pending.tower_grad, [-1]))
            out.append(tf.concat(flat, axis=0))
        return out

    def _apply_on_ps(
        self, g: int, ids: list[tf.Tensor], packed: tf.Tensor, pending: Pending
    ) -> tf.Tensor:
        """On ps ``g`` (in its device scope): split its flat gradient rows by the ids it
        holds and update each shard once, with the rows of every lookup of it (and the
        tower with the next values, on the tower's ps); returns what follows them in
        ``packed`` (the next step's ids, or nothing)."""
        segments = self.groups[g][1]
        lengths = [tf.size(i) * s.dimension for i, s in zip(ids, segments, strict=True)]
        tower = [self.tower_size] if g == self.tower_group else []
        *values, rest = tf.split(packed, [*lengths, *tower, -1], num=len(lengths) + len(tower) + 1)
        if tower:
            assert pending.tower_update is not None and self.tower is not None
            pending.tower_update(tf.reshape(values.pop(), self.tower.shape))
        update = pending.update
        by_var: dict[tuple[int, int], list[tuple[tf.Tensor, tf.Tensor]]] = {}
        for s, i, v in zip(segments, ids, values, strict=True):
            by_var.setdefault((s.table, s.shard), []).append((i, tf.reshape(v, [-1, s.dimension])))
        for (table, shard), got in by_var.items():
            var = self.model.table_components(table)[shard]
            indices = got[0][0] if len(got) == 1 else tf.concat([x[0] for x in got], 0)
            rows = got[0][1] if len(got) == 1 else tf.concat([x[1] for x in got], 0)
            shape = (
                tf.constant(var.shape.as_list()) if isinstance(var, DiskShard) else tf.shape(var)
            )
            update(table, shard, tf.IndexedSlices(rows, indices, shape))
        return rest

    def apply(self, pending: Pending) -> None:
        """Send each ps the gradient ``grads[k]`` of ``fetched.rows[k]`` for its rows (and
        the tower's, if it came with them) and have it update each shard it holds once,
        with the rows of every lookup of it."""
        for g, ((device, _), ids, packed) in enumerate(
            zip(self.groups, pending.fetched.received, self._pack_grads(pending), strict=True)
        ):
            with tf.device(device):
                self._apply_on_ps(g, ids, packed, pending)
