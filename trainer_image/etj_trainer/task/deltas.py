"""Delta exports for serving (``spec.export.deltaSteps``/``deltaSeconds``): what a delta
holds, how it is computed from two states of the model and applied to one, and its files.

A delta is a pure function of two ``Snapshot``s — what serving holds of a model, in the key
space of a serving version's variables (``etj_trainer.task.serving_model``): per table its
shards' rows, the dense weights (the tower) by checkpoint key, and each dynamic table's
index (admitted keys ascending, their rows). No optimizer state: serving has none.
``changes(before, after)`` is, per table, the rows whose bytes differ (their ids — the
table's row numbers, shards counted in order — and values); the dense weights whole (they
are small); per dynamic table the keys evicted since (they left the index) and the keys
admitted or moved (their new rows). ``apply(before, changes(before, after))`` is ``after``
bit for bit, whatever the dtype (rows are compared as bytes: a NaN, -0.0 or a bfloat16 row
changes only when its bits do).

How the rows that changed are found, and why: by comparing every row with the previous
export's (the writer keeps that state: ``etj_trainer.task.versions``), not by marking rows
in the training step. The comparison is exact by construction — a row is in the delta iff
its bits changed, whichever update path (fused, dynamic, low-precision, row-wise, a
restore that rolled a row back) changed it — and it costs one read of the tables per
delta through the leader (what a full version reads) plus the previous state in the
leader's memory; the delta itself is as small as the rows changed. A touched-row set kept
by the step would read only the touched rows, but every update path of the step would
have to keep it, and a row a restore rolled back would be missed.

Files of one delta, a directory ``<deltas>/<base version>/<sequence>/`` (names:
``etj.api.export``): ``table-<i>.ids.npy``/``table-<i>.values.npy`` per table,
``dense-<n>.npy`` per dense weight, ``<table>.evicted.npy``/``.admitted.npy`` per dynamic
table, and the manifest ``delta.json`` naming its base version, sequence, step, the next
version when it closes the chain, and every file. ``write`` fsyncs each file, writes the
manifest last, and renames the directory into place: a reader never sees half a delta.
bfloat16 arrays are stored as their uint16 bits (as the export does).

Pure but for ``write``/``read`` (files): no TensorFlow, no clock, no training.
"""

from __future__ import annotations

import io
import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from etj.api.export import DELTA_MANIFEST, delta_name, staging_name
from etj.api.sizing import Dtype


class DeltaError(ValueError):
    """A delta that does not fit the state it is applied to or compared against."""


@dataclass
class Snapshot:
    """What serving holds of a model (see the module docstring)."""

    # Table number (spec order) -> its shards in row order.
    tables: dict[int, list[np.ndarray]]
    # Checkpoint key of a serving version ("tower/...") -> value.
    dense: dict[str, np.ndarray]
    # Dynamic table name -> (admitted keys ascending, their rows), int64.
    indexes: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)

    def table(self, i: int) -> np.ndarray:
        """Table ``i`` whole (its shards concatenated)."""
        return np.concatenate(self.tables[i]) if len(self.tables[i]) > 1 else self.tables[i][0]


@dataclass
class TableChanges:
    ids: np.ndarray  # int64 [n]: row numbers of the table, ascending
    values: np.ndarray  # [n, dimension], the table's dtype


@dataclass
class IndexChanges:
    evicted: np.ndarray  # int64 keys that left the index
    admitted: np.ndarray  # int64 [n, 2]: keys given a row (or a new one) and their rows


@dataclass
class Changes:
    tables: dict[int, TableChanges]
    dense: dict[str, np.ndarray]
    indexes: dict[str, IndexChanges]

    @property
    def rows(self) -> int:
        """Table rows the delta carries."""
        return sum(int(t.ids.shape[0]) for t in self.tables.values())

    @property
    def evicted(self) -> int:
        return sum(int(x.evicted.shape[0]) for x in self.indexes.values())


@dataclass
class Delta:
    """One delta: ``changes`` on top of version ``base`` and its deltas before ``sequence``."""

    base: int
    sequence: int
    step: int
    time: float
    changes: Changes
    # The version this delta brings a reader to (the last of a chain), or None.
    next_version: int | None = None
    # Table number -> name, for people reading the manifest.
    names: dict[int, str] = field(default_factory=dict)


def _bits(a: np.ndarray) -> np.ndarray:
    """Each row of ``a`` as bytes ``[rows, bytes per row]``."""
    a = np.ascontiguousarray(a)
    return a.view(np.uint8).reshape(a.shape[0], -1)


def _same_layout(what: str, a: np.ndarray, b: np.ndarray) -> None:
    if a.shape != b.shape or a.dtype != b.dtype:
        raise DeltaError(f"{what}: {a.dtype}{list(a.shape)} before, {b.dtype}{list(b.shape)} now")


def changed_rows(before: np.ndarray, after: np.ndarray) -> np.ndarray:
    """The rows (int64, ascending) whose bytes differ."""
    return np.flatnonzero(np.any(_bits(before) != _bits(after), axis=1)).astype(np.int64)


