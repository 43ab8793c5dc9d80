"""The shard planner: how many parameter servers the embedding tables need and where
every shard lives.

Pure: spec in, ``ShardPlan`` out (or ``PlanError``). No I/O, no environment.

Sizes. A table costs ``rows x dimension x dtype bytes x (1 + optimizer slots)``:
SGD has no slot, Adagrad one accumulator, FTRL two, (lazy) Adam two moments. Slots are
table-shaped and live on the same ps as their table shard.

Shard counts. A table gets ``ceil(rows / rows that fit in maxShardBytes)`` shards, so
no shard with its slots exceeds ``maxShardBytes`` (counted in rows because TensorFlow gives
the leftover rows to the first shards). When that is more than one shard it is rounded up to a
multiple of the ps count, so every ps holds the same number of shards of the table and the
memory is balanced (small tables stay whole). A shard never has fewer than one row.

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
``(shards of the tables before t + j) % num_ps``. ``tests/trainer/test_placement.py``
checks this against real TensorFlow processes.

Memory. A ps requests ``held x psMemoryHeadroom + psBaseMemory`` plus what a restore
briefly adds: the trainer restores one variable (a shard, or one of its slots) per ps at a
time, and reading one holds about ``RESTORE_COPIES`` copies of it. Measured with
``benchmarks/trainer_throughput.py --large-table`` (1.19 GiB of shards per ps in 213 MB
pieces: 1.87 GiB peak training, 2.47 GiB restoring; TensorFlow's own restore, which reads a
ps's whole state before assigning any, peaked at 3.14 GiB).

Strategy ``Auto``: MultiWorkerMirrored when all tables (with slots) fit in
``sharding.mirroredMaxBytes`` — every worker then holds a copy — else ParameterServer.
``ps: auto``: the fewest ps (up to ``maxReplicas``) whose memory request fits each ps's
memory budget (its resources' memory limit, else request, else ``defaultPsMemory``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from etj.api.plan import PsPlan, ShardPlan, TablePlan
from etj.api.quantity import human_bytes, quantity_bytes
from etj.api.spec import (
    DTYPE_BYTES,
    OPTIMIZER_SLOTS,
    EmbeddingTable,
    EmbeddingTrainingJobSpec,
    Strategy,
)


class PlanError(ValueError):
    """The tables cannot be planned as the spec asks; ``field`` names the field to change."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclass(frozen=True)
class _Table:
    """What the planner needs of one table."""

    name: str
    rows: int
    dimension: int
    dtype: str
    optimizer: str
    bytes_per_row: int

    @property
    def bytes(self) -> int:
        return self.rows * self.bytes_per_row

    @property
    def variable_bytes(self) -> int:
        """Bytes of the table alone, or of one of its slots (each the same size)."""
        return self.rows * self.dimension * DTYPE_BYTES[self.dtype]


def table_bytes_per_row(table: EmbeddingTable, default_optimizer: str) -> int:
    """Bytes of one row of the table together with its optimizer slots."""
    optimizer = str(table.optimizer or default_optimizer)
    return table.dimension * DTYPE_BYTES[table.dtype] * (1 + OPTIMIZER_SLOTS[optimizer])


def _tables(spec: EmbeddingTrainingJobSpec) -> list[_Table]:
    default_opt = str(spec.training.optimizer)
    return [
        _Table(
            name=t.name,
            rows=t.vocabulary_size,
            dimension=t.dimension,
            dtype=t.dtype,
            optimizer=str(t.optimizer or default_opt),
            bytes_per_row=table_bytes_per_row(t, default_opt),
        )
        for t in spec.model.embeddings
    ]


def resolve_strategy(spec: EmbeddingTrainingJobSpec) -> str:
    """The strategy the job runs with: ``Auto`` decided from the table sizes."""
    if spec.strategy != Strategy.AUTO.value:
        return str(spec.strategy)
    if spec.replicas.ps is not None:
        return Strategy.PARAMETER_SERVER.value
    total = sum(t.bytes for t in _tables(spec))
    if total <= quantity_bytes(spec.sharding.mirrored_max_bytes):
        return Strategy.MULTI_WORKER_MIRRORED.value
    return Strategy.PARAMETER_SERVER.value


def rows_per_shard(rows: int, shards: int) -> list[int]:
    """TensorFlow's "div" split of ``rows`` into ``shards`` partitions."""
    base, extra = divmod(rows, shards)
    return [base + (1 if i < extra else 0) for i in range(shards)]


def shard_count(table: _Table, max_shard_bytes: int, num_ps: int) -> int:
    """Shards of one table: under the shard size, balanced over ``num_ps`` when split."""
    # Count by rows, not bytes: TF gives the leftover rows to the first shards, so the
    # largest shard has ceil(rows / shards) rows and that is what must fit.
    max_rows = max_shard_bytes // table.bytes_per_row
    shards = max(1, math.ceil(table.rows / max_rows))
    if shards > 1 and num_ps > 1:
        shards = math.ceil(shards / num_ps) * num_ps
    return min(shards, table.rows)


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


