"""From a sample of a delimited file (or of a Parquet file's rows as text) to a complete
job: the delimiter, whether there is a header, each column's kind (label, dense, categorical, multi-valued) and cardinality, the
tables' sizes. What ``etj init --from-data`` writes.

Lines are cut as the trainer cuts them (RFC 4180 quoting with Python's ``csv``: a field
quoted whole may hold the delimiter), so a quoted title with a comma in it is one column;
a sample whose quotes are not RFC 4180 (a quote inside an unquoted field) is read with
``quote: none``, as the trainer then must.

Heuristics a person would apply, in order: a column named like a label (``label``,
``click``, ``clicked``, ``target``, ``y``) or the first column holding only 0/1 is the
label (a ``rating`` column of 0.5..5 becomes a label with threshold 4 when nothing else
is); a column whose values never repeat (a row key) is left out; a column whose values are split by ``|`` (or ``;`` inside comma files) is
multi-valued; integer columns named ``...id`` and numbers past int64 are categorical ids;
fixed-width integer codes (Avazu's ``hour`` such as 14102100) are categorical; other numbers are dense (``log1p`` for non-negative counts
spanning a wide range, ``standardize`` with the sample's mean/std otherwise); everything
else is a categorical string. Tables get ~4x the estimated distinct values (hashing
collisions stay rare) and a dimension growing with the fourth root of their size.

Pure: takes lines, returns data; no I/O.
"""

from __future__ import annotations

import csv
import math
import re
from dataclasses import dataclass
from typing import Any

from etj.api.constants import API_VERSION, KIND
from etj.api.roles import Role

LABEL_NAMES = ("label", "click", "clicked", "is_click", "target", "y")
DELIMITERS = ("\t", ",", ";", "|")
MULTI_DELIMITERS = ("|",)
INT64_MAX = 2**63 - 1
_NUMBER = re.compile(r"^\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*$")
_INT = re.compile(r"^\s*[+-]?\d+\s*$")


@dataclass
class Column:
    """What the sample says about one column, and what it becomes."""

    name: str
    kind: str  # label | dense | categorical | skip (a unique row key)
    distinct: int
    empty: float  # share of empty fields
    estimate: int  # distinct values expected in the whole file
    settings: dict[str, Any]  # the feature's other fields (transform, delimiter, ...)


def _well_formed(delimiter: str) -> re.Pattern[str]:
    """A line the trainer reads with quoting: each field unquoted (no quote) or quoted
    whole (``""`` for a quote inside)."""
    d = re.escape(delimiter)
    field = f'(?:[^"{d}]*|"(?:[^"]|"")*")'
    return re.compile(f"{field}(?:{d}{field})*")


def quoting(lines: list[str], delimiter: str) -> str:
    """``"`` when every sample line holding a quote is RFC 4180 quoted, else ``none``."""
    pattern = _well_formed(delimiter)
    quoted = [line for line in lines if '"' in line]
    return '"' if all(pattern.fullmatch(line) for line in quoted) else "none"


def split_lines(lines: list[str], delimiter: str, quote: str = '"') -> list[list[str]]:
    """Each line's fields, cut as the trainer cuts them."""
    if quote == "none":
        return [line.split(delimiter) for line in lines]
    return [next(csv.reader([line], delimiter=delimiter), [""]) for line in lines]


def sniff_delimiter(lines: list[str]) -> str:
    """The delimiter splitting every sample line into the same number (>1) of fields
    (fields quoted whole count once, whatever they hold)."""
    best, score = ",", 0
    for d in DELIMITERS:
        rows = split_lines([line for line in lines if line], d, quoting(lines, d))
        counts = {len(r) for r in rows}
        if len(counts) == 1 and (n := counts.pop()) > 1 and n > score:
            best, score = d, n
    return best


def _is_number(v: str) -> bool:
    return bool(_NUMBER.match(v))


def has_header(first: list[str], rows: list[list[str]]) -> bool:
    """A first line of names: no number where later lines mostly hold numbers, or all
    cells look like identifiers and differ from every later row's cells."""
    for j, cell in enumerate(first):
        later = [r[j] for r in rows if j < len(r) and r[j]]
        if (
            cell.strip()
            and later
            and not _is_number(cell)
            and sum(map(_is_number, later)) > 0.9 * len(later)
        ):
            return True
    return all(re.match(r"^[A-Za-z_][A-Za-z0-9_.-]*$", c) for c in first) and not any(
        r == first for r in rows
    )


