"""From a sample of a delimited file (or of a Parquet file's rows as text) to a complete
job: the delimiter, whether there is a header, each column's kind (label, dense,
categorical, multi-valued) and cardinality, the tables' sizes, and why. What ``etj init
--from-data`` writes: always a job that validates (unless nothing can be read), with the
columns it leaves out written commented out with the reason, and a question in the job
where it had to guess.

Lines are cut as the trainer cuts them (RFC 4180 quoting with Python's ``csv``: a field
quoted whole may hold the delimiter and line breaks, a record going on while a quote is
open), so a quoted title with a comma in it is one column; a sample whose quotes are not
RFC 4180 (a quote inside an unquoted field) is read with ``quote: none``, as the trainer
then must.

Heuristics a person would apply, in order. The label: a column named like one (``label``,
``click``, ``target``, ``y``, ``class``, ``income``, ...), else the first column of 0/1,
else a rating (``rating``, ``stars``, 1..5: a ``threshold`` with a comment), else the
first two-valued column, else the last column with few values (asked in the job).
A label of values other than 0/1 becomes ``positive: [...]`` (``yes``, ``true``, ``>50K``,
``1``; else the rarer value, asked). Null tokens (``NA``, ``NaN``, ... pandas' list) found
in a column of numbers become ``data.files.nullValues`` and are missing values everywhere
from then on, as the trainer reads them; sample rows left without a label set
``data.maxBadRecords`` (said beside the label). A column whose values never repeat (a
row key), one with no name, every column of a name the header gives twice and an empty
column are left out (written commented out). Values split by ``|`` are multi-valued; integer columns named ``...id``,
integers with few distinct values (codes) and numbers past int64 are categorical ids;
fixed-width integer codes (Avazu's ``hour`` such as 14102100) are categorical; other
numbers are dense (``log1p`` for non-negative counts spanning a wide range,
``standardize`` with the sample's mean/std otherwise); everything else is a categorical
string. A file of numbers only gets its integer column of fewest values (or, with none,
its number column of fewest values, hashed as text) as an id: a CTR model needs a table.
Tables get ~4x the estimated distinct values (hashing collisions stay rare) and a
dimension growing with the fourth root of their size. Names that are no valid feature
name become one (``Review Text`` -> ``review_text``), ``column:`` keeping the header's.

Pure: takes lines, returns data; no I/O.
"""

from __future__ import annotations

import copy
import csv
import json
import math
import re
from dataclasses import dataclass
from typing import Any

from etj.api.constants import API_VERSION, KIND
from etj.api.features import FeatureKind, Transform, ValueType
from etj.api.roles import Role
from etj.api.sizing import Optimizer
from etj.api.spec import FileFormat, Strategy

LABEL_NAMES = (
    "label",
    "click",
    "clicked",
    "is_click",
    "target",
    "y",
    "class",
    "income",
    "outcome",
    "result",
    "churn",
    "survived",
    "sentiment",
    "recommended",
)
# Values that mean 1 when a label holds text (compared lowercase).
POSITIVE_WORDS = ("1", "yes", "y", "true", "t", "positive", "pos", ">50k", "spam", "click")
RATING_NAMES = ("rating", "ratings", "stars", "score", "overall")
FEW_CODES = 32  # integer columns with at most this many values are ids (codes), not numbers
# Tokens that mean "no value" in exported tables: pandas' read_csv default na_values
# (pandas 2.x, pandas._libs.parsers.STR_NA_VALUES) without the empty string, which is
# missing anyway. What people's files hold after pandas wrote them or R wrote NA; found in
# a column of numbers, they are written into data.files.nullValues.
NULL_TOKENS = frozenset(
    {
        "-1.#IND", "1.#QNAN", "1.#IND", "-1.#QNAN", "#N/A N/A", "#N/A", "N/A", "n/a", "NA",
        "<NA>", "#NA", "NULL", "null", "NaN", "-NaN", "nan", "-nan", "None",
    }
)  # fmt: skip
_FEATURE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.:/-]*$")
DELIMITERS = ("\t", ",", ";", "|", " ")
MULTI_DELIMITERS = ("|",)
INT64_MAX = 2**63 - 1
_NUMBER = re.compile(r"^\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*$")
_INT = re.compile(r"^\s*[+-]?\d+\s*$")


