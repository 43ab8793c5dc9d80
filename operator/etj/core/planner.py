"""The shard planner: how many parameter servers the embedding tables need and where
every shard lives.

Pure: spec in, ``ShardPlan`` out (or ``PlanError``). No I/O, no environment.

Sizes. A table costs ``rows x (dimension x dtype bytes + slots x slot bytes per row)``:
SGD has no slot, Adagrad one accumulator, FTRL two, (lazy) Adam two moments, each
``dimension x 4`` bytes a row (float32 whatever the table's dtype: a bfloat16 table is
updated in float32); row-wise Adagrad one accumulator of 4 bytes a row. Slots live on the
same ps as their table shard (``etj.api.spec.table_row_bytes``).

Shard counts. A table gets ``ceil(rows / rows that fit in maxShardBytes)`` shards, so
no shard with its slots exceeds ``maxShardBytes`` (counted in rows because TensorFlow gives
the leftover rows to the first shards). When that is more than one shard it is rounded up to a
multiple of the ps count, so every ps holds the same number of shards of the table and the
memory is balanced (small tables stay whole) — unless the rounded counts would pass the limits
below, then the counts stay unrounded. A shard never has fewer than one row.

Limits (``PlanTooLarge``). Every shard is a TensorFlow variable (plus one per optimizer slot):
each costs a gather and a scatter op per step in every worker's graph, an RPC target on its
ps, a checkpoint entry, and a line in the plan that travels in ``status.shardPlan`` (etcd keeps
objects under ~1.5 MB) and in the trainer's ConfigMap (at most 1 MiB). So:

- ``MAX_SHARDS_PER_TABLE`` = 1024: one embedding lookup over a partitioned table becomes
  ``dynamic_partition`` into that many gathers; past about a thousand the per-step op count,
  not the bytes, bounds the step time. A table that needs more shards at its
  ``maxShardBytes`` is refused (raise maxShardBytes: shards of several GiB are fine on a ps).
- ``MAX_TOTAL_SHARDS`` = 4096: at most ~130 bytes of plan per shard (its rows, its ps, its
  name on the ps, with 63-character table names) keeps the trainer config under ~550 KiB,
  about half the ConfigMap limit (``tests/unit/etj/core/test_spec_fuzz.py`` checks the limit); with
  slots that is still only ~12k variables for TensorFlow to create, save and restore.
- ``MAX_PS`` = 1024 (also the schema's maximum of ``replicas.ps.replicas`` and
  ``maxReplicas``): every pod's TF_CONFIG lists every task, so 1024 ps and 1024 workers
  already make ~110 KB of TF_CONFIG per pod; gRPC channels per worker grow with it too.

Cost. Planning never walks rows and never builds a plan per candidate ps count: the shard
count of a table and the bytes each ps holds follow from ``divmod`` (a table's shards land
on a cyclic range of ps, the leftover rows on a shorter one), so evaluating one ps count is
``O(tables + ps)``. ``ps: auto`` scans candidates from the lower bound the total bytes give,
skipping in ``O(tables)`` those where some table's largest shard alone cannot fit:
``O(MAX_PS x (tables + MAX_PS))`` in the worst case (under a second for 256 tables and
1024 candidates, in a thread of the operator). Only the final plan lists its
shards, and there are at most ``MAX_TOTAL_SHARDS`` of them. ``tests/unit/etj/core/test_spec_fuzz.py``
counts this work on schema-valid extremes.

Placement — the rule TensorFlow 2.21 follows and this plan mirrors
(``ParameterServerStrategyV2._create_variable`` / ``_create_variable_round_robin``):

1. every variable created under the strategy's scope that is not colocated with another
   takes the next ps of one global counter, ``counter % num_ps``, and advances it by one;
   a partitioned variable does so once per partition, in partition order;
2. optimizer slots are created colocated with their variable: they follow their shard and
   do not advance the counter;
3. partition ``i`` of a table with ``rows`` rows in ``k`` parts has
   ``rows // k + (1 if i < rows % k else 0)`` rows (TF caps ``k`` at ``rows``).

So the trainer creates the table variables first, in ``model.embeddings`` order, with a
partitioner that returns exactly the planned shard count for each table (and 1 for any
other variable); shard ``j`` of table ``t`` then lands on ps
``(shards of the tables before t + j) % num_ps``. ``tests/trainer/etj_trainer/test_placement.py``
checks this against real TensorFlow processes.

Memory. A ps requests ``held x psMemoryHeadroom + psBaseMemory`` plus what a restore
briefly adds: the trainer restores one variable (a shard, or one of its slots) per ps at a
time, and reading one holds about ``RESTORE_COPIES`` copies of it. Measured with
``benchmarks/trainer_throughput.py --large-table`` (1.19 GiB of shards per ps in 213 MB
pieces: 1.87 GiB peak training, 2.47 GiB restoring; TensorFlow's own restore, which reads a
ps's whole state before assigning any, peaked at 3.14 GiB).

Dynamic tables (``model.embeddings[].dynamic``). The pool is one table of
``vocabularySize + capacity`` rows (the fallback rows first), sharded and placed as any
table; beside it live the index (key -> row), a key and a last-seen step per pool row, and
the admission candidates (occurrence count and last-seen step per key not yet admitted).
Those are counted per entry (``dynamic_overhead_bytes``) and spread over the pool's rows,
so each shard carries its share:

- index entry, ``INDEX_ENTRY_BYTES`` = 64: a ``MutableHashTable`` int64 -> int64 is a hash
  map of 16-byte slots kept under its maximum load and doubled when full (about 20-40 bytes
  an entry), plus the 16-byte key/value copy its export makes at every checkpoint save;
  ``DenseHashTable`` is not used (it needs two key values reserved as empty/deleted, which
  raw 64-bit keys may take, and never shrinks after erase);
- row state, ``ROW_STATE_BYTES`` = 16: the row's key and its last-seen step (int64 each);
- candidates: two such tables (count, last seen), so ``2 x INDEX_ENTRY_BYTES`` a candidate;
  the trainer prunes them to ``capacity`` at each pass, and one interval adds at most
  ``maintainEverySteps x batchSizePerReplica x ids per example`` new keys.

Disk tables (``model.embeddings[].storage.disk``, ``etj.api.disk``). The rows with their
slots live in one file per shard on the ps' local disk; what counts against the ps'
memory is the shard's cache (its share of ``cacheRows``, proportional to its rows, rounded
up: records with their cache entries), one bit a row, and, as the largest piece a
checkpoint holds, one streamed piece of rows (``etj.api.disk.PIECE_BYTES``) instead of the
whole shard. ``maxShardBytes`` bounds a shard's file. The ps' file bytes are its
``disk_bytes``, the size the renderer gives its emptyDir. Such a job is ParameterServer
(``Auto`` picks it).

Strategy ``Auto``: MultiWorkerMirrored when all tables (with slots) fit in
``sharding.mirroredMaxBytes`` — every worker then holds a copy — and none is bfloat16 in a
job of several processes, else ParameterServer. TensorFlow 2.21's collectives (the
broadcast of initial values, the gradients' all-gather) have no bfloat16 kernels, so a
bfloat16 table under MultiWorkerMirrored with more than one process is refused (float16
works; one process has no collectives).
``ps: auto``: the fewest ps (up to ``maxReplicas``) whose memory request fits each ps's
memory budget (its resources' memory limit, else request, else ``defaultPsMemory``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from etj.api.architectures import linear_table_name
from etj.api.constants import DISK_MOUNT
from etj.api.disk import (
    disk_of,
    piece_rows,
    record_bytes,
    shard_cache_rows,
    shard_ram_bytes,
    table_cache_rows,
)
from etj.api.dynamic import table_rows
from etj.api.plan import DiskTablePlan, PsPlan, ShardPlan, TablePlan
from etj.api.quantity import human_bytes, quantity_bytes
from etj.api.spec import (
    MAX_PS,
    Dtype,
    EmbeddingTable,
    EmbeddingTrainingJobSpec,
    Optimizer,
    Strategy,
    largest_variable_row_bytes,
    table_row_bytes,
)

# The limits TensorFlow and the plan's carriers live with (see the module docstring).
MAX_SHARDS_PER_TABLE = 1024
MAX_TOTAL_SHARDS = 4096


class PlanError(ValueError):
    """The tables cannot be planned as the spec asks; ``field`` names the field to change."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class PlanTooLarge(PlanError):
    """The plan would pass one of the limits TensorFlow can live with."""

    def __init__(self, field: str, message: str):
        super().__init__(field, f"PlanTooLarge: {message}")


