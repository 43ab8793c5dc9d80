"""What every file format shares: finding the files, compression, numbering records, the
``DataError`` a person can act on, and skipping/counting bad records.

Bad data never ends in a bare TensorFlow stack trace. A check inside a ``tf.data``
pipeline fails with ``tf.debugging.Assert`` carrying ``<file>:<line>: <what>`` between
markers; ``data_error_from`` turns that (wherever it surfaces: a worker under
ParameterServer, the coordinator, a local iterator) back into ``DataError`` with exactly
that text. Checks that need no record (no file matches, an empty file, gzip that is not
gzip, a header without a declared column) run before training (``preflight`` of each
format) and raise ``DataError`` directly.

No format-specific parsing here, and no strategies.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from typing import Any

import tensorflow as tf

from etj.api.spec import FileData
from etj.api.trainer_reasons import REASON_DATA_ERROR

BAD_KEY = "bad_records"
_START, _END = "<<etj-data-error>>", "<</etj-data-error>>"
_MARKED = re.compile(re.escape(_START) + r"(.*?)" + re.escape(_END), re.S)
GZIP_MAGIC = b"\x1f\x8b"
# parse_example names the record ("Name: <file>:<n>") and the feature of a type mismatch.
_PARSE_ERROR = re.compile(r"Name: ([^,]+), (?:Feature|Key): ([^\s.,]+)[.,]?\s*(.*)", re.S)


class DataError(ValueError):
    """The data cannot be read as the spec says: ``<file>:<line or record>: <what>``."""

    reason = REASON_DATA_ERROR


def data_error_from(error: BaseException) -> DataError | None:
    """The ``DataError`` a pipeline check raised, from the TensorFlow error carrying it."""
    if isinstance(error, DataError):
        return error
    match = _MARKED.search(str(error))
    if match:
        # tf.debugging.Assert prints strings escaped; undo the escapes it adds.
        text = match.group(1).replace("\\'", "'").replace('\\"', '"').replace("\\t", "\t")
        return DataError(text)
    text = str(error)
    parsed = _PARSE_ERROR.search(text)
    if parsed and isinstance(error, tf.errors.InvalidArgumentError):
        where, key, what = parsed.groups()
        detail = " ".join(what.split("[[")[0].split())[:300]
        return DataError(f"{where}: feature {key}: {detail or 'cannot be parsed as declared'}")
    if isinstance(error, tf.errors.DataLossError) or "corrupted record" in text.lower():
        return DataError(f"unreadable data: {text.splitlines()[0][:500]}")
    return None


def marked(description: tf.Tensor) -> tf.Tensor:
    """A description wrapped so ``data_error_from`` finds it in any error text."""
    return tf.strings.join([_START, description, _END])


def files_of(pattern: str) -> list[str]:
    files = sorted(tf.io.gfile.glob(pattern))
    if not files:
        raise DataError(f"{pattern}: matches no file (data.files.pattern)")
    return files


def compression_of(path: str, files: FileData) -> str:
    """TensorFlow's compression_type for one file: 'GZIP' or ''."""
    if files.compression == "gzip" or (files.compression == "auto" and path.endswith(".gz")):
        return "GZIP"
    return ""


def check_file_start(path: str, files: FileData) -> bytes:
    """The first bytes of a file; DataError when it is empty or its compression is wrong."""
    try:
        with tf.io.gfile.GFile(path, "rb") as f:
            head = f.read(2)
    except tf.errors.OpError as e:
        raise DataError(f"{path}: cannot read: {e.message}") from None
    if not head:
        raise DataError(f"{path}:1: empty file")
    gzip = compression_of(path, files) == "GZIP"
    if gzip and head != GZIP_MAGIC:
        raise DataError(f"{path}:1: not a gzip file (compression is {files.compression})")
    if not gzip and head == GZIP_MAGIC:
        raise DataError(
            f"{path}:1: the file is gzip-compressed but data.files.compression is "
            f"{files.compression}: set compression: gzip"
        )
    return head


@dataclass(frozen=True)
class Sharding:
    """Which part of the files one input pipeline reads, and how: shard ``shard_index`` of
    ``num_shards``, shuffled with ``seed`` (None: differently in every process) and
    repeated forever when ``repeat`` (else once, in file order, deterministic)."""

    num_shards: int = 1
    shard_index: int | tf.Tensor = 0  # a tensor: a worker index bound where the pipeline runs
    seed: int | None = None
    repeat: bool = True