def _place(tables: list[_Table], num_ps: int, max_shard: int) -> list[TablePlan]:
    counter = 0  # TensorFlow's global round-robin counter (see the module docstring)
    plans = []
    for t in tables:
        k = shard_count(t, max_shard, num_ps)
        plans.append(
            TablePlan(
                name=t.name,
                rows=t.rows,
                dimension=t.dimension,
                dtype=t.dtype,
                optimizer=t.optimizer,
                bytes=t.bytes,
                shards=k,
                rows_per_shard=rows_per_shard(t.rows, k),
                ps_of_shard=[(counter + j) % num_ps for j in range(k)],
            )
        )
        counter += k
    return plans


def _ps_plans(tables: list[TablePlan], num_ps: int, spec: EmbeddingTrainingJobSpec) -> list[PsPlan]:
    held = [0] * num_ps
    piece = [0] * num_ps
    names: list[list[str]] = [[] for _ in range(num_ps)]
    for t in tables:
        for j, ps in enumerate(t.ps_of_shard):
            held[ps] += t.shard_bytes(j)
            piece[ps] = max(piece[ps], t.piece_bytes(j))
            names[ps].append(f"{t.name}/{j}")
    return [
        PsPlan(
            index=i,
            bytes=held[i],
            memory_request_bytes=memory_request(held[i], piece[i], spec),
            shards=names[i],
        )
        for i in range(num_ps)
    ]


def _ps_plan_for(
    spec: EmbeddingTrainingJobSpec, tables: list[_Table], num_ps: int, max_shard: int
) -> ShardPlan:
    placed = _place(tables, num_ps, max_shard)
    return ShardPlan(
        strategy=Strategy.PARAMETER_SERVER.value,
        ps_replicas=num_ps,
        total_bytes=sum(t.bytes for t in tables),
        tables=placed,
        ps=_ps_plans(placed, num_ps, spec),
    )


def _fits(plan: ShardPlan, budget: int) -> bool:
    return all(p.memory_request_bytes <= budget for p in plan.ps)


def _check_rows_fit_shards(tables: list[_Table], max_shard: int) -> None:
    for i, t in enumerate(tables):
        if t.bytes_per_row > max_shard:
            raise PlanError(
                "spec.sharding.maxShardBytes",
                f"one row of table {t.name!r} (model.embeddings[{i}]) with its optimizer slots "
                f"is {t.bytes_per_row} bytes, more than maxShardBytes ({max_shard}); raise "
                "maxShardBytes",
            )


def _plan_ps(spec: EmbeddingTrainingJobSpec, tables: list[_Table]) -> ShardPlan:
    max_shard = quantity_bytes(spec.sharding.max_shard_bytes)
    _check_rows_fit_shards(tables, max_shard)
    budget = ps_memory_budget(spec)
    base = quantity_bytes(spec.sharding.ps_base_memory)
    if base >= budget:
        raise PlanError(
            "spec.replicas.ps.resources",
            f"the ps memory budget ({human_bytes(budget)}) does not exceed the memory of an "
            f"empty ps (sharding.psBaseMemory, {human_bytes(base)}); give the ps more memory",
        )
    ps_spec = spec.replicas.ps
    requested = ps_spec.replicas if ps_spec is not None else "auto"
    if isinstance(requested, int):
        plan = _ps_plan_for(spec, tables, requested, max_shard)
        worst = max(plan.ps, key=lambda p: p.memory_request_bytes)
        if worst.memory_request_bytes > budget:
            raise PlanError(
                "spec.replicas.ps",
                f"ps {worst.index} would need {human_bytes(worst.memory_request_bytes)} "
                f"(shards {human_bytes(worst.bytes)} x headroom + base + restore) but its memory is "
                f"{human_bytes(budget)}; use more ps (or replicas: auto), more ps memory, or a "
                "smaller maxShardBytes",
            )
        return plan
    max_ps = ps_spec.max_replicas if ps_spec is not None else 64
    for num_ps in range(1, max_ps + 1):
        plan = _ps_plan_for(spec, tables, num_ps, max_shard)
        if _fits(plan, budget):
            return plan
    total = sum(t.bytes for t in tables)
    raise PlanError(
        "spec.replicas.ps",
        f"the tables need {human_bytes(total)} with optimizer slots; they fit no set of up to "
        f"{max_ps} ps with {human_bytes(budget)} of memory each; raise replicas.ps.maxReplicas "
        "or the ps memory, or lower maxShardBytes so shards spread more evenly",
    )


def _plan_mirrored(spec: EmbeddingTrainingJobSpec, tables: list[_Table]) -> ShardPlan:
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
        strategy=Strategy.MULTI_WORKER_MIRRORED.value,
        ps_replicas=0,
        total_bytes=total,
        tables=[
            TablePlan(
                name=t.name,
                rows=t.rows,
                dimension=t.dimension,
                dtype=t.dtype,
                optimizer=t.optimizer,
                bytes=t.bytes,
                shards=1,
                rows_per_shard=[t.rows],
                ps_of_shard=[],
            )
            for t in tables
        ],
        ps=[],
        replica_memory_bytes=need,
    )


def build_plan(spec: EmbeddingTrainingJobSpec) -> ShardPlan:
    """The shard plan of a job; raises ``PlanError`` naming the field to change."""
    tables = _tables(spec)
    if resolve_strategy(spec) == Strategy.MULTI_WORKER_MIRRORED.value:
        return _plan_mirrored(spec, tables)
    return _plan_ps(spec, tables)