@dataclass(frozen=True)
class _Table:
    """What the planner needs of one table."""

    name: str
    rows: int
    dimension: int
    dtype: Dtype
    optimizer: Optimizer
    bytes_per_row: int
    # A dynamic table's pool rows (``rows`` counts its fallback rows too); None: fixed.
    capacity: int | None = None
    # A disk table's record (a float32 row with its slots) and rows cached over all its
    # shards, and the directory of its files in a ps; None: a table in RAM.
    record: int | None = None
    cache_rows: int | None = None
    path: str | None = None

    @property
    def bytes(self) -> int:
        """RAM of the table (a disk table's: of its cache and bitmap as one shard, which
        no split into shards makes smaller)."""
        return self.ram(self.rows)

    @property
    def shard_row_bytes(self) -> int:
        """Bytes of a row that maxShardBytes bounds: in RAM, or a disk table's in its file."""
        return self.record if self.record is not None else self.bytes_per_row

    def ram(self, shard_rows: int) -> int:
        """RAM of a shard of ``shard_rows`` rows (besides the piece a restore reads)."""
        if self.record is None or self.cache_rows is None:
            return shard_rows * self.bytes_per_row
        cached = shard_cache_rows(self.cache_rows, self.rows, shard_rows)
        return shard_ram_bytes(self.record, shard_rows, cached)

    def piece(self, shard_rows: int) -> int:
        """The largest piece a checkpoint save or restore of such a shard holds at once: a
        variable (the shard or one slot), or a disk shard's streamed piece of rows."""
        if self.record is not None:
            return min(shard_rows, piece_rows(self.record)) * self.record
        return shard_rows * self.variable_bytes_per_row

    @property
    def variable_bytes_per_row(self) -> int:
        """Bytes of one row of the table's largest variable: the table or one of its slots."""
        return largest_variable_row_bytes(self.dtype, self.optimizer, self.dimension)

    @property
    def variable_bytes(self) -> int:
        """Bytes of the table's largest variable: the table alone or one of its slots."""
        return self.rows * self.variable_bytes_per_row

    def planned(self, shards: int, ps_of_shard: list[int]) -> TablePlan:
        """The table in the plan: in ``shards`` partitions, shard ``j`` on ps
        ``ps_of_shard[j]`` (none under MultiWorkerMirrored)."""
        split = rows_per_shard(self.rows, shards)
        disk = None
        if self.record is not None and self.cache_rows is not None:
            disk = DiskTablePlan(
                record_bytes=self.record,
                file_bytes=self.rows * self.record,
                cache_rows_per_shard=[
                    shard_cache_rows(self.cache_rows, self.rows, n) for n in split
                ],
                path=self.path or DISK_MOUNT,
            )
        return TablePlan(
            name=self.name,
            rows=self.rows,
            dimension=self.dimension,
            dtype=self.dtype,
            optimizer=self.optimizer,
            bytes=sum(self.ram(n) for n in split) if disk else self.bytes,
            shards=shards,
            rows_per_shard=split,
            ps_of_shard=ps_of_shard,
            capacity=self.capacity,
            disk=disk,
        )