def sharded_batches(
    files: list[str],
    data: FileData,
    reader: Any,
    skip: int,
    sharding: Sharding,
    batch_size: int,
    shuffle: int,
    join: Any = None,
) -> tf.data.Dataset:
    """This shard's batches ``(file [n], number [n], record [n])``, numbers from 1 (the
    file's first line or record; ``skip`` header lines are dropped).

    ``join`` (optional) maps one file's numbered batches to its records' batches, in file
    order and before any sharding (records that span lines, such as a quoted field holding
    a line break, are whole only when every line before them has been seen); a record is
    numbered by its first line. Its batches may carry more per-record components after
    the three (``delimited.join_quoted_lines``: which records hold a quote).

    Batches are cut within each file, so no per-record tf.data op runs: the record
    numbering costs one ``range`` per batch (a per-record ``map`` or ``filter`` would cost
    more than the parse). Whole files are sharded when there are at least as many files as
    shards, else every ``num_shards``-th batch of each file. When repeated: file order shuffled, four
    files interleaved batch by batch, and a buffer of ``shuffle`` batches shuffled.
    """
    repeat, seed = sharding.repeat, sharding.seed
    names = tf.data.Dataset.from_tensor_slices((files, [compression_of(f, data) for f in files]))

    by_file = len(files) >= sharding.num_shards

    def one(name: tf.Tensor, compression: tf.Tensor) -> tf.data.Dataset:
        batches = reader(name, compression).skip(skip).batch(batch_size).enumerate()
        by_batch = not by_file and sharding.num_shards > 1
        if by_batch and join is None:
            # Every num_shards-th batch of each file: disjoint whatever order the files
            # come in and however often they repeat.
            batches = batches.shard(sharding.num_shards, sharding.shard_index)

        def numbered(i: tf.Tensor, records: tf.Tensor) -> tuple[tf.Tensor, ...]:
            n = tf.shape(records, out_type=tf.int64)[0]
            first = i * batch_size + 1 + skip
            return tf.fill([n], name), tf.range(first, first + n), records

        numbered_batches = batches.map(numbered)
        if join is None:
            return numbered_batches
        joined = join(numbered_batches)
        # Sharded after joining: every shard reads the whole file to find where records
        # start, and parses only its own batches of them.
        return joined.shard(sharding.num_shards, sharding.shard_index) if by_batch else joined

    if by_file and sharding.num_shards > 1:
        names = names.shard(sharding.num_shards, sharding.shard_index)
    if repeat:
        names = names.shuffle(len(files), seed=seed, reshuffle_each_iteration=True).repeat()
    batches = names.interleave(
        one, cycle_length=min(4, len(files)), num_parallel_calls=tf.data.AUTOTUNE
    )
    if repeat and shuffle:
        batches = batches.shuffle(shuffle, seed=seed)
    return batches


Check = tuple[tf.Tensor, Any]  # (bad rows [batch], index -> what is wrong)


def checked(
    out: dict[str, Any], checks: list[Check], file: tf.Tensor, number: tf.Tensor, max_bad: int
) -> dict[str, Any]:
    """A parsed batch after its checks: a row is bad when any check says so, and is named
    ``<file>:<number>: <what the first failing check says>``."""
    masks = tf.stack([mask for mask, _ in checks], axis=1)
    bad = tf.reduce_any(masks, axis=1)

    def describe(i: tf.Tensor) -> tf.Tensor:
        which = tf.argmax(tf.cast(masks[i], tf.int32), output_type=tf.int32)
        what = tf.switch_case(which, [lambda c=c: c[1](i) for c in checks])
        return tf.strings.join([location(file[i], number[i]), ": ", what])

    return strict_or_skip(out, bad, describe, max_bad)


def first_bad(bad: tf.Tensor, describe: Any) -> tf.Tensor:
    """The description of the first bad row of a batch (``describe(index)``)."""
    return describe(tf.argmax(tf.cast(bad, tf.int32), output_type=tf.int32))


def strict_or_skip(
    out: dict[str, tf.Tensor], bad: tf.Tensor, describe: Any, max_bad: int
) -> dict[str, tf.Tensor]:
    """Stop at the first bad row (``max_bad == 0``), or drop the bad rows and count them
    under ``BAD_KEY`` (the limit is checked over the whole job by the chief)."""
    if max_bad == 0:
        any_bad = tf.reduce_any(bad)
        # The description is built only for a batch that has a bad row (and never for an
        # empty batch, where there is no row to name).
        text = tf.cond(any_bad, lambda: marked(first_bad(bad, describe)), lambda: tf.constant(""))
        check = tf.debugging.Assert(tf.logical_not(any_bad), [text], summarize=1)
        with tf.control_dependencies([check]):
            out = {k: tf.identity(v) for k, v in out.items()}
        out[BAD_KEY] = tf.constant(0, tf.int64)
        return out
    any_bad = tf.reduce_any(bad)

    # Name the first skipped record of the batch in the log (stderr of the worker).
    def log() -> tf.Tensor:
        note = tf.strings.join(["skipped bad record: ", first_bad(bad, describe)])
        with tf.control_dependencies([tf.print(note, output_stream=sys.stderr)]):
            return tf.constant(True)

    logged = tf.cond(any_bad, log, lambda: tf.constant(False))
    keep = tf.logical_not(bad)
    with tf.control_dependencies([logged]):
        out = {k: tf.boolean_mask(v, keep) for k, v in out.items()}
    out[BAD_KEY] = tf.reduce_sum(tf.cast(bad, tf.int64))
    return out


def quoted(cells: tf.Tensor, limit: int = 60) -> tf.Tensor:
    """A cell as shown in an error: quoted, cut at ``limit`` bytes."""
    return tf.strings.join(["'", tf.strings.substr(cells, 0, limit), "'"])


def location(file: tf.Tensor, number: tf.Tensor) -> tf.Tensor:
    return tf.strings.join([file, ":", tf.strings.as_string(number)])