def _label_of(names: list[str], columns: list[list[str]]) -> tuple[int | None, float | None]:
    """The label's column index, and a threshold when it is a rating."""
    for i, n in enumerate(names):
        if n.lower() in LABEL_NAMES:
            return i, None
    for i, values in enumerate(columns):
        present = {v.strip() for v in values if v.strip()}
        if present and present <= {"0", "1"}:
            return i, None
    for i, n in enumerate(names):
        if n.lower() == "rating":
            return i, 4.0
    return None, None


def _estimate(distinct: int, present: int, sample_rows: int, total_rows: int) -> int:
    """Distinct values in the whole file from a sample: a column whose values barely
    repeat grows with the rows; one that repeats a lot is near its full size."""
    if present == 0:
        return 1
    repeat = distinct / present
    scale = max(total_rows / max(sample_rows, 1), 1.0)
    return max(distinct, int(distinct * (1 + (scale - 1) * repeat)))


def profile(
    names: list[str], rows: list[list[str]], total_rows: int, lists: frozenset[str] = frozenset()
) -> list[Column]:
    """Each column's kind and cardinality from the sample rows; ``lists`` names columns
    that are lists (Parquet), their values joined with ``|``: multi-valued whatever the
    sample holds."""
    width = len(names)
    columns = [[r[j] if j < len(r) else "" for r in rows] for j in range(width)]
    label, threshold = _label_of(names, columns)
    out = []
    for j, (name, values) in enumerate(zip(names, columns, strict=True)):
        present = [v.strip() for v in values if v.strip()]
        distinct = len(set(present))
        empty = 1 - len(present) / max(len(values), 1)
        estimate = _estimate(distinct, len(present), len(rows), total_rows)
        kind, settings = _kind(name, present, distinct, j == label, threshold)
        if name in lists and j != label:
            longest = max((len([p for p in v.split("|") if p]) for v in present), default=1)
            kind, settings = "categorical", {"delimiter": "|", "maxLength": min(longest, 1024)}
        if settings.get("delimiter"):
            parts = {p for v in present for p in v.split(settings["delimiter"]) if p}
            estimate = _estimate(len(parts), len(present), len(rows), total_rows)
        out.append(Column(name, kind, distinct, empty, estimate, settings))
    return out


def _kind(
    name: str, present: list[str], distinct: int, is_label: bool, threshold: float | None
) -> tuple[str, dict[str, Any]]:
    if is_label:
        return "label", ({"threshold": threshold} if threshold is not None else {})
    fractional = bool(present) and all(_is_number(v) for v in present)
    fractional = fractional and not all(_INT.match(v) for v in present)
    if len(present) >= 50 and distinct == len(present) and not fractional:
        # A unique key (a row id): nothing to learn from. Measurements with fractions
        # (a price) rarely repeat either, and are features.
        return "skip", {}
    for d in MULTI_DELIMITERS:
        with_d = sum(1 for v in present if d in v)
        # Two values (F and M, yes and no) are one choice each, never a list.
        if distinct > 2 and with_d > 0.05 * len(present):
            longest = max(len([p for p in v.split(d) if p]) for v in present)
            return "categorical", {"delimiter": d, "maxLength": min(max(longest, 1), 1024)}
    numbers = present and all(_is_number(v) for v in present)
    if not numbers:
        return "categorical", {}
    integers = all(_INT.match(v) for v in present)
    if integers and any(abs(int(v)) > INT64_MAX for v in present):
        return "categorical", {}  # ids past int64: hashed as text
    if integers and (name.lower().endswith("id") or name.lower().endswith("_id")):
        return "categorical", {"valueType": "int"}
    if integers and len({len(v) for v in present}) == 1 and len(present[0]) >= 4:
        return "categorical", {}  # fixed-width codes such as 14102100 (an hour), not counts
    values = [float(v) for v in present]
    low, high = min(values), max(values)
    if integers and low >= -5 and high - low > 100:
        return "dense", {"transform": "log1p"}
    mean = sum(values) / len(values)
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
    if std == 0:
        return "dense", {}
    return "dense", {"transform": "standardize", "mean": round(mean, 6), "std": round(std, 6)}