@dataclass
class Column:
    """What the sample says about one column, and what it becomes."""

    name: str  # a valid feature name
    kind: str  # label | dense | categorical | skip (left out: ``why`` says why)
    distinct: int
    empty: float  # share of empty fields
    estimate: int  # distinct values expected in the whole file
    settings: dict[str, Any]  # the feature's other fields (transform, delimiter, ...)
    why: str = ""  # the reason for the kind, as the decision table shows it
    header: str = ""  # the column as the file names it ("" without a header)
    comment: str = ""  # a note or question written in the job beside the feature
    ignored: bool = False  # not even written commented out (an empty trailing column)
    missing: int = 0  # sample rows with no value here (empty or a null token)


def _well_formed(delimiter: str) -> re.Pattern[str]:
    """A line the trainer reads with quoting: each field unquoted (no quote) or quoted
    whole (``""`` for a quote inside)."""
    d = re.escape(delimiter)
    field = f'(?:[^"{d}]*|"(?:[^"]|"")*")'
    return re.compile(f"{field}(?:{d}{field})*")


def records(lines: list[str]) -> list[str]:
    """Lines joined into records as the trainer joins them: a line leaving a quote open
    goes on with the next (``\n`` between); a record the sample cut off is dropped."""
    out: list[str] = []
    open_record: list[str] = []
    for line in lines:
        open_record.append(line)
        if "\n".join(open_record).count('"') % 2 == 0:
            out.append("\n".join(open_record))
            open_record = []
    return out


def quoting(lines: list[str], delimiter: str) -> str:
    """``"`` when every sample record holding a quote is RFC 4180 quoted, else ``none``."""
    pattern = _well_formed(delimiter)
    joined = records(lines)
    quoted = [r for r in joined if '"' in r]
    if sum(map(len, joined)) < 0.5 * sum(map(len, lines)):
        return "none"  # a stray quote swallowed the sample: quotes are data here
    return '"' if all(pattern.fullmatch(r) for r in quoted) else "none"


def split_lines(lines: list[str], delimiter: str, quote: str = '"') -> list[list[str]]:
    """Each record's fields, cut as the trainer cuts them (lines joined into records
    first when quoting)."""
    if quote == "none":
        return [line.split(delimiter) for line in lines]
    return [next(csv.reader([r], delimiter=delimiter), [""]) for r in records(lines)]


def sniff_delimiter(lines: list[str]) -> str:
    """The delimiter splitting (nearly) every sample record into the same number (>1) of
    fields (fields quoted whole count once, whatever they hold)."""
    best, score = ",", 0
    for d in DELIMITERS:
        rows = split_lines([line for line in lines if line], d, quoting(lines, d))
        counts = [len(r) for r in rows]
        if not counts:
            continue
        n = max(set(counts), key=counts.count)
        if n > 1 and counts.count(n) >= 0.95 * len(counts) and n > score:
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


def _present(values: list[str]) -> list[str]:
    return [v.strip() for v in values if v.strip()]


def null_tokens(rows: list[list[str]]) -> dict[int, dict[str, int]]:
    """Per column of numbers, the null tokens (``NULL_TOKENS``) it holds and how often:
    a column whose other values are all numbers (R's and pandas' NA among measurements).
    A token in a text column alone is kept as text (it may be a value: a country NA)."""
    width = max((len(r) for r in rows), default=0)
    out: dict[int, dict[str, int]] = {}
    for j in range(width):
        present = _present([r[j] if j < len(r) else "" for r in rows])
        found: dict[str, int] = {}
        for v in present:
            if v in NULL_TOKENS:
                found[v] = found.get(v, 0) + 1
        rest = [v for v in present if v not in NULL_TOKENS]
        if found and rest and all(map(_is_number, rest)):
            out[j] = found
    return out


def without_nulls(rows: list[list[str]], tokens: list[str]) -> list[list[str]]:
    """The rows as the trainer reads them under ``data.files.nullValues: tokens``: a token
    (spaces around it aside) is an empty field, in every column."""
    if not tokens:
        return rows
    nulls = set(tokens)
    return [["" if c.strip() in nulls else c for c in r] for r in rows]