def index_changes(
    before: tuple[np.ndarray, np.ndarray], after: tuple[np.ndarray, np.ndarray]
) -> IndexChanges:
    """What turns index ``before`` into ``after`` (keys ascending, rows)."""
    bk, br = (np.asarray(x, np.int64) for x in before)
    ak, ar = (np.asarray(x, np.int64) for x in after)
    evicted = np.setdiff1d(bk, ak, assume_unique=True)
    if len(bk):
        at = np.minimum(np.searchsorted(bk, ak), len(bk) - 1)
        kept = (bk[at] == ak) & (br[at] == ar)
    else:
        kept = np.zeros(len(ak), bool)
    return IndexChanges(evicted, np.stack([ak[~kept], ar[~kept]], axis=1))


def changes(before: Snapshot, after: Snapshot) -> Changes:
    """What turns ``before`` into ``after`` (see the module docstring)."""
    if set(before.tables) != set(after.tables) or set(before.indexes) != set(after.indexes):
        raise DeltaError("the tables differ from the last export's")
    if set(before.dense) != set(after.dense):
        missing = sorted(set(before.dense) ^ set(after.dense))
        raise DeltaError(f"the dense weights differ from the last export's: {missing[:3]}")
    tables = {}
    for i, shards in after.tables.items():
        old = before.tables[i]
        if [s.shape for s in old] != [s.shape for s in shards]:
            raise DeltaError(
                f"table {i}: shards {[s.shape for s in old]} before, now "
                f"{[s.shape for s in shards]}"
            )
        ids, values, start = [], [], 0
        for n, (a, b) in enumerate(zip(old, shards, strict=True)):
            _same_layout(f"table {i} shard {n}", a, b)
            rows = changed_rows(a, b)
            ids.append(rows + start)
            values.append(b[rows])
            start += b.shape[0]
        tables[i] = TableChanges(np.concatenate(ids), np.concatenate(values))
    indexes = {n: index_changes(before.indexes[n], x) for n, x in after.indexes.items()}
    return Changes(tables, dict(after.dense), indexes)


def apply(snapshot: Snapshot, delta: Changes) -> Snapshot:
    """``snapshot`` with ``delta`` applied (a new snapshot; ``snapshot`` is left as it was)."""
    if set(delta.tables) != set(snapshot.tables):
        raise DeltaError(
            f"the delta has tables {sorted(delta.tables)}, the model {sorted(snapshot.tables)}"
        )
    tables = {}
    for i, shards in snapshot.tables.items():
        t = delta.tables[i]
        sizes = [s.shape[0] for s in shards]
        starts = np.cumsum([0, *sizes])
        if len(t.ids) and (t.ids[0] < 0 or t.ids[-1] >= starts[-1]):
            raise DeltaError(f"table {i}: rows up to {int(t.ids[-1])}, it has {starts[-1]}")
        out = []
        for n, shard in enumerate(shards):
            lo, hi = np.searchsorted(t.ids, [starts[n], starts[n + 1]])
            copy = shard.copy()
            if hi > lo:
                _same_layout(f"table {i} rows", copy[:1], t.values[lo : lo + 1])
                copy[t.ids[lo:hi] - starts[n]] = t.values[lo:hi]
            out.append(copy)
        tables[i] = out
    indexes = {}
    for name, (keys, rows) in snapshot.indexes.items():
        x = delta.indexes.get(name)
        if x is None:
            raise DeltaError(f"dynamic table {name}: the delta has no index changes")
        gone = np.isin(keys, np.concatenate([x.evicted, x.admitted[:, 0]]))
        k = np.concatenate([keys[~gone], x.admitted[:, 0]])
        r = np.concatenate([rows[~gone], x.admitted[:, 1]])
        order = np.argsort(k, kind="stable")
        indexes[name] = (k[order], r[order])
    return Snapshot(tables, dict(delta.dense), indexes)


def differences(a: Snapshot, b: Snapshot) -> list[str]:
    """Where two snapshots differ, bit for bit (empty: identical)."""
    out = []
    for what, x, y in (
        ("tables", a.tables, b.tables),
        ("dense weights", a.dense, b.dense),
        ("indexes", a.indexes, b.indexes),
    ):
        if set(x) != set(y):
            out.append(f"{what}: {sorted(x)} vs {sorted(y)}")
    for i in set(a.tables) & set(b.tables):
        for n, (s, t) in enumerate(zip(a.tables[i], b.tables[i], strict=False)):
            if not _identical(s, t):
                out.append(f"table {i} shard {n}")
        if len(a.tables[i]) != len(b.tables[i]):
            out.append(f"table {i}: {len(a.tables[i])} vs {len(b.tables[i])} shards")
    out += [
        f"dense {k}"
        for k in sorted(set(a.dense) & set(b.dense))
        if not _identical(a.dense[k], b.dense[k])
    ]
    for name in set(a.indexes) & set(b.indexes):
        if not all(_identical(s, t) for s, t in zip(a.indexes[name], b.indexes[name], strict=True)):
            out.append(f"index {name}")
    return out


