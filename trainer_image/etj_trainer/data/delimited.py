"""Delimited text input (CSV, TSV, any one-character delimiter; with or without a header;
plain or gzip; RFC 4180 quoting) for jobs with ``spec.model.features``.

Lines are read with ``tf.data.TextLineDataset`` (numbered per file; it drops the ``\r``
of CRLF line ends, and every other ``\r``), batched, then split and checked as whole
batches: one vectorised pass per batch and never an op that fails on a bad value, so every
bad line is found and reported as ``<file>:<line>: <what>`` (or skipped and counted under
``data.maxBadRecords``).

Quoting (``data.files.quote``, default ``"``; ``none`` reads ``"`` as data): a field quoted
whole may hold the delimiter and line breaks (RFC 4180, as Python's ``csv`` reads it:
a record goes on over the next lines while a quote is open), ``""`` inside it is one
quote, ``""`` alone is an empty field, and a UTF-8 byte-order mark before a file's first
line is dropped. A record is numbered by its first line, so ``DataError`` line numbers
count the file's lines. A quote still open at the end of the file is a ``DataError``
naming the line it opened on, as is a quote inside an unquoted field or text after a
closing quote (what TensorFlow's own CSV parsers reject too). A line break inside a
quoted field is read as ``\n`` (TextLineDataset drops ``\r``; Python keeps ``\r\n``).

``data.files.nullValues`` tokens (``NA``, ``NULL``, ...) are read as empty fields, in
every column (``DelimitedParser.parse_cells``, so Parquet's text cells too): missing
values taking the feature's default; a label's is a bad record named as written.

A header that is not UTF-8 (a UTF-16 export, Latin-1 bytes in a column name) stops before
training with the encoding to convert from (``etj.api.textfiles``); Latin-1 bytes in data
cells are data (hashed as they are).

Records over several lines are joined per file before sharding, by a ``scan`` over the
file's batches carrying a record still open at a batch's end (``join_quoted_lines``): a
batch without a quote and with nothing carried passes as it is (one RE2 pass per line, in
a parallel map), and the parser reuses the join's flags of which records hold a quote.

Why these ops: most lines of a click log have no quote, and ``tf.strings.split`` (one
split of the batch) is the fastest way to cut them (about twice as fast as
``tf.io.decode_csv``). Lines that hold a quote are parsed by TensorFlow's own RFC 4180
parser, ``tf.io.decode_csv`` (``use_quote_delim``), but only once an RE2 match of the
whole line has shown it well-formed with the declared number of fields: ``decode_csv``
fails a whole batch on its first bad record without naming the line, and a job must name
every bad line (or skip it). ``CsvDataset`` has the same all-or-nothing failure, and
hand-written Python parsing would run outside the graph (no ParameterServer workers).

Reads and parses; knows nothing of strategies or the model.
"""

from __future__ import annotations

import csv
import gzip
import io
from typing import Any

import tensorflow as tf

from etj.api.features import MISSING_ROW, Feature, ValueType
from etj.api.spec import FileData
from etj.api.textfiles import encoding_problem
from etj_trainer.data import features as fx
from etj_trainer.data.batch import DENSE_KEY, LABEL_KEY, input_key
from etj_trainer.data.records import (
    BAD_KEY,
    Check,
    DataError,
    Sharding,
    check_file_start,
    checked,
    compression_of,
    quoted,
    sharded_batches,
)

SHUFFLE_BATCHES = 16
BOM = "\ufeff"


def first_line(path: str, files: FileData) -> str:
    """The first line of a file (decompressed), without its line break."""
    with tf.io.gfile.GFile(path, "rb") as raw:
        # A header is short: the first 1 MiB (of the decompressed stream) holds it.
        head = raw.read(1 << 20)
    if compression_of(path, files) == "GZIP":
        try:
            head = gzip.GzipFile(fileobj=io.BytesIO(head)).read1(1 << 20)
        except (OSError, EOFError) as e:
            raise DataError(f"{path}:1: cannot decompress: {e}") from None
    problem = encoding_problem(head.split(b"\n", 1)[0], header=files.header)
    if problem:
        raise DataError(f"{path}:1: {problem}")
    line = head.split(b"\n", 1)[0].decode("utf-8", errors="replace").rstrip("\r")
    return line.removeprefix(BOM)