def _positive(values: list[str]) -> tuple[list[str], str]:
    """The label values meaning 1 of a two-valued label, and a question when guessed."""
    distinct = sorted(set(values))
    words = [v for v in distinct if v.lower() in POSITIVE_WORDS]
    if len(words) == 1:
        return words, ""
    rarer = min(distinct, key=lambda v: (values.count(v), v))
    others = ", ".join(repr(v) for v in distinct if v != rarer)
    return [rarer], (
        f"asked: which value means 1? guessed {rarer!r}, the rarer (the other: {others}); "
        "list the right one under positive"
    )


def _label_of(
    names: list[str], columns: list[list[str]], excluded: set[int]
) -> tuple[int, dict[str, Any], str, str]:
    """The label's column index (none of ``excluded``), its settings, why it was chosen
    and a comment for the job (a question when it is a guess)."""
    present = [[] if i in excluded else _present(v) for i, v in enumerate(columns)]
    names = ["" if i in excluded else n for i, n in enumerate(names)]
    binary = [bool(p) and set(p) <= {"0", "1"} for p in present]

    def label(i: int, why: str) -> tuple[int, dict[str, Any], str, str]:
        values = present[i]
        if binary[i] or not values:
            return i, {}, why + ", 0/1", ""
        numbers = all(_is_number(v) for v in values)
        if len(set(values)) == 2:
            positive, question = _positive(values)
            return i, {"positive": positive}, why + f", two values: {positive[0]!r} is 1", question
        if numbers and why.startswith("named"):
            return _rating(i, values, why)
        distinct = sorted(set(values), key=lambda v: -values.count(v))
        positive, _ = _positive(distinct[:1] + distinct[1:2])
        return (
            i,
            {"positive": positive},
            why + f", {len(distinct)} values",
            f"asked: which values mean 1? guessed {positive[0]!r} alone; list them under positive",
        )

    for i, n in enumerate(names):
        if n.lower().strip() in LABEL_NAMES:
            return label(i, f"named {n!r}")
    for i, b in enumerate(binary):
        if b:
            return label(i, "the first column of 0/1")
    for i, n in enumerate(names):
        if n.lower().strip() in RATING_NAMES and present[i] and all(map(_is_number, present[i])):
            return _rating(i, present[i], f"named {n!r}")
    for i, p in enumerate(present):
        if len(set(p)) == 2 and len(p) >= 2:
            return label(i, "the first two-valued column")
    few = [i for i, p in enumerate(present) if p and 2 <= len(set(p)) <= 10]
    # Text first: a column of few words is a likelier target than a number (a year).
    few.sort(key=lambda i: not any(not _is_number(v) for v in present[i]))
    usable = [i for i in range(len(names)) if i not in excluded] or [len(names) - 1]
    i = few[0] if few else usable[-1]
    chosen = label(i, "a guess: no column looks like a label")
    question = "asked: which column is the label? guessed this one (of few values, text first)"
    return chosen[0], chosen[1], chosen[2], question


def _rating(i: int, values: list[str], why: str) -> tuple[int, dict[str, Any], str, str]:
    """A rating as a label: 1 at the top of its scale (4 of 1..5, 8 of 1..10)."""
    numbers = [float(v) for v in values]
    high = max(numbers)
    threshold = 4.0 if high <= 5 else round(0.8 * high, 6)
    comment = (
        f"a rating ({min(numbers):g}..{high:g}): 1 when >= {threshold:g}; "
        "change the threshold to what a good rating is"
    )
    return i, {"threshold": threshold}, why + f", a rating: >= {threshold:g} is 1", comment


def _estimate(distinct: int, present: int, sample_rows: int, total_rows: int) -> int:
    """Distinct values in the whole file from a sample: a column whose values barely
    repeat grows with the rows; one that repeats a lot is near its full size."""
    if present == 0:
        return 1
    repeat = distinct / present
    scale = max(total_rows / max(sample_rows, 1), 1.0)
    return max(distinct, int(distinct * (1 + (scale - 1) * repeat)))