def table_name(column: str, taken: set[str]) -> str:
    """A valid, unique table name (lowercase, digits, '_', a letter first) for a column."""
    base = re.sub(r"[^a-z0-9_]", "_", column.lower()).strip("_") or "t"
    if not base[0].isalpha():
        base = f"t_{base}"
    base = base[:60]
    name, n = base, 2
    while name in taken:
        name, n = f"{base}_{n}", n + 1
    taken.add(name)
    return name


def vocabulary_size(estimate: int) -> int:
    return max(16, 4 * estimate + 1)


def dimension(vocabulary: int) -> int:
    return int(min(64, max(4, round(2 * vocabulary**0.25))))


def build_job(
    name: str,
    pattern: str,
    lines: list[str],
    total_rows: int,
    compression: str = "auto",
) -> tuple[dict[str, Any], list[Column]]:
    """A complete EmbeddingTrainingJob manifest for the sampled file, and the profile."""
    lines = [line.rstrip("\r\n") for line in lines if line.strip()]
    if len(lines) < 2:
        raise ValueError("the sample needs at least two non-empty lines")
    delimiter = sniff_delimiter(lines[:200])
    quote = quoting(lines, delimiter)
    split = split_lines(lines, delimiter, quote)
    header = has_header(split[0], split[1:])
    names = [c.strip() for c in split[0]] if header else [f"c{i}" for i in range(len(split[0]))]
    rows = split[1:] if header else split
    files: dict[str, Any] = {
        "pattern": pattern,
        "format": "csv",
        "delimiter": delimiter,
        "header": header,
        "compression": compression,
    }
    if quote == "none":
        files["quote"] = "none"
    if not header:
        files["columns"] = names
    return _job(name, profile(names, rows, total_rows), files)


def build_parquet_job(
    name: str,
    pattern: str,
    names: list[str],
    rows: list[list[str]],
    total_rows: int,
    lists: frozenset[str] = frozenset(),
) -> tuple[dict[str, Any], list[Column]]:
    """The job for a sampled Parquet file: ``rows`` of text cells (nulls empty, list
    columns named in ``lists`` joined with ``|``), ``total_rows`` from its metadata."""
    if len(rows) < 2:
        raise ValueError("the sample needs at least two rows")
    files = {"pattern": pattern, "format": "parquet"}
    return _job(name, profile(names, rows, total_rows, lists), files)


def _job(
    name: str, cols: list[Column], files: dict[str, Any]
) -> tuple[dict[str, Any], list[Column]]:
    if not any(c.kind == "label" for c in cols):
        raise ValueError(
            "no label column found (name one label/click/target, or a 0/1 column); "
            "edit the written job's features"
        )
    taken: set[str] = set()
    tables, features = [], []
    for c in cols:
        if c.kind == "skip":
            continue
        feature: dict[str, Any] = {"name": c.name, "kind": c.kind, **c.settings}
        if c.kind == "categorical":
            vocab = vocabulary_size(c.estimate)
            table = table_name(c.name, taken)
            tables.append({"name": table, "vocabularySize": vocab, "dimension": dimension(vocab)})
            feature["table"] = table
        features.append(feature)
    if not tables:
        raise ValueError("no categorical column found: etj trains embedding models")
    job = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": name},
        "spec": {
            "strategy": "Auto",
            "replicas": {Role.WORKER.value: {"replicas": 2}},
            "model": {"embeddings": tables, "features": features, "hiddenUnits": [256, 128]},
            "data": {"source": "files", "files": files, "maxBadRecords": 0},
            "training": {
                "batchSizePerReplica": 1024,
                "epochs": 1,
                "optimizer": "adagrad",
                "learningRate": 0.05,
            },
            # Several pods share the checkpoints: a ReadWriteMany claim etj creates.
            "checkpoint": {"storage": {"size": "10Gi"}, "everySteps": 1000, "keep": 3},
        },
    }
    return job, cols
