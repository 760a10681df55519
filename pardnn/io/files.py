"""Reading an input file with one clear line on failure, for every reader of :mod:`pardnn.io`."""

from __future__ import annotations

import os
from pathlib import Path

from pardnn.errors import PardnnError

__all__ = ["read_bytes", "read_text"]

PathLike = str | os.PathLike[str]


def read_bytes(path: PathLike, error: type[PardnnError], expected: str, *, source: str | None = None,
               missing: str = "") -> bytes:
    """The bytes of ``path``; a missing file, a directory or an OS error raises ``error`` saying
    ``"<source>: no such file<missing>"``, ``"is a directory, expected <expected>"`` or ``"cannot read (...)"``."""
    source = str(path) if source is None else source
    try:
        return Path(path).read_bytes()
    except FileNotFoundError as exc:
        raise error(f"{source}: no such file{missing}") from exc
    except IsADirectoryError as exc:
        raise error(f"{source}: is a directory, expected {expected}") from exc
    except OSError as exc:
        raise error(f"{source}: cannot read ({exc.strerror or exc})") from exc


def read_text(path: PathLike, error: type[PardnnError], expected: str, *, missing: str = "") -> str:
    """The UTF-8 text of ``path`` (a byte-order mark dropped); errors as :func:`read_bytes`, and text
    that is not UTF-8 raises ``error`` naming the first bad byte."""
    data = read_bytes(path, error, expected, missing=missing)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise error(f"{path}: not UTF-8 text (byte {exc.start}: {exc.reason})") from exc