def _identical(a: np.ndarray, b: np.ndarray) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


# ---- files ---------------------------------------------------------------------------------


def _stored(a: np.ndarray) -> tuple[np.ndarray, str]:
    dtype = str(a.dtype)
    return (a.view(np.uint16), dtype) if dtype == Dtype.BFLOAT16 else (a, dtype)


def _restored(a: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == Dtype.BFLOAT16:
        import ml_dtypes  # with TensorFlow; only a bfloat16 table needs it

        return a.view(ml_dtypes.bfloat16)
    if str(a.dtype) != dtype:
        raise DeltaError(f"an array stored as {a.dtype}, its manifest says {dtype}")
    return a


def _put(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _npy(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, a, allow_pickle=False)
    return buf.getvalue()


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def manifest_and_files(delta: Delta) -> tuple[dict[str, Any], dict[str, bytes]]:
    """The manifest of ``delta`` and its other files (name -> bytes)."""
    files: dict[str, bytes] = {}

    def put(name: str, a: np.ndarray) -> tuple[str, str]:
        stored, dtype = _stored(a)
        files[name] = _npy(stored)
        return name, dtype

    c = delta.changes
    tables = []
    for i, t in sorted(c.tables.items()):
        ids, _ = put(f"table-{i}.ids.npy", t.ids)
        values, dtype = put(f"table-{i}.values.npy", t.values)
        tables.append(
            {
                "table": i,
                "name": delta.names.get(i, str(i)),
                "rows": len(t.ids),
                "ids": ids,
                "values": values,
                "dtype": dtype,
            }
        )
    dense = []
    for n, (key, value) in enumerate(sorted(c.dense.items())):
        name, dtype = put(f"dense-{n}.npy", value)
        dense.append({"key": key, "file": name, "dtype": dtype})
    dynamic = []
    for n, (name, x) in enumerate(sorted(c.indexes.items())):
        evicted, _ = put(f"index-{n}.evicted.npy", x.evicted)
        admitted, _ = put(f"index-{n}.admitted.npy", x.admitted)
        dynamic.append(
            {
                "name": name,
                "evicted": evicted,
                "admitted": admitted,
                "evictedIds": len(x.evicted),
                "admittedIds": len(x.admitted),
            }
        )
    doc = {
        "base": delta.base,
        "sequence": delta.sequence,
        "step": delta.step,
        "time": delta.time,
        "nextVersion": delta.next_version,
        "rows": c.rows,
        "tables": tables,
        "denseWeights": dense,
        "dynamic": dynamic,
    }
    return doc, files


def write(parent: Path, delta: Delta) -> Path:
    """Write ``delta`` as ``parent/<sequence>`` (``parent``: its base version's directory of
    deltas), whole or not at all; its path."""
    parent.mkdir(parents=True, exist_ok=True)
    final = parent / delta_name(delta.sequence)
    staging = parent / staging_name(delta.sequence, os.getpid())
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    try:
        doc, files = manifest_and_files(delta)
        for name, data in files.items():
            _put(staging / name, data)
        # The manifest last: a directory with it names only files already on disk.
        _put(staging / DELTA_MANIFEST, json.dumps(doc, indent=1).encode())
        _fsync_dir(staging)
        # One rename: the delta appears whole (same directory, same filesystem).
        os.rename(staging, final)
        _fsync_dir(parent)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return final


def _local_bytes(path: str) -> bytes:
    return Path(path).read_bytes()


def read(directory: str, read_bytes: Callable[[str], bytes] = _local_bytes) -> Delta:
    """The delta in ``directory`` (``read_bytes`` reads one of its files by path)."""
    root = directory.rstrip("/")
    doc = json.loads(read_bytes(f"{root}/{DELTA_MANIFEST}"))

    def load(name: str, dtype: str | None = None) -> np.ndarray:
        a = np.load(io.BytesIO(read_bytes(f"{root}/{name}")), allow_pickle=False)
        return a if dtype is None else _restored(a, dtype)

    tables = {
        int(t["table"]): TableChanges(load(t["ids"]), load(t["values"], t["dtype"]))
        for t in doc["tables"]
    }
    dense = {d["key"]: load(d["file"], d["dtype"]) for d in doc["denseWeights"]}
    indexes = {
        x["name"]: IndexChanges(load(x["evicted"]), load(x["admitted"]).reshape(-1, 2))
        for x in doc["dynamic"]
    }
    return Delta(
        base=int(doc["base"]),
        sequence=int(doc["sequence"]),
        step=int(doc["step"]),
        time=float(doc["time"]),
        changes=Changes(tables, dense, indexes),
        next_version=doc["nextVersion"],
        names={int(t["table"]): t["name"] for t in doc["tables"]},
    )