def feature_name(header: str, j: int, taken: set[str]) -> str:
    """A valid, unique feature name for a column (the header's own when it is one)."""
    name = header.strip()
    if not _FEATURE_NAME.match(name) or len(name) > 128:
        name = re.sub(r"[^a-z0-9_.:/-]+", "_", name.lower()).strip("_")[:120]
        if not name or not _FEATURE_NAME.match(name):
            name = f"c{j}"
    base, n = name, 2
    while name in taken:
        name, n = f"{base}_{n}", n + 1
    taken.add(name)
    return name


def profile(
    names: list[str],
    rows: list[list[str]],
    total_rows: int,
    lists: frozenset[str] = frozenset(),
    header: bool = True,
) -> list[Column]:
    """Each column's kind and cardinality from the sample rows; ``lists`` names columns
    that are lists (Parquet), their values joined with ``|``: multi-valued whatever the
    sample holds. ``names`` are the file's own (a header's, or ``c0..`` without one)."""
    width = len(names)
    columns = [[r[j] if j < len(r) else "" for r in rows] for j in range(width)]
    excluded: dict[int, str] = {}
    stripped = [n.strip() for n in names]
    for j, header_name in enumerate(stripped):
        unnamed = not header or not header_name
        where = [i + 1 for i, n in enumerate(stripped) if n == header_name]
        if j == width - 1 and j > 0 and unnamed and not _present(columns[j]):
            excluded[j] = "an empty trailing column (a delimiter ending each line)"
        elif header and not header_name:
            excluded[j] = "no name in the header (an index column?): columns are read by name"
        elif header and len(where) > 1:
            # Neither is read: a feature reads its column by name, and which of the two
            # a name means is the file's ambiguity, not etj's to settle.
            excluded[j] = (
                f"the header names {header_name!r} {len(where)} times (columns "
                f"{', '.join(map(str, where))}): none is read; rename them in the file "
                "to read them"
            )
    label, label_settings, label_why, label_comment = _label_of(names, columns, set(excluded))
    taken: set[str] = set()
    out = []
    for j, (header_name, values) in enumerate(zip(names, columns, strict=True)):
        present = _present(values)
        distinct = len(set(present))
        empty = 1 - len(present) / max(len(values), 1)
        estimate = _estimate(distinct, len(present), len(rows), total_rows)
        name = feature_name(header_name, j, taken)
        column = Column(name, "skip", distinct, empty, estimate, {}, header=header_name)
        column.missing = len(values) - len(present)
        out.append(column)
        if j in excluded:
            column.why = excluded[j]
            column.ignored = excluded[j].startswith("an empty trailing column")
            continue
        if j == label:
            column.kind, column.settings = FeatureKind.LABEL.value, label_settings
            column.why, column.comment = label_why, label_comment
            continue
        if not rows:
            column.kind, column.why = (
                FeatureKind.CATEGORICAL.value,
                "no rows to judge: read as text",
            )
            continue
        if not present:
            column.why = "empty in the whole sample"
            continue
        kind, settings, why = _kind(name, present, distinct)
        if header_name in lists:
            longest = max((len([p for p in v.split("|") if p]) for v in present), default=1)
            kind, settings = (
                FeatureKind.CATEGORICAL.value,
                {"delimiter": "|", "maxLength": min(longest, 1024)},
            )
            why = "a list column"
        if settings.get("delimiter"):
            parts = {p for v in present for p in v.split(settings["delimiter"]) if p}
            column.estimate = _estimate(len(parts), len(present), len(rows), total_rows)
        column.kind, column.settings, column.why = kind, settings, why
    if not any(c.kind == FeatureKind.CATEGORICAL for c in out):
        _propose_an_id(out, columns)
    return out


def _propose_an_id(out: list[Column], columns: list[list[str]]) -> None:
    """A file of numbers only: its integer column of fewest values becomes an id (or,
    with none, its number column of fewest values, hashed as text): a CTR model learns
    from tables, and needs one."""
    candidates = [c for c in out if c.kind == FeatureKind.DENSE and c.distinct >= 2]
    if not candidates:
        return
    index = {id(c): j for j, c in enumerate(out)}

    def integers(c: Column) -> bool:
        return all(_INT.match(v) for v in _present(columns[index[id(c)]]))

    ints = [c for c in candidates if integers(c)]
    chosen = min(ints or candidates, key=lambda c: c.distinct)
    chosen.kind = FeatureKind.CATEGORICAL.value
    chosen.settings = {"valueType": ValueType.INT.value} if ints else {}
    chosen.why = (
        f"proposed as an id ({chosen.distinct} values): a file of numbers only, and a CTR "
        "model needs a table" + ("" if ints else " (hashed as text)")
    )