def table_bytes_per_row(table: EmbeddingTable, default_optimizer: Optimizer) -> int:
    """Bytes of one row of the table together with its optimizer slots."""
    optimizer = Optimizer(table.optimizer or default_optimizer)
    return table_row_bytes(table.dtype, optimizer, table.dimension)


# Per-entry estimates of a dynamic table's index and counters (see the module docstring).
INDEX_ENTRY_BYTES = 64
ROW_STATE_BYTES = 16
CANDIDATE_ENTRY_BYTES = 2 * INDEX_ENTRY_BYTES


def dynamic_overhead_bytes(table: EmbeddingTable, spec: EmbeddingTrainingJobSpec) -> int:
    """Bytes of a dynamic table's index, row state and admission candidates (0 for a
    fixed table)."""
    if table.dynamic is None:
        return 0
    d = table.dynamic
    new_keys = (
        d.maintain_every_steps
        * spec.training.batch_size_per_replica
        * ids_per_example(spec, table.name)
    )
    # Pruned to capacity at each pass; a pass finds at most one interval's new keys more.
    return _capacity_overhead(d.capacity) + new_keys * CANDIDATE_ENTRY_BYTES


def _capacity_overhead(capacity: int) -> int:
    """Index entries and row state of ``capacity`` rows, and as many candidates."""
    return capacity * (INDEX_ENTRY_BYTES + ROW_STATE_BYTES + CANDIDATE_ENTRY_BYTES)