def split_header(path: str, line: str, files: FileData) -> list[str]:
    """A header (or first) line's fields, read with the data's quoting rules."""
    quoting = csv.QUOTE_NONE if files.quote == "none" else csv.QUOTE_MINIMAL
    try:
        rows = list(csv.reader([line], delimiter=files.delimiter, quoting=quoting, strict=True))
    except csv.Error as e:
        raise DataError(f"{path}:1: {e} (data.files.quote: none reads quotes as data)") from None
    return rows[0] if rows else [""]


def preflight(files: list[str], data: FileData, fs: fx.FeatureSet, max_bad: int = 0) -> list[str]:
    """The column names, after checking every file's start: not empty, compressed as
    declared, a header with every declared column (the same header in every file), or as
    many fields as ``data.files.columns`` names. Without a header, a first line of another
    shape (scikit-learn's ``569,30,malignant,benign`` above 31 columns) is a bad record
    like any other: let through while ``max_bad`` can take one per file, where the parser
    counts it."""
    columns = list(data.columns or [])
    reference = ""
    other_shape: list[tuple[str, int]] = []
    for path in files:
        check_file_start(path, data)
        line = first_line(path, data)
        fields = split_header(path, line, data)
        if data.header:
            if not line.strip():
                raise DataError(f"{path}:1: the header line is empty")
            if not columns:
                columns, reference = [c.strip() for c in fields], path
                missing = [f.source for f in fs.features if f.source not in columns]
                if missing:
                    raise DataError(
                        f"{path}:1: the header lacks the declared column(s) "
                        f"{', '.join(missing)} (it has: {', '.join(columns[:50])})"
                    )
            elif [c.strip() for c in fields] != columns:
                raise DataError(f"{path}:1: the header differs from the one of {reference}")
        elif len(fields) != len(columns):
            other_shape.append((path, len(fields)))
    if len(other_shape) > max_bad:
        path, found = other_shape[max_bad]
        skip = (
            f" (data.maxBadRecords {max_bad} skips fewer first lines than "
            f"{len(other_shape)} files have)"
            if max_bad
            else "; or, if line 1 is no record, data.maxBadRecords: 1 skips it"
        )
        raise DataError(
            f"{path}:1: expected {len(columns)} fields (data.files.columns), found "
            f"{found}; is the delimiter {data.delimiter!r} right?{skip}"
        )
    twice = [c for c in dict.fromkeys(f.source for f in fs.features) if columns.count(c) > 1]
    if twice:
        where = [i + 1 for i, c in enumerate(columns) if c == twice[0]]
        raise DataError(
            f"{reference or 'data.files.columns'}:1: the header names column {twice[0]!r} "
            f"{len(where)} times (columns {', '.join(map(str, where))}): rename all but one "
            "in the file (a feature reads one column)"
        )
    if not data.header:
        missing = [f.source for f in fs.features if f.source not in columns]
        if missing:
            raise DataError(f"data.files.columns lacks the feature(s) {', '.join(missing)}")
    return columns


def _maybe_quoted(line: tf.Tensor) -> tf.Tensor:
    """Which lines of a batch may hold a quote: every line RE2 cannot show quote-free. One
    DFA pass over the text, no copy of it; a line with bytes of invalid UTF-8 (which RE2
    matches with no character class) counts as one that may, so a quote is never missed."""
    return tf.logical_not(tf.strings.regex_full_match(line, '[^"]*'))