def _kind(name: str, present: list[str], distinct: int) -> tuple[str, dict[str, Any], str]:
    fractional = all(_is_number(v) for v in present)
    fractional = fractional and not all(_INT.match(v) for v in present)
    if len(present) >= 50 and distinct == len(present) and not fractional:
        # A unique key (a row id): nothing to learn from. Measurements with fractions
        # (a price) rarely repeat either, and are features.
        return "skip", {}, "a unique key (no value repeats): nothing to learn"
    for d in MULTI_DELIMITERS:
        with_d = sum(1 for v in present if d in v)
        # Two values (F and M, yes and no) are one choice each, never a list.
        if distinct > 2 and with_d > 0.05 * len(present):
            longest = max(len([p for p in v.split(d) if p]) for v in present)
            settings = {"delimiter": d, "maxLength": min(max(longest, 1), 1024)}
            return FeatureKind.CATEGORICAL.value, settings, f"lists split by {d!r}"
    numbers = all(_is_number(v) for v in present)
    if not numbers:
        return FeatureKind.CATEGORICAL.value, {}, f"text, {distinct} values"
    integers = all(_INT.match(v) for v in present)
    if integers and any(abs(int(v)) > INT64_MAX for v in present):
        return FeatureKind.CATEGORICAL.value, {}, "ids past int64 (hashed as text)"
    if integers and (name.lower().endswith("id") or name.lower().endswith("_id")):
        return (
            FeatureKind.CATEGORICAL.value,
            {"valueType": ValueType.INT.value},
            "integer ids (named ...id)",
        )
    # Codes of one width: Avazu's hour (14102100), or any with a leading zero (a zip code);
    # four or five digits alone are as often a measurement (a body mass of 3750 g).
    width = {len(v.lstrip("+-")) for v in present}
    coded = len(width) == 1 and (min(width) >= 6 or any(v.startswith("0") for v in present))
    if integers and coded and min(width) >= 4:
        return FeatureKind.CATEGORICAL.value, {}, "fixed-width codes"
    if integers and 2 <= distinct <= FEW_CODES and len(present) >= 4 * distinct:
        return (
            FeatureKind.CATEGORICAL.value,
            {"valueType": ValueType.INT.value},
            f"integer codes ({distinct} values)",
        )
    values = [float(v) for v in present]
    low, high = min(values), max(values)
    if integers and low >= -5 and high - low > 100:
        return (
            FeatureKind.DENSE.value,
            {"transform": Transform.LOG1P.value},
            "counts over a wide range",
        )
    mean = sum(values) / len(values)
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
    if std == 0:
        return FeatureKind.DENSE.value, {}, "a number (constant in the sample)"
    settings = {
        "transform": Transform.STANDARDIZE.value,
        "mean": round(mean, 6),
        "std": round(std, 6),
    }
    return FeatureKind.DENSE.value, settings, "a number" + ("" if integers else " with fractions")


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
    notes: list[str] | None = None,
) -> tuple[dict[str, Any], list[Column]]:
    """A complete EmbeddingTrainingJob manifest for the sampled file, and the profile;
    ``notes`` (when given) gets a line for each reason the file cannot be trained on."""
    lines = [line.rstrip("\r\n") for line in lines]
    while lines and not lines[-1].strip():
        lines.pop()
    if not any(line.strip() for line in lines):
        raise ValueError("the file holds no lines (nothing to read)")
    delimiter = sniff_delimiter([line for line in lines if line.strip()][:200])
    quote = quoting(lines, delimiter)
    split = [r for r in split_lines(lines, delimiter, quote) if any(c.strip() for c in r)]
    counts = [len(r) for r in split[1:]]
    width = max(set(counts), key=counts.count) if counts else len(split[0])
    bad_first = bool(counts) and len(split[0]) != width and counts.count(width) == len(counts)
    if bad_first:
        # A first line of another shape (scikit-learn's "569,30,malignant,benign": row
        # and column counts, class names) is neither a header nor a row of these columns.
        header = False
    elif len(split) == 1:
        header = not any(_is_number(c) for c in split[0])
    else:
        header = has_header(split[0], split[1:])
    names = [c.strip() for c in split[0]] if header else [f"c{i}" for i in range(width)]
    rows = split[1:] if header or bad_first else split
    if not rows and notes is not None:
        notes.append("the file holds a header only: no rows to train on (the kinds are guesses)")
    files: dict[str, Any] = {
        "pattern": pattern,
        "format": FileFormat.CSV.value,
        "delimiter": delimiter,
        "header": header,
        "compression": compression,
    }
    if quote == "none":
        files["quote"] = "none"
    if not header:
        files["columns"] = names
    nulls = null_tokens(rows)
    rows = _read_nulls(rows, nulls, files)
    cols = _say_nulls(profile(names, rows, total_rows, header=header), nulls)
    job, cols = _job(name, cols, files)
    first = (
        f"line 1 has {len(split[0])} fields, every other line {width}: it is no header of "
        "these columns, skipped as a bad record"
        if bad_first
        else ""
    )
    _skip_bad_records(job, cols, len(rows), total_rows, first)
    return job, cols


