"""Reading the files ``etj`` commands are given, the way a good Unix tool does.

Every command that takes a file (``validate``, ``plan``, ``render``, ``run``, the
operator's ``--kubeconfig``) reads it through here: ``-`` is stdin; a missing file, a
directory, an unreadable file, bytes that are not UTF-8 or text that is not YAML end the
command with one line naming the file and exit status 2 (a usage error, like click's own).
click's ``Path(exists=True)`` is not used for this: its message is a multi-line usage
screen, and it cannot check that the bytes decode.

Only reads and raises; printing is click's.
"""

from __future__ import annotations

import gzip
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import click

# Exit status of every bad-input error: the same as click's usage errors.
EXIT_BAD_INPUT = 2
STDIN = "-"


def file_argument() -> Any:
    """The ``FILE`` argument of a command: any path or ``-``, checked when it is read."""
    # Path(readable=False): click's own check would print a multi-line usage screen.
    return click.argument("file", type=click.Path(allow_dash=True, readable=False))


def display_name(path: str) -> str:
    """How messages name a file given on the command line."""
    return "<stdin>" if path == STDIN else path


class InputError(click.ClickException):
    """A file given on the command line cannot be used; one line, exit 2."""

    exit_code = EXIT_BAD_INPUT

    def __init__(self, path: str, what: str):
        super().__init__(f"{display_name(path)}: {what}")


@contextmanager
def reading(path: str) -> Iterator[None]:
    """Turn the errors of opening and reading ``path`` into one ``InputError`` line
    (for commands that stream a file rather than read it whole: ``etj init``)."""
    try:
        yield
    except FileNotFoundError:
        raise InputError(path, "no such file") from None
    except IsADirectoryError:
        raise InputError(path, "is a directory, not a file") from None
    except PermissionError:
        raise InputError(path, "permission denied (cannot read it)") from None
    except gzip.BadGzipFile:
        raise InputError(path, "not a gzip file (its name ends in .gz)") from None
    except (OSError, EOFError) as exc:
        raise InputError(path, f"cannot read it: {getattr(exc, 'strerror', None) or exc}") from None


def read_bytes(path: str) -> bytes:
    """The bytes of ``path`` (``-``: stdin), or ``InputError`` saying why not."""
    if path == STDIN:
        return sys.stdin.buffer.read()
    with reading(path), open(path, "rb") as fh:
        return fh.read()


def read_text(path: str) -> str:
    """The UTF-8 text of ``path`` (``-``: stdin), or ``InputError``."""
    data = read_bytes(path)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise InputError(
            path, f"not UTF-8 text (byte 0x{data[exc.start]:02x} on line {line})"
        ) from None


def load_documents(path: str) -> list[Any]:
    """The YAML documents of ``path`` (``-``: stdin), empty ones dropped."""
    import yaml

    text = read_text(path)
    try:
        return [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InputError(path, f"not valid YAML: {problem}{where}") from None


def read_kubeconfig(path: str) -> dict[str, Any]:
    """The kubeconfig at ``path`` as a mapping, or ``InputError`` (not stdin: the client
    libraries read it again by path)."""
    if path == STDIN:
        raise InputError(path, "a kubeconfig must be a file, not stdin")
    docs = load_documents(path)
    if len(docs) != 1 or not isinstance(docs[0], dict):
        raise InputError(path, "not a kubeconfig (expected one YAML mapping)")
    return docs[0]