def join_quoted_lines(batches: tf.data.Dataset) -> tf.data.Dataset:
    """One file's numbered batches of lines as batches of records ``(file, number, record,
    quoted)``: a line leaving a quote open (an odd number of quotes since the record began)
    goes on with the next line, joined by ``\n``, across batches; a record is numbered by
    its first line; ``quoted``: whether a record holds a quote (for ``Fields``, which then
    scans no line again). A record still open at the end of the file is emitted as it is,
    for the parser to name.

    Which lines may hold a quote is found in a parallel ``map`` (``_maybe_quoted``); a
    ``scan`` then carries the open record from batch to batch, and a final empty batch
    flushes it (``scan`` has no end-of-input hook). The lines before a batch's first that
    may hold a quote, when nothing is carried into it, pass as they are (all of a batch
    without a quote: a click log's every batch); the rest go through ``_join``. Chosen by
    data flow, as slices, not by ``tf.cond``: a ``cond`` holding the join cost about
    0.1 CPU-s per 60,000 rows never taking it (``benchmarks/csv_quotes.py``)."""
    flagged = batches.map(
        lambda file, number, line: (file, number, line, _maybe_quoted(line)),
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=True,
    )
    end = tf.data.Dataset.from_tensors(
        (
            tf.zeros([0], tf.string),
            tf.zeros([0], tf.int64),
            tf.zeros([0], tf.string),
            tf.zeros([0], tf.bool),
        )
    )
    # (file, carried text, its first line number, carrying)
    start = (tf.constant(""), tf.constant(""), tf.constant(0, tf.int64), tf.constant(False))

    def step(state: tuple, batch: tuple) -> tuple[tuple, tuple]:
        carrying = state[3]
        file, number, line, maybe = batch
        # How many lines pass as they are: those before the first that may hold a quote,
        # none when a record is carried into the batch.
        before = tf.equal(tf.cumsum(tf.cast(maybe, tf.int32)), 0)
        lead = tf.reduce_sum(tf.cast(before, tf.int32)) * (1 - tf.cast(carrying, tf.int32))
        name = tf.concat([file[:1], tf.reshape(state[0], [1])], 0)[0]
        at_end = tf.equal(tf.size(line), 0)  # the final empty batch
        carry, (j_file, j_number, j_line, j_quoted) = _join(
            state, name, at_end, number[lead:], line[lead:]
        )
        out = (
            tf.concat([file[:lead], j_file], 0),
            tf.concat([number[:lead], j_number], 0),
            tf.concat([line[:lead], j_line], 0),
            tf.concat([tf.zeros_like(maybe[:lead]), j_quoted], 0),
        )
        return carry, out

    return flagged.concatenate(end).scan(start, step)


def _join(
    state: tuple, name: tf.Tensor, at_end: tf.Tensor, number: tf.Tensor, line: tf.Tensor
) -> tuple[tuple, tuple]:
    """One step of ``join_quoted_lines`` over the lines that do not pass as they are (none,
    in a batch without a quote): their records, whether each holds a quote, and what is
    carried on. Data flow only (no ``tf.cond``): zero lines and nothing carried cost a few
    ops on empty tensors."""
    _, text, first, carrying = state
    k = tf.cast(carrying, tf.int32)
    lines = tf.concat([tf.reshape(text, [1])[:k], line], 0)
    numbers = tf.concat([tf.reshape(first, [1])[:k], number], 0)
    quotes = tf.strings.split(lines, '"').row_lengths() - 1
    open_after = tf.math.floormod(tf.cumsum(quotes), 2) == 1
    ends = tf.logical_not(open_after)
    record = tf.cumsum(tf.cast(ends, tf.int64), exclusive=True)
    # Every record ends on a line leaving no quote open, but the last may still be open.
    last_open = tf.reduce_any(open_after[-1:])
    count = tf.reduce_sum(tf.cast(ends, tf.int64)) + tf.cast(last_open, tf.int64)
    joined = tf.strings.unsorted_segment_join(lines, record, count, separator="\n")
    starts = tf.math.unsorted_segment_min(numbers, record, count)
    quoted = tf.math.unsorted_segment_sum(quotes, record, count) > 0
    still_open = tf.logical_and(last_open, tf.logical_not(at_end))  # nothing carried past it
    done = count - tf.cast(still_open, tf.int64)
    carry = (
        name,
        tf.concat([joined[done:], [""]], 0)[0],
        tf.concat([starts[done:], tf.zeros([1], tf.int64)], 0)[0],
        still_open,
    )
    return carry, (tf.fill([done], name), starts[:done], joined[:done], quoted[:done])


def _char(c: str) -> str:
    """``c`` as an RE2 escape, valid inside and outside a character class."""
    return f"\\x{{{ord(c):x}}}"


def _valid_utf8(lines: tf.Tensor) -> tf.Tensor:
    """Lines with each invalid UTF-8 byte replaced (U+FFFD), for RE2 to match them (Latin-1
    text in a log is data, not bad quoting); the cells keep the original bytes."""
    return tf.strings.unicode_transcode(lines, "UTF-8", "UTF-8", errors="replace")


