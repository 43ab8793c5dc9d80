"""What a text data file's first bytes say about its encoding: etj reads delimited files
as UTF-8 (a UTF-8 byte-order mark allowed). Shared by the trainer's reader (which refuses
such a file before training) and ``etj init --from-data`` (which says so before sampling),
so both name the same encoding and the same way to convert from it.

Pure: bytes in, a sentence out; reads no file.
"""

from __future__ import annotations

UTF16_BOMS = {b"\xff\xfe": "UTF-16LE", b"\xfe\xff": "UTF-16BE"}
UTF32_BOMS = {b"\xff\xfe\x00\x00": "UTF-32LE", b"\x00\x00\xfe\xff": "UTF-32BE"}


def _convert(encoding: str) -> str:
    return (
        f"etj reads UTF-8: convert it first, e.g. "
        f"iconv -f {encoding} -t UTF-8 FILE > FILE.utf8 (or save it as CSV UTF-8)"
    )


def encoding_problem(first_line: bytes, header: bool = True) -> str | None:
    """Why a file starting with ``first_line`` (its first line's bytes, decompressed)
    cannot be read as UTF-8, naming the encoding it is likely in; None when it can.

    A UTF-16/32 byte-order mark, or NUL bytes (UTF-16 without a mark), name the file's
    encoding. Bytes that are not UTF-8 in a header (column names) are most likely
    Latin-1 / Windows-1252; in data lines they are data (ids hashed as bytes), so they are
    judged only when ``header``."""
    for bom, name in (UTF32_BOMS | UTF16_BOMS).items():
        if first_line.startswith(bom):
            return f"the file is {name} (it starts with a {name} byte-order mark); " + _convert(
                name.removesuffix("LE").removesuffix("BE")
            )
    if b"\x00" in first_line:
        wide = "UTF-16LE" if first_line[1:2] == b"\x00" else "UTF-16BE"
        return f"the file holds NUL bytes: it looks like {wide} without a byte-order mark; " + (
            _convert(wide)
        )
    if header:
        try:
            first_line.decode("utf-8")
        except UnicodeDecodeError as e:
            byte = first_line[e.start]
            return (
                f"the header is not UTF-8 (byte 0x{byte:02x} at offset {e.start}, "
                f"{first_line[max(e.start - 10, 0) : e.start + 10]!r}): it looks like "
                "Latin-1 / Windows-1252; " + _convert("WINDOWS-1252")
            )
    return None
