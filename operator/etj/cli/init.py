"""``etj init --from-data FILE``: sample a local file (delimited text, gzip or not, or
Parquet: pyarrow, the ``parquet`` extra) and write a job YAML that validates.

Thin: reads the sample and the file's size, calls ``etj.cli.from_data.build_job``, validates the
result with the operator's own checks and prints the shard plan. The inference lives in
``etj.cli.from_data`` (pure, unit-tested).
"""

from __future__ import annotations

import gzip
import itertools
import os
import sys
from pathlib import Path
from typing import Any

import click

from etj.api.textfiles import encoding_problem
from etj.cli.files import reading


def _sample(path: Path, lines: int) -> tuple[list[str], int]:
    """The first ``lines`` lines and an estimate of the file's line count."""
    gz = path.suffix == ".gz"
    opener: Any = gzip.open if gz else open
    # Streamed, not read whole: a click log can be many gigabytes.
    with reading(str(path)):
        # (reading() names a file that cannot be read or decompressed.)
        with opener(path, "rb") as raw:
            head = raw.readline(1 << 20)
        problem = encoding_problem(head.rstrip(b"\r\n"))
        if problem:
            raise click.ClickException(f"{path}:1: {problem}")
        # utf-8-sig: a byte-order mark is no part of the first column's name. newline="":
        # a line break inside a quoted field stays in its line's text for the csv reader.
        with opener(path, "rt", encoding="utf-8-sig", errors="replace", newline="") as f:
            sample = list(itertools.islice(f, lines))
        size = os.path.getsize(path) * (4 if gz else 1)  # gzip of text: ~4x smaller
    per_line = max(sum(len(x.encode()) for x in sample) / max(len(sample), 1), 1.0)
    return sample, max(len(sample), int(size / per_line))


def _is_parquet(path: Path) -> bool:
    with reading(str(path)), open(path, "rb") as f:
        return f.read(4) == b"PAR1"


def _parquet_sample(path: Path, rows: int) -> tuple[list[str], list[list[str]], int, frozenset]:
    """Column names, the first ``rows`` rows as text cells (nulls empty, lists joined
    with ``|``, booleans 0/1), the file's row count and its list columns."""
    try:
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.parquet as pq
    except ImportError:
        raise click.ClickException(
            "reading Parquet needs pyarrow: pip install 'etj[parquet]'"
        ) from None
    try:
        reader = pq.ParquetFile(path)
        batch = next(reader.iter_batches(batch_size=rows), None)
    except Exception as e:  # pyarrow's errors: a damaged file
        raise click.ClickException(f"{path}: cannot read as Parquet: {e}") from None
    if batch is None:
        raise click.ClickException(f"{path}: no rows")
    names, lists, columns = list(batch.schema.names), set(), []
    for name, array in zip(names, batch.columns, strict=True):
        if pa.types.is_dictionary(array.type):
            array = array.dictionary_decode()
        t = array.type
        if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
            lists.add(name)
            array = pc.binary_join(pc.cast(array, pa.list_(pa.string())), "|")
        elif pa.types.is_boolean(t):
            array = pc.cast(array, pa.int8())
        try:
            array = pc.cast(array, pa.string())
        except pa.ArrowNotImplementedError:
            raise click.ClickException(f"{path}: column {name} is {t}: not a feature") from None
        columns.append([v if v is not None else "" for v in array.to_pylist()])
    sample = [list(r) for r in zip(*columns, strict=True)]
    return names, sample, reader.metadata.num_rows, frozenset(lists)


@click.command("init")
# Checked when read (etj.cli.files): one line naming the file, not click's usage screen.
@click.option("--from-data", "data", required=True, type=click.Path(readable=False))
@click.option("--name", default=None, help="Job name (default: from the file name).")
@click.option("--pattern", default=None, help="data.files.pattern (default: the file's path).")
@click.option(
    "--sample", "lines", default=10000, show_default=True, help="Lines (Parquet: rows) to read."
)
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None)
def init(data: str, name: str | None, pattern: str | None, lines: int, output: str | None) -> None:
    """Write a complete job for FILE: columns' kinds, table sizes, a plan that validates."""
    import re

    from etj.cli.from_data import build_job, build_parquet_job, decision_table, job_yaml
    from etj.core.crd import to_yaml
    from etj.core.validation import validate_manifest

    path = Path(data)
    stem = path.name.split(".")[0].lower()
    job_name = name or (re.sub(r"[^a-z0-9-]+", "-", stem).strip("-")[:40].strip("-") or "job")
    if not job_name[0].isalpha():
        job_name = f"job-{job_name}"[:40]
    notes: list[str] = []
    try:
        if _is_parquet(path):
            names, rows, total, lists = _parquet_sample(path, lines)
            sample: list = rows
            job, columns = build_parquet_job(
                job_name, pattern or str(path.resolve()), names, rows, total, lists
            )
        else:
            sample, total = _sample(path, lines)
            job, columns = build_job(
                job_name, pattern or str(path.resolve()), sample, total, notes=notes
            )
    except ValueError as e:
        raise click.ClickException(f"{path}: {e}") from None
    result = validate_manifest(job)
    if result.problems:
        raise click.ClickException("; ".join(str(p) for p in result.problems))
    text = "# Written by `etj init --from-data`; review the features before training.\n"
    text += "".join(f"# cannot train on this file: {n}\n" for n in notes)
    text += job_yaml(job, columns, to_yaml)
    if output:
        Path(output).write_text(text)
    else:
        sys.stdout.write(text)
    out = sys.stderr if not output else sys.stdout
    print(f"{len(sample)} lines (rows) sampled of ~{total}", file=out)
    print(decision_table(columns[:200]), file=out)
    for n in notes:
        print(f"cannot train on this file: {n}", file=out)
    if result.plan is not None:
        print(f"plan: {result.plan.strategy}, {result.plan.ps_replicas} ps", file=out)