def _read_nulls(
    rows: list[list[str]], nulls: dict[int, dict[str, int]], files: dict[str, Any]
) -> list[list[str]]:
    """The rows as the trainer will read them, with the null tokens found (``null_tokens``)
    in ``files`` as ``nullValues``."""
    tokens = sorted({t for found in nulls.values() for t in found})
    if tokens:
        files["nullValues"] = tokens
    return without_nulls(rows, tokens)


def _say_nulls(cols: list[Column], nulls: dict[int, dict[str, int]]) -> list[Column]:
    """Each column of numbers holding null tokens says so in its why."""
    for j, found in nulls.items():
        if j < len(cols) and cols[j].kind != "skip":
            counts = ", ".join(f"{n} {t}" for t, n in sorted(found.items()))
            cols[j].why += f" ({counts} read as missing: data.files.nullValues)"
    return cols


def _skip_bad_records(
    job: dict[str, Any], cols: list[Column], sample_rows: int, total_rows: int, first: str
) -> None:
    """``data.maxBadRecords`` for what the sample shows cannot be trained on: rows without
    a label (empty, or a null token) and a first line of another shape (``first`` says
    it), said beside the label (always written, never left out)."""
    label = next(c for c in cols if c.kind == FeatureKind.LABEL)
    said = [first] if first else []
    skips = 1 if first else 0
    if label.missing and sample_rows:
        expected = math.ceil(label.missing * max(total_rows, sample_rows) / sample_rows)
        # Room for twice the rate the sample shows, and 10 more: a sample's count of rare
        # rows is rough, and a job stopping at the first row past the allowance wastes
        # more than a few skipped rows cost (each is counted in status.progress).
        allowance = 2 * expected + 10
        skips += allowance
        tokens = job["spec"]["data"]["files"].get("nullValues", [])
        what = "empty" + (f" or {', '.join(tokens)}" if tokens else "")
        said.append(
            f"{label.missing} of the {sample_rows} sample rows have no label ({what}): "
            f"skipped as bad records ({allowance}: twice the ~{expected} expected in the "
            "file, plus 10)"
        )
    if not skips:
        return
    job["spec"]["data"]["maxBadRecords"] = skips
    note = "; ".join(said) + f"; data.maxBadRecords: {skips}"
    label.comment = f"{note}; {label.comment}" if label.comment else note


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
    files: dict[str, Any] = {"pattern": pattern, "format": FileFormat.PARQUET.value}
    nulls = null_tokens(rows)
    rows = _read_nulls(rows, nulls, files)
    job, cols = _job(name, _say_nulls(profile(names, rows, total_rows, lists), nulls), files)
    _skip_bad_records(job, cols, len(rows), total_rows, "")
    return job, cols