def ids_per_example(spec: EmbeddingTrainingJobSpec, name: str) -> int:
    """Most ids one example looks up in table ``name`` (a first-order table: those of the
    table it belongs to)."""
    model = spec.model
    own = {t.name: t for t in model.embeddings}
    base = next((t for t in model.embeddings if linear_table_name(t.name) == name), own.get(name))
    if base is None:
        return 1
    if model.features is None:
        return base.ids_per_example
    return max(1, sum(f.values_per_example for f in model.features if f.table == base.name))


def _tables(spec: EmbeddingTrainingJobSpec) -> list[_Table]:
    default_opt = spec.training.optimizer
    out = []
    # The first-order tables of wideDeep/deepFM too: ModelSpec.tables is the one list.
    for t in spec.model.tables:
        rows = table_rows(t)
        # A dynamic table's index and counters, spread over its rows (rounded up, so the
        # total is never under the estimate): each shard carries its share.
        overhead = -(-dynamic_overhead_bytes(t, spec) // rows)
        optimizer = Optimizer(t.optimizer or default_opt)
        disk = disk_of(t)
        out.append(
            _Table(
                name=t.name,
                rows=rows,
                dimension=t.dimension,
                dtype=t.dtype,
                optimizer=optimizer,
                bytes_per_row=table_bytes_per_row(t, default_opt) + overhead,
                capacity=t.dynamic.capacity if t.dynamic else None,
                record=record_bytes(optimizer, t.dimension) if disk else None,
                cache_rows=(table_cache_rows(disk, optimizer, t.dimension, rows) if disk else None),
                path=disk.path if disk else None,
            )
        )
    return out


def _bfloat16_tables(spec: EmbeddingTrainingJobSpec) -> list[int]:
    """Indices (in ``model.embeddings``) of the bfloat16 tables, in a job whose
    MultiWorkerMirrored cluster would have several processes (none otherwise)."""
    chief = spec.replicas.chief
    if (chief.replicas if chief is not None else 0) + spec.replicas.worker.replicas <= 1:
        return []
    return [i for i, t in enumerate(spec.model.embeddings) if t.dtype == Dtype.BFLOAT16]


def resolve_strategy(spec: EmbeddingTrainingJobSpec) -> Strategy:
    """The strategy the job runs with: ``Auto`` decided from the table sizes."""
    if spec.strategy != Strategy.AUTO:
        return spec.strategy
    if spec.replicas.ps is not None or _bfloat16_tables(spec):
        return Strategy.PARAMETER_SERVER
    if any(disk_of(t) for t in spec.model.embeddings):
        # (A table on disk is for ParameterServer only: etj.api.disk.DISK_SPEC_RULES.)
        return Strategy.PARAMETER_SERVER
    total = sum(t.bytes for t in _tables(spec))
    if total <= quantity_bytes(spec.sharding.mirrored_max_bytes):
        return Strategy.MULTI_WORKER_MIRRORED
    return Strategy.PARAMETER_SERVER


def rows_per_shard(rows: int, shards: int) -> list[int]:
    """TensorFlow's "div" split of ``rows`` into ``shards`` partitions."""
    base, extra = divmod(rows, shards)
    return [base + (1 if i < extra else 0) for i in range(shards)]


def min_shard_count(table: _Table, max_shard_bytes: int) -> int:
    """The fewest shards that keep every shard of the table under ``max_shard_bytes``."""
    # Count by rows, not bytes: TF gives the leftover rows to the first shards, so the
    # largest shard has ceil(rows / shards) rows and that is what must fit.
    max_rows = max_shard_bytes // table.shard_row_bytes
    return min(max(1, -(-table.rows // max_rows)), table.rows)


def _balanced(shards: int, rows: int, num_ps: int) -> int:
    """``shards`` rounded up to a multiple of ``num_ps`` (TF caps a split at ``rows``)."""
    if shards > 1 and num_ps > 1:
        shards = -(-shards // num_ps) * num_ps
    return min(shards, rows)


def shard_counts(tables: list[_Table], minimum: list[int], num_ps: int) -> list[int]:
    """Shards per table for ``num_ps`` ps: balanced when that stays within the limits."""
    balanced = [
        k if k <= MAX_SHARDS_PER_TABLE else m
        for k, m in (
            (_balanced(m, t.rows, num_ps), m) for t, m in zip(tables, minimum, strict=True)
        )
    ]
    return balanced if sum(balanced) <= MAX_TOTAL_SHARDS else list(minimum)


def ps_memory_budget(spec: EmbeddingTrainingJobSpec) -> int:
    """Memory one ps may use: its memory limit, else request, else the default."""
    ps = spec.replicas.ps
    memory = ps.resources.memory() if ps is not None and ps.resources is not None else None
    return quantity_bytes(memory if memory is not None else spec.sharding.default_ps_memory)


# Copies of one variable held while the trainer restores it: the stored slice read, the
# restored tensor and the variable's new buffer (see the module docstring).
RESTORE_COPIES = 3


def memory_request(held_bytes: int, largest_piece: int, spec: EmbeddingTrainingJobSpec) -> int:
    """Memory a process holding ``held_bytes`` of tables, the largest variable of which is
    ``largest_piece`` bytes, asks for."""
    headroom = spec.sharding.ps_memory_headroom
    restore = RESTORE_COPIES * largest_piece
    return math.ceil(held_bytes * headroom) + quantity_bytes(spec.sharding.ps_base_memory) + restore


@dataclass(frozen=True)
class _Loads:
    """What each ps holds under one shard layout: bytes and its largest variable."""

    held: list[int]
    piece: list[int]


def _cyclic(start: int, length: int, size: int) -> list[tuple[int, int]]:
    """The cyclic range ``start, start+1, ... (length of them) mod size`` as plain ranges."""
    if length <= 0:
        return []
    end = start + length
    return [(start, end)] if end <= size else [(start, size), (0, end - size)]


def _loads(tables: list[_Table], counts: list[int], num_ps: int) -> _Loads:
    """Per-ps bytes and largest variable, by arithmetic: ``O(tables + num_ps)``.

    Shard ``j`` of a table whose first shard takes counter value ``c`` lands on ps
    ``(c + j) % num_ps`` and has ``q + (j < r)`` rows (``q, r = divmod(rows, k)``). So every
    ps gets ``k // num_ps`` shards, those of the cyclic range of length ``k % num_ps`` from
    ``c`` one more; and of the big shards (``j < r``) every ps gets ``r // num_ps``, the
    range of length ``r % num_ps`` from ``c`` one more. Bytes are summed with a difference
    array over those ranges; the largest variable is a range maximum, painted from the
    largest value down so each ps is written once.
    """
    delta = [0] * (num_ps + 1)
    everyone = 0  # bytes every ps holds
    floor = 0  # largest variable every ps holds
    ranges: list[tuple[int, int, int]] = []  # (variable bytes, start, length)
    counter = 0
    for t, k in zip(tables, counts, strict=True):
        q, r = divmod(t.rows, k)
        rounds, rest = divmod(k, num_ps)
        big_rounds, big_rest = divmod(r, num_ps)
        c = counter % num_ps
        # A shard of q rows costs small, one of q + 1 rows small + extra.
        small = t.ram(q)
        extra = t.ram(q + 1) - small if r else 0
        everyone += rounds * small + big_rounds * extra
        for length, weight in ((rest, small), (big_rest, extra)):
            for lo, hi in _cyclic(c, length, num_ps):
                delta[lo] += weight
                delta[hi] -= weight
        if big_rounds:
            floor = max(floor, t.piece(q + 1))
        elif rounds:
            floor = max(floor, t.piece(q))
            ranges.append((t.piece(q + 1), c, big_rest))
        else:
            ranges += [(t.piece(q), c, rest), (t.piece(q + 1), c, big_rest)]
        counter += k
    held, running = [], everyone
    for i in range(num_ps):
        running += delta[i]
        held.append(running)
    piece: list[int | None] = [None] * num_ps
    nxt = list(range(num_ps + 1))  # next ps not yet painted, at or after i (union-find)

    def find(i: int) -> int:
        while nxt[i] != i:
            nxt[i] = nxt[nxt[i]]
            i = nxt[i]
        return i

    for value, start, length in sorted(ranges, reverse=True):
        if value <= floor:
            break
        for lo, hi in _cyclic(start, length, num_ps):
            i = find(lo)
            while i < hi:
                piece[i] = value
                nxt[i] = i + 1
                i = find(i + 1)
    return _Loads(held, [floor if p is None else p for p in piece])


def _requests(loads: _Loads, spec: EmbeddingTrainingJobSpec) -> list[int]:
    return [memory_request(h, p, spec) for h, p in zip(loads.held, loads.piece, strict=True)]


def _ps_plan(
    spec: EmbeddingTrainingJobSpec, tables: list[_Table], minimum: list[int], num_ps: int
) -> ShardPlan:
    """The full plan for ``num_ps`` ps: per-shard lists, at most ``MAX_TOTAL_SHARDS`` long."""
    counts = shard_counts(tables, minimum, num_ps)
    loads = _loads(tables, counts, num_ps)
    offsets = [0]
    for k in counts:
        offsets.append(offsets[-1] + k)
    names: list[list[str]] = [[] for _ in range(num_ps)]
    disk = [0] * num_ps
    plans = []
    for t, k, c in zip(tables, counts, offsets[:-1], strict=True):
        placement = [(c + j) % num_ps for j in range(k)]
        plan = t.planned(k, placement)
        for j, ps in enumerate(placement):
            names[ps].append(f"{t.name}/{j}")
            if plan.disk is not None:
                disk[ps] += plan.rows_per_shard[j] * plan.disk.record_bytes
        plans.append(plan)
    requests = _requests(loads, spec)
    return ShardPlan(
        strategy=Strategy.PARAMETER_SERVER,
        ps_replicas=num_ps,
        total_bytes=sum(p.bytes for p in plans),
        tables=plans,
        ps=[
            PsPlan(
                index=i,
                bytes=loads.held[i],
                memory_request_bytes=requests[i],
                shards=names[i],
                disk_bytes=disk[i],
            )
            for i in range(num_ps)
        ],
    )


def _where(i: int, n: int) -> str:
    """Where table ``i`` of ``ModelSpec.tables`` comes from: its own entry among the ``n``
    of ``model.embeddings``, or (past them) the table whose first-order table it is."""
    return f"model.embeddings[{i % n}]"


def _check_rows_fit_shards(tables: list[_Table], max_shard: int, n: int) -> None:
    for i, t in enumerate(tables):
        if t.shard_row_bytes > max_shard:
            raise PlanError(
                "spec.sharding.maxShardBytes",
                f"one row of table {t.name!r} ({_where(i, n)}) with its optimizer slots "
                f"is {t.shard_row_bytes} bytes, more than maxShardBytes ({max_shard}); raise "
                "maxShardBytes",
            )


def _check_shard_limits(tables: list[_Table], minimum: list[int], max_shard: int, n: int) -> None:
    for i, (t, k) in enumerate(zip(tables, minimum, strict=True)):
        if k > MAX_SHARDS_PER_TABLE:
            size = t.rows * t.shard_row_bytes
            need = -(-size // MAX_SHARDS_PER_TABLE)
            raise PlanTooLarge(
                f"spec.{_where(i, n)}",
                f"table {t.name!r} is {human_bytes(size)} with its optimizer slots: "
                f"{k} shards of at most maxShardBytes ({human_bytes(max_shard)}), over the "
                f"{MAX_SHARDS_PER_TABLE} shards per table TensorFlow handles well; raise "
                f"sharding.maxShardBytes to at least {human_bytes(need)} or make the table "
                "smaller (vocabularySize, dimension, dtype)",
            )
    total = sum(minimum)
    if total > MAX_TOTAL_SHARDS:
        raise PlanTooLarge(
            "spec.sharding.maxShardBytes",
            f"the tables need {total} shards of at most {human_bytes(max_shard)}, over the "
            f"{MAX_TOTAL_SHARDS} shards a job may have; raise maxShardBytes or use fewer or "
            "smaller tables",
        )


def _check_dynamic_fits(
    spec: EmbeddingTrainingJobSpec, tables: list[_Table], spare: int, most_ps: int
) -> None:
    """A dynamic table whose pool alone passes what ``most_ps`` ps can hold: refused by its
    capacity, with the capacity that would fit."""
    headroom = Fraction(spec.sharding.ps_memory_headroom)
    room = Fraction(spare * most_ps) / headroom
    for i, (t, e) in enumerate(zip(tables, spec.model.tables, strict=True)):
        if t.capacity is None or t.bytes <= room:
            continue
        slots_row = table_bytes_per_row(e, spec.training.optimizer)
        fixed = e.vocabulary_size * slots_row + (
            dynamic_overhead_bytes(e, spec) - _capacity_overhead(t.capacity)
        )
        # (+1: the overhead is spread over the rows rounded up, at most a byte a row.)
        per_row = slots_row + _capacity_overhead(1) + 1
        fits = max(0, math.floor((room - fixed) / per_row))
        raise PlanError(
            f"spec.{_where(i, len(spec.model.embeddings))}.dynamic.capacity",
            f"dynamic table {t.name!r} needs {human_bytes(t.bytes)} (capacity {t.capacity:,} "
            f"rows with optimizer slots, index and counters) but {most_ps} ps with "
            f"{human_bytes(spare)} each beyond their base memory hold about {fits:,} rows of "
            "it; lower capacity, or give the ps more memory or replicas",
        )


def _largest_shard_request(t: _Table, shards: int, spec: EmbeddingTrainingJobSpec) -> int:
    rows = -(-t.rows // shards)
    return memory_request(t.ram(rows), t.piece(rows), spec)


def _fewest_ps(
    spec: EmbeddingTrainingJobSpec, tables: list[_Table], minimum: list[int], budget: int
) -> int | None:
    """The fewest ps (up to ``maxReplicas``) whose every memory request fits ``budget``."""
    ps_spec = spec.replicas.ps
    max_ps = min(ps_spec.max_replicas if ps_spec is not None else 64, MAX_PS)
    # Some ps holds at least total / num_ps bytes: fewer ps than this cannot fit.
    spare = budget - quantity_bytes(spec.sharding.ps_base_memory)
    total = sum(t.bytes for t in tables)
    # (Exact rationals: quantities may be far beyond a float's range.)
    lowest = max(
        1, math.floor(Fraction(total) * Fraction(spec.sharding.ps_memory_headroom) / spare)
    )
    for num_ps in range(lowest, max_ps + 1):
        counts = shard_counts(tables, minimum, num_ps)
        # O(tables) first: the ps holding a table's largest shard needs at least that.
        if any(
            _largest_shard_request(t, k, spec) > budget for t, k in zip(tables, counts, strict=True)
        ):
            continue
        loads = _loads(tables, counts, num_ps)
        if max(_requests(loads, spec)) <= budget:
            return num_ps
    return None


def _plan_ps(spec: EmbeddingTrainingJobSpec, tables: list[_Table]) -> ShardPlan:
    max_shard = quantity_bytes(spec.sharding.max_shard_bytes)
    n = len(spec.model.embeddings)
    _check_rows_fit_shards(tables, max_shard, n)
    minimum = [min_shard_count(t, max_shard) for t in tables]
    _check_shard_limits(tables, minimum, max_shard, n)
    budget = ps_memory_budget(spec)
    base = quantity_bytes(spec.sharding.ps_base_memory)
    own = spec.replicas.ps
    own_program = own is not None and own.template is not None and own.template.runs_own_program
    if own is not None and own_program and isinstance(own.replicas, int):
        # A ps running the job's own program (a converted TFJob) holds what that program
        # puts there and asks for the memory its template says: etj plans the shards
        # (ETJ_SHARD_PLAN) but judges no memory it does not plan.
        return _ps_plan(spec, tables, minimum, own.replicas)
    if base >= budget:
        raise PlanError(
            "spec.replicas.ps.resources",
            f"the ps memory budget ({human_bytes(budget)}) does not exceed the memory of an "
            f"empty ps (sharding.psBaseMemory, {human_bytes(base)}); give the ps more memory",
        )
    ps_spec = spec.replicas.ps
    requested = ps_spec.replicas if ps_spec is not None else "auto"
    most_ps = requested if isinstance(requested, int) else (ps_spec.max_replicas if ps_spec else 64)
    _check_dynamic_fits(spec, tables, budget - base, most_ps)
    if isinstance(requested, int):
        loads = _loads(tables, shard_counts(tables, minimum, requested), requested)
        requests = _requests(loads, spec)
        worst = max(range(requested), key=requests.__getitem__)
        if requests[worst] > budget:
            raise PlanError(
                "spec.replicas.ps",
                f"ps {worst} would need {human_bytes(requests[worst])} "
                f"(shards {human_bytes(loads.held[worst])} x headroom + base + restore) but its "
                f"memory is {human_bytes(budget)}; use more ps (or replicas: auto), more ps "
                "memory, or a smaller maxShardBytes",
            )
        return _ps_plan(spec, tables, minimum, requested)
    num_ps = _fewest_ps(spec, tables, minimum, budget)
    if num_ps is None:
        max_ps = ps_spec.max_replicas if ps_spec is not None else 64
        total = sum(t.bytes for t in tables)
        raise PlanError(
            "spec.replicas.ps",
            f"the tables need {human_bytes(total)} with optimizer slots; they fit no set of up "
            f"to {max_ps} ps with {human_bytes(budget)} of memory each; raise "
            "replicas.ps.maxReplicas or the ps memory, or lower maxShardBytes so shards spread "
            "more evenly",
        )
    return _ps_plan(spec, tables, minimum, num_ps)


def _plan_mirrored(spec: EmbeddingTrainingJobSpec, tables: list[_Table]) -> ShardPlan:
    bfloat16 = _bfloat16_tables(spec)
    if bfloat16:
        i = bfloat16[0]
        raise PlanError(
            f"spec.model.embeddings[{i}].dtype",
            f"table {spec.model.embeddings[i].name!r} is bfloat16, which MultiWorkerMirrored "
            "cannot train in more than one process (TensorFlow's collectives have no "
            "bfloat16 kernels); use float16 or strategy ParameterServer",
        )
    total = sum(t.bytes for t in tables)
    # Each worker restores whole tables: the largest piece is a whole table (or slot).
    largest = max((t.variable_bytes for t in tables), default=0)
    need = memory_request(total, largest, spec)
    worker = spec.replicas.worker.resources
    memory = worker.memory() if worker is not None else None
    if memory is not None and need > quantity_bytes(memory):
        raise PlanError(
            "spec.replicas.worker.resources",
            f"under MultiWorkerMirrored every worker holds all tables: {human_bytes(need)} "
            f"(tables {human_bytes(total)} x headroom + base + restore) but a worker has "
            f"{human_bytes(quantity_bytes(memory))}; give workers more memory or use "
            "strategy ParameterServer",
        )
    return ShardPlan(
        strategy=Strategy.MULTI_WORKER_MIRRORED,
        ps_replicas=0,
        total_bytes=total,
        tables=[t.planned(1, []) for t in tables],
        ps=[],
        replica_memory_bytes=need,
    )


def build_plan(spec: EmbeddingTrainingJobSpec) -> ShardPlan:
    """The shard plan of a job; raises ``PlanError`` naming the field to change."""
    tables = _tables(spec)
    if resolve_strategy(spec) == Strategy.MULTI_WORKER_MIRRORED:
        return _plan_mirrored(spec, tables)
    return _plan_ps(spec, tables)