class Fields:
    """Cuts a batch of lines into ``[batch, columns]`` text cells, with the checks naming
    the lines that cannot be cut (a wrong number of fields, bad quoting)."""

    def __init__(self, columns: int, delimiter: str, quote: str):
        self.columns = columns
        self.delimiter = delimiter
        self.quote = quote != "none"
        d = _char(delimiter)
        # An unquoted field, or one quoted whole ("" inside is one quote).
        field = f'(?:[^"{d}]*|"(?:[^"]|"")*")'
        self.well_formed = f"{field}(?:{d}{field})*"
        self.quoted_field = '"(?:[^"]|"")*"'
        # What a line that decode_csv must not see is replaced with: N empty fields.
        self.empty_row = '""' + delimiter * (columns - 1)

    def __call__(
        self, line: tf.Tensor, quoted: tf.Tensor | None = None
    ) -> tuple[tf.Tensor, list[Check]]:
        """``quoted``: which lines hold a quote, when known (``join_quoted_lines`` says);
        else found here (``_maybe_quoted``: a line RE2 cannot show quote-free)."""
        n = self.columns
        fields = tf.strings.split(line, self.delimiter)
        found = fields.row_lengths()
        cells = fields.to_tensor(default_value="", shape=[None, n])
        if not self.quote:
            return cells, [(tf.not_equal(found, n), lambda i: self._count(found[i]))]
        # Lines with a quote (few, in most logs) are cut again by decode_csv, once RE2
        # has shown them well-formed with n fields (decode_csv would fail the batch). A
        # batch without a quote (all of a click log) costs no scan when the join has
        # flagged its lines, one DFA pass when not.
        has_quote = _maybe_quoted(line) if quoted is None else quoted
        no_quote = tf.zeros_like(found, dtype=tf.bool)
        cells, bad_quoting = tf.cond(
            tf.reduce_any(has_quote),
            lambda: self._quoted(line, cells, has_quote),
            lambda: (cells, no_quote),
        )
        wrong_count = tf.logical_and(tf.not_equal(found, n), tf.logical_not(has_quote))
        return cells, [
            (bad_quoting, lambda i: self._quoting(line[i])),
            (wrong_count, lambda i: self._count(found[i])),
        ]

    def _quoted(
        self, line: tf.Tensor, cells: tf.Tensor, has_quote: tf.Tensor
    ) -> tuple[tf.Tensor, tf.Tensor]:
        """The cells with the lines ``has_quote`` names cut by decode_csv; which of those
        are not well-formed with n fields (a line named without a quote in it, Latin-1
        text, is well-formed when its count is right, and decode_csv cuts it as a split)."""
        n = self.columns
        where = tf.where(has_quote)
        quoted = tf.gather_nd(line, where)
        text = _valid_utf8(quoted)
        outside = tf.strings.regex_replace(text, self.quoted_field, "")
        quoted_found = tf.strings.split(outside, self.delimiter).row_lengths()
        ok = tf.logical_and(
            tf.strings.regex_full_match(text, self.well_formed), tf.equal(quoted_found, n)
        )
        decoded = tf.io.decode_csv(
            tf.where(ok, quoted, self.empty_row),
            record_defaults=[[""]] * n,
            field_delim=self.delimiter,
            use_quote_delim=True,
        )
        cells = tf.tensor_scatter_nd_update(cells, where, tf.stack(decoded, axis=1))
        shape = tf.shape(has_quote, out_type=tf.int64)
        return cells, tf.scatter_nd(where, tf.logical_not(ok), shape)

    def _count(self, found: tf.Tensor) -> tf.Tensor:
        return tf.strings.join(
            [f"expected {self.columns} fields, found ", tf.strings.as_string(found)]
        )

    def _quoting(self, line: tf.Tensor) -> tf.Tensor:
        """What is wrong with one line holding a quote (built only for a bad line)."""
        line = _valid_utf8(line)
        quotes = tf.strings.length(tf.strings.regex_replace(line, '[^"]', ""))
        outside = tf.strings.regex_replace(line, self.quoted_field, "")
        found = tf.size(tf.strings.split(outside, self.delimiter))
        none = "or set data.files.quote: none if quotes are data"
        return tf.case(
            [
                (
                    tf.equal(quotes % 2, 1),
                    lambda: tf.constant(
                        "a quote opened here is left open to the end of the file (a quoted "
                        f"field ends with a quote; {none})"
                    ),
                ),
                (
                    tf.logical_not(tf.strings.regex_full_match(line, self.well_formed)),
                    lambda: tf.strings.join(
                        [
                            "a quote inside an unquoted field or after a closing one (quote "
                            f'a field whole, with "" for each quote in it, {none}): ',
                            quoted(line, 120),
                        ]
                    ),
                ),
            ],
            default=lambda: self._count(tf.cast(found, tf.int64)),
            exclusive=False,
        )