def _feature(c: Column) -> dict[str, Any]:
    feature: dict[str, Any] = {"name": c.name}
    if c.header.strip() and c.header != c.name:
        feature["column"] = c.header
    feature |= {"kind": c.kind, **c.settings}
    return feature


def _job(
    name: str, cols: list[Column], files: dict[str, Any]
) -> tuple[dict[str, Any], list[Column]]:
    if not any(c.kind == FeatureKind.LABEL for c in cols):
        raise ValueError("no column can be the label (every column is left out: see why)")
    taken: set[str] = set()
    tables, features = [], []
    for c in cols:
        if c.kind == "skip":
            continue
        feature = _feature(c)
        if c.kind == FeatureKind.CATEGORICAL:
            vocab = vocabulary_size(c.estimate)
            table = table_name(c.name, taken)
            tables.append({"name": table, "vocabularySize": vocab, "dimension": dimension(vocab)})
            feature["table"] = table
        features.append(feature)
    if not tables:
        raise ValueError(
            "no column can be an id: a CTR model learns embeddings of ids, and every "
            "column but the label is left out or constant"
        )
    job = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": name},
        "spec": {
            "strategy": Strategy.AUTO.value,
            "replicas": {Role.WORKER.value: {"replicas": 2}},
            "model": {"embeddings": tables, "features": features, "hiddenUnits": [256, 128]},
            "data": {"source": "files", "files": files, "maxBadRecords": 0},
            "training": {
                "batchSizePerReplica": 1024,
                "epochs": 1,
                "optimizer": Optimizer.ADAGRAD.value,
                "learningRate": 0.05,
            },
            # Several pods share the checkpoints: a ReadWriteMany claim etj creates.
            "checkpoint": {"storage": {"size": "10Gi"}, "everySteps": 1000, "keep": 3},
        },
    }
    return job, cols


def decision_table(cols: list[Column]) -> str:
    """What was decided per column and why, one line each (what ``etj init`` prints)."""
    shown = [
        c.name + (f" ({c.header!r})" if c.header.strip() and c.header != c.name else "")
        for c in cols
    ]
    width = min(max((len(s) for s in shown), default=6), 40)
    lines = [f"{'column':<{width}}  {'kind':<11}  why"]
    for c, name in zip(cols, shown, strict=True):
        kind = "ignored" if c.ignored else ("left out" if c.kind == "skip" else c.kind)
        lines.append(f"{name:<{width}}  {kind:<11}  {c.why}")
    lines += [f"{c.name}: {c.comment}" for c in cols if c.comment and c.kind != "skip"]
    return "\n".join(lines)


_COMMENT_KEY = "__etj_init_comment__"
_LEFT_OUT = "__etj_init_left_out__"


def job_yaml(job: dict[str, Any], cols: list[Column], dump: Any) -> str:
    """The job as YAML (``dump``: the project's YAML writer) with the notes a person
    reviews: a comment above each feature that has one, and the columns left out written
    commented out with the reason, after the features."""
    doc = copy.deepcopy(job)
    features = doc["spec"]["model"]["features"]
    by_name = {c.name: c.comment for c in cols if c.comment and c.kind != "skip"}
    notes: list[str] = []
    marked: list[Any] = []
    for f in features:
        if f["name"] in by_name:
            marked.append(f"{_COMMENT_KEY}{len(notes)}")
            notes.append(by_name[f["name"]])
        marked.append(f)
    left_out = [c for c in cols if c.kind == "skip" and not c.ignored]
    if left_out:
        marked.append(_LEFT_OUT)
    doc["spec"]["model"]["features"] = marked
    out = []
    for line in dump(doc).splitlines():
        stripped = line.lstrip()
        indent = line[: len(line) - len(stripped)]
        if stripped.startswith(f"- {_COMMENT_KEY}"):
            out.append(f"{indent}# {notes[int(stripped.removeprefix(f'- {_COMMENT_KEY}'))]}")
        elif stripped == f"- {_LEFT_OUT}":
            for c in left_out:
                out.append(f"{indent}# left out: {c.why}")
                feature = {"name": c.name, **({"column": c.header} if c.header.strip() else {})}
                out.append(f"{indent}# - {json.dumps(feature)}")
        else:
            out.append(line)
    return "\n".join(out) + "\n"
