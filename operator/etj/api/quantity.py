"""Kubernetes resource quantities ("512Mi", "2G", "1.5Gi", "500m") as numbers.

Pure: no I/O. Only the subset of the Kubernetes grammar that makes sense for memory and
CPU is accepted: a decimal number with an optional binary (Ki..Ei) or decimal (m, k..E)
suffix, or an exponent.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation

# The pattern the Kubernetes API itself uses for resource.Quantity, without its minus
# sign: no size or CPU count here can be negative (the API server refuses negative
# resources in a Pod, and a negative shard size or base memory means nothing).
QUANTITY_PATTERN = (
    r"^\+?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
    r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
_RE = re.compile(QUANTITY_PATTERN)

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal(10**3),
    "M": Decimal(10**6),
    "G": Decimal(10**9),
    "T": Decimal(10**12),
    "P": Decimal(10**15),
    "E": Decimal(10**18),
}


# The largest quantity accepted: what Kubernetes' int64 resource values hold. Without a
# bound a schema-valid "1e999999999" would become a billion-digit integer.
MAX_QUANTITY = 2**63 - 1


def parse_quantity(value: int | float | str) -> Decimal:
    """The quantity's value in base units (bytes for memory, cores for CPU)."""
    parsed = _parse(value)
    if parsed > MAX_QUANTITY:
        raise ValueError(f"{value!r} is larger than any Kubernetes quantity (2^63-1)")
    return parsed


def _parse(value: int | float | str) -> Decimal:
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a quantity")
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError(f"{value!r} is negative; a quantity here cannot be")
        return Decimal(str(value))
    text = value.strip()
    if text.startswith("-"):
        raise ValueError(f"{value!r} is negative; a quantity here cannot be")
    if not _RE.match(text):
        raise ValueError(
            f"{value!r} is not a Kubernetes quantity (examples: 512Mi, 2Gi, 1.5G, 500m)"
        )
    for suffix, factor in _BINARY.items():
        if text.endswith(suffix):
            return Decimal(text[: -len(suffix)]) * factor
    if text[-1] in _DECIMAL:
        return Decimal(text[:-1]) * _DECIMAL[text[-1]]
    try:
        return Decimal(text)
    except InvalidOperation as exc:  # pragma: no cover - the regex already guards this
        raise ValueError(f"{value!r} is not a Kubernetes quantity") from exc


def quantity_bytes(value: int | float | str) -> int:
    """A memory quantity in whole bytes (rounded up, as the kubelet does)."""
    return math.ceil(parse_quantity(value))


def format_bytes(n: int) -> str:
    """A byte count as a quantity people read: whole Gi when exact, else rounded up to Mi."""
    if n >= 2**30 and n % 2**30 == 0:
        return f"{n // 2**30}Gi"
    # Integer division: a quantity may be far beyond a float's range.
    if n >= 2**20:
        return f"{-(-n // 2**20)}Mi"
    return f"{-(-n // 2**10)}Ki" if n >= 2**10 else str(n)


def human_bytes(n: float) -> str:
    """A byte count for people: "9.54 GiB"."""
    units = (("EiB", 2**60), ("PiB", 2**50), ("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20))
    for suffix, factor in (*units, ("KiB", 2**10)):
        if abs(n) >= factor:
            # Decimal, not float: a quantity may be far beyond a float's range.
            return f"{Decimal(n) / factor:.2f} {suffix}"
    return f"{int(n)} B"
