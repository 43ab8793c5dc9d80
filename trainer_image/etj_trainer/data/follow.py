"""Following a location (``data.files.follow``): which files landed after the position a job
has trained to, and one file's batches as a graph.

The chief (or the one process) lists the pattern and decides which files come next
(``new_files``): every name that sorts after the last file trained, in name order. The
batches of one file (``file_batches``) are built inside the function that trains it, from
the file's name as a tensor, so under ParameterServer the coordinator names a file in a
closure's arguments and the worker that runs the closure reads it: the coordinator ships
graphs, not Python readers, to its workers.

A file is read whole, every record (the last batch may be short): it must be complete when
its name appears (write it aside and rename it into place, as object stores and
``gsutil``/``mv`` do). A file whose name sorts at or before the position when it lands is
never trained (``late_files`` names them, for a warning): name order is the contract.

This module reads files and lists the pattern; it decides nothing about when to poll or
checkpoint and knows no strategy.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import tensorflow as tf

from etj.api.spec import DataSpec, FileFormat, ModelSpec
from etj_trainer.data.pipeline import _csv_header, _csv_parser, _tfrecord_parser

__all__ = ["file_batches", "late_files", "list_files", "new_files"]


def new_files(names: Iterable[str], after: str) -> list[str]:
    """The names that sort after ``after`` (the last file trained; "" before the first), in
    name order: the files to train next."""
    return sorted(n for n in set(names) if n > after)


def late_files(names: Iterable[str], after: str, known: set[str]) -> list[str]:
    """Names at or before ``after`` that are not in ``known`` (the names listed before):
    files that landed out of name order, which a following job never trains."""
    return sorted(n for n in set(names) if n <= after and n not in known)


def list_files(pattern: str) -> list[str]:
    """The files the pattern matches now (a missing directory matches none)."""
    try:
        return list(tf.io.gfile.glob(pattern))
    except tf.errors.NotFoundError:
        return []


def csv_header(data: DataSpec, first_file: str) -> list[str]:
    """The column names of a followed csv location: ``data.files.columns``, else the header
    of its first file (every file must have the same one)."""
    assert data.files is not None
    return list(data.files.columns) if data.files.columns else _csv_header(first_file)


def file_batches(
    model: ModelSpec,
    data: DataSpec,
    name: tf.Tensor,
    batch_size: int,
    header: list[str] | None = None,
) -> tf.data.Dataset:
    """Every record of the file ``name`` (a string tensor), in file order, in batches of
    ``batch_size`` (the last one shorter), parsed as ``etj_trainer.data.pipeline`` parses
    etj's own layout. ``header``: the columns of a csv file (``csv_header``)."""
    assert data.files is not None
    files = data.files
    compression: Any = "GZIP" if files.compression == "gzip" else ""
    if files.compression == "auto":
        gz = tf.strings.regex_full_match(name, r".*\.gz")
        compression = tf.where(gz, tf.constant("GZIP"), tf.constant(""))
    parse: Any
    if files.format == FileFormat.TFRECORD:
        records = tf.data.TFRecordDataset(name, compression_type=compression)
        parse = _tfrecord_parser(model, files.label_key)
    else:
        assert header is not None
        records = tf.data.TextLineDataset(name, compression_type=compression)
        if files.header:
            records = records.skip(1)
        parse = _csv_parser(model, files.label_key, header)
    return records.batch(batch_size).map(parse).prefetch(2)