class DelimitedParser:
    """Parses a batch of numbered lines into model input; bad lines stop or are skipped."""

    def __init__(
        self,
        fs: fx.FeatureSet,
        columns: list[str],
        delimiter: str,
        max_bad: int,
        quote: str = '"',
        null_values: list[str] | None = None,
    ):
        self.fs = fs
        self.columns = columns
        self.delimiter = delimiter
        self.max_bad = max_bad
        self.null_values = list(null_values or [])
        self.index = {name: i for i, name in enumerate(columns)}
        self.fields = Fields(len(columns), delimiter, quote)

    def __call__(
        self,
        file: tf.Tensor,
        number: tf.Tensor,
        line: tf.Tensor,
        quoted: tf.Tensor | None = None,
    ) -> dict[str, Any]:
        """``quoted`` (optional): which lines hold a quote (``join_quoted_lines``' flags)."""
        # A UTF-8 byte-order mark may start a file (batches are cut within files: a
        # file's first line is the first of its batch).
        line = tf.cond(
            tf.reduce_any(tf.equal(number[:1], 1)),  # (a batch may be empty: joined on)
            lambda: tf.concat([tf.strings.regex_replace(line[:1], "^\\x{feff}", ""), line[1:]], 0),
            lambda: line,
        )
        # Blank lines (a trailing newline, an empty last line) are not records.
        text = tf.strings.length(tf.strings.strip(line)) > 0
        file, number, line = (tf.boolean_mask(t, text) for t in (file, number, line))
        if quoted is not None:
            quoted = tf.boolean_mask(quoted, text)
        cells, checks = self.fields(line, quoted)
        return self.parse_cells(file, number, cells, checks)

    def parse_cells(
        self, file: tf.Tensor, number: tf.Tensor, cells: tf.Tensor, checks: list[Check]
    ) -> dict[str, Any]:
        """Model input from ``[batch, columns]`` text cells (also what other formats that
        yield text cells use, so every format checks, hashes and transforms alike)."""
        out: dict[str, Any] = {}
        raw = cells
        if self.null_values:
            cells = self._nulls_emptied(cells)
        out[LABEL_KEY] = self._label(cells, raw, checks)
        if self.fs.dense:
            out[DENSE_KEY] = tf.stack([self._dense(f, cells, checks) for f in self.fs.dense], 1)
        for f in self.fs.categorical:
            out[input_key(f.name)] = self._categorical(f, cells, checks)
        return checked(out, checks, file, number, self.max_bad)

    def _nulls_emptied(self, cells: tf.Tensor) -> tf.Tensor:
        """The cells with each ``data.files.nullValues`` token (spaces around it aside)
        emptied: a missing value, read as an empty field is. Costs nothing without tokens
        (not called), one comparison of every cell per token with them."""
        stripped = tf.strings.strip(cells)
        null = tf.zeros_like(stripped, dtype=tf.bool)
        for token in self.null_values:
            null = tf.logical_or(null, tf.equal(stripped, token))
        return tf.where(null, tf.constant(""), cells)

    def _cell(self, feature: Feature, cells: tf.Tensor) -> tf.Tensor:
        return cells[:, self.index[feature.source]]

    def _number(self, feature: Feature, cells: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        """(value, empty, not-a-number) of a numeric column."""
        cell = self._cell(feature, cells)
        empty = tf.equal(tf.strings.length(tf.strings.strip(cell)), 0)
        number = tf.strings.regex_full_match(cell, fx.NUMBER_RE)
        value = tf.strings.to_number(tf.where(number, cell, "0"), tf.float32)
        return value, empty, tf.logical_and(tf.logical_not(empty), tf.logical_not(number))

    def _label(self, cells: tf.Tensor, raw: tf.Tensor, checks: list[Check]) -> tf.Tensor:
        """The label (0/1) of each row; ``raw``: the cells as the file has them (a null
        token is named as it is written)."""
        f = self.fs.label
        cell = self._cell(f, cells)
        shown = self._cell(f, raw)
        if f.positive is not None:
            value, bad = fx.text_label(cell, f)
            checks.append(
                (
                    bad,
                    lambda i: tf.strings.join(
                        [f"label {f.name} is not {f.label_values}: ", quoted(shown[i])]
                    ),
                )
            )
            return value
        value, empty, nan = self._number(f, cells)
        checks.append(
            (
                tf.logical_or(empty, nan),
                lambda i: tf.strings.join([f"label {f.name} is not a number: ", quoted(shown[i])]),
            )
        )
        usable = fx.label_ok(value, f)
        need = f.label_values
        checks.append(
            (
                tf.logical_not(tf.logical_or(usable, tf.logical_or(empty, nan))),
                lambda i: tf.strings.join([f"label {f.name} is not {need}: ", quoted(shown[i])]),
            )
        )
        return fx.label(value, f)

    def _dense(self, f: Feature, cells: tf.Tensor, checks: list[Check]) -> tf.Tensor:
        value, empty, nan = self._number(f, cells)
        cell = self._cell(f, cells)
        checks.append(
            (
                nan,
                lambda i: tf.strings.join(
                    [f"dense column {f.name} is not a number: ", quoted(cell[i])]
                ),
            )
        )
        value = tf.where(empty, tf.constant(f.default, tf.float32), value)
        return fx.transform(value, f)

    def _categorical(self, f: Feature, cells: tf.Tensor, checks: list[Check]) -> tf.Tensor:
        cell = self._cell(f, cells)
        values: Any = fx.split_values(cell, f) if f.multi_valued else tf.strings.strip(cell)
        empty = None
        if f.stored_type == ValueType.INT:
            values, empty = self._integers(f, cell, values, checks)
        rows = self.fs.rows(f, values)
        if isinstance(rows, tf.RaggedTensor):
            return fx.padded(rows, f.values_per_example)
        if empty is not None:
            rows = tf.where(empty, tf.constant(MISSING_ROW, tf.int64), rows)
        return tf.reshape(rows, [-1, 1])

    @staticmethod
    def _integers(
        f: Feature, cell: tf.Tensor, values: Any, checks: list[Check]
    ) -> tuple[Any, tf.Tensor]:
        """int64 ids of an integer column (ragged when multi-valued) and which are empty."""
        ragged = isinstance(values, tf.RaggedTensor)
        flat = values.flat_values if ragged else values
        empty = tf.equal(tf.strings.length(flat), 0)
        ok = tf.logical_or(empty, tf.strings.regex_full_match(flat, fx.INT_RE))
        not_int = (
            tf.logical_not(tf.reduce_all(values.with_flat_values(ok), axis=1))
            if ragged
            else tf.logical_not(ok)
        )
        checks.append(
            (
                not_int,
                lambda i: tf.strings.join(
                    [
                        f"column {f.name} is not an integer id (ids past int64: valueType "
                        "string): ",
                        quoted(cell[i]),
                    ]
                ),
            )
        )
        # An empty id is valid (the reserved row) but no number: parse "0" in its place.
        numbers = tf.strings.to_number(
            tf.where(tf.logical_and(ok, tf.logical_not(empty)), flat, "0"), tf.int64
        )
        return (values.with_flat_values(numbers) if ragged else numbers), empty


def dataset(
    files: list[str],
    data: FileData,
    fs: fx.FeatureSet,
    columns: list[str],
    batch_size: int,
    max_bad: int,
    sharding: Sharding,
) -> tf.data.Dataset:
    """Batches of parsed lines from this shard of the files."""

    def read(name: tf.Tensor, compression: tf.Tensor) -> tf.data.Dataset:
        return tf.data.TextLineDataset(name, compression_type=compression)

    skip = 1 if data.header else 0
    join = join_quoted_lines if data.quote != "none" else None
    batches = sharded_batches(
        files, data, read, skip, sharding, batch_size, SHUFFLE_BATCHES, join=join
    )
    parse = DelimitedParser(fs, columns, data.delimiter, max_bad, data.quote, data.null_values)
    parsed = batches.map(parse, num_parallel_calls=tf.data.AUTOTUNE)
    # A batch of blank lines only (the end of a file) is no batch; one whose lines were
    # all skipped still carries their count.
    return parsed.filter(lambda b: tf.logical_or(tf.size(b[LABEL_KEY]) > 0, b[BAD_KEY] > 0))
