"""The encoding of a text file from its first bytes: each non-UTF-8 kind named, with the
encoding to convert from; UTF-8 (with or without its byte-order mark) passes."""

from __future__ import annotations

import pytest

from etj.api.textfiles import encoding_problem


@pytest.mark.parametrize(
    ("head", "named", "convert"),
    [
        ("label,title\n".encode("utf-16"), "UTF-16LE", "iconv -f UTF-16 "),
        ("label,title\n".encode("utf-16-be"), "UTF-16BE without a byte-order mark", "UTF-16BE"),
        ("label,title\n".encode("utf-16-le"), "UTF-16LE without a byte-order mark", "UTF-16LE"),
        ("label,title\n".encode("utf-32"), "UTF-32LE", "iconv -f UTF-32 "),
        ("label,café\n".encode("latin-1"), "Latin-1", "iconv -f WINDOWS-1252 "),
    ],
)
def test_a_file_that_is_not_utf8_is_named_with_the_encoding_to_convert_from(
    head: bytes, named: str, convert: str
):
    problem = encoding_problem(head.split(b"\n\x00")[0].split(b"\n")[0])
    assert problem is not None
    assert named in problem
    assert convert in problem
    assert "-t UTF-8" in problem


@pytest.mark.parametrize(
    "head", [b"label,title", "\ufefflabel,caf\u00e9".encode(), "a,\u00fc\u00df".encode()]
)
def test_utf8_passes(head: bytes):
    assert encoding_problem(head) is None


def test_latin1_bytes_in_a_data_line_are_data():
    line = "1,café".encode("latin-1")
    assert encoding_problem(line, header=False) is None
    assert encoding_problem(line, header=True) is not None
