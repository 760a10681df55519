"""Atomic output files: every file the launcher writes appears whole or not at all.

:func:`write_text`, :func:`write_json` and :func:`write_json_lines` (through :func:`write_atomically`)
replace the destination with a finished temporary file; :func:`append_csv_row` appends under a lock. Files
get the permissions of an ordinary ``open`` (:func:`file_mode`). :func:`check_output_folder` checks
``--out`` before anything expensive starts: an unusable folder is one line naming it.
Why: docs/notes-launcher.md.
"""

from __future__ import annotations

import csv
import fcntl
import io
import json
import os
import tempfile
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, BinaryIO

from launcher.errors import LaunchError

__all__ = ["append_csv_row", "check_output_folder", "file_mode", "read_umask", "write_atomically", "write_json",
           "write_json_lines", "write_text"]

_UMASK_LOCK = threading.Lock()
_umask: int | None = None


def read_umask() -> int:
    """The process's umask, read without leaving it changed (cached after the first call)."""
    global _umask
    with _UMASK_LOCK:
        if _umask is None:
            _umask = _umask_from_proc()
            if _umask is None:
                _umask = os.umask(0o022)
                os.umask(_umask)
        return _umask


def _umask_from_proc() -> int | None:
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return None


def file_mode() -> int:
    """The mode ``open()`` would give a new file: 0666 less the umask."""
    return 0o666 & ~read_umask()


def check_output_folder(folder: Path, option: str = "--out") -> None:
    """Make ``folder`` (and parents) unless it exists, and check this process can write in it.

    Raises :class:`~launcher.errors.LaunchError` (one line: the folder, what failed, what to do).
    """
    hint = f"pass {option} a folder you can write to"
    if folder.exists() and not folder.is_dir():
        raise LaunchError(f"{option} {folder}: exists and is not a folder; {hint}")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise LaunchError(f"{option} {folder}: cannot create the folder ({error.strerror or error}); {hint}") from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise LaunchError(f"{option} {folder}: the folder is not writable by this user; {hint}")


def write_atomically(path: Path, write: Callable[[BinaryIO], object]) -> None:
    """Write ``path`` atomically: ``write(handle)`` into a temp file in the same directory, flush, fsync,
    rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, file_mode())  # mkstemp makes 0600; results are shared like any other file
        with os.fdopen(fd, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically (:func:`write_atomically`), UTF-8."""
    write_atomically(path, lambda handle: handle.write(text.encode("utf-8")))


def _json_default(value: Any) -> Any:
    if hasattr(value, "tolist"):  # NumPy scalars and arrays
        return value.tolist()
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    raise TypeError(f"cannot write {type(value).__name__} as JSON")


def write_json(path: Path, data: Mapping[str, Any]) -> None:
    """Write ``data`` as indented JSON, atomically."""
    write_text(path, json.dumps(data, indent=2, default=_json_default, allow_nan=False) + "\n")


def write_json_lines(path: Path, records: Iterable[Mapping[str, Any]]) -> None:
    """Write one JSON object per line, atomically."""
    write_text(path, "".join(json.dumps(r, default=_json_default, allow_nan=False) + "\n" for r in records))


def append_csv_row(path: Path, columns: Sequence[str], row: Mapping[str, Any]) -> None:
    """Append ``row`` to the CSV at ``path`` (header ``columns`` when new), atomically and under a lock.

    A file whose header differs from ``columns`` keeps its header; the row is written under it
    (missing columns empty, extra ones dropped), so an older results file stays readable.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        existing = path.read_text(encoding="utf-8") if path.exists() else ""
        header = next(csv.reader(io.StringIO(existing)), None) if existing else None
        fields = header or list(columns)
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=fields, extrasaction="ignore", lineterminator="\n")
        if not existing:
            writer.writeheader()
        elif not existing.endswith("\n"):
            out.write("\n")
        writer.writerow({name: _csv_value(row.get(name)) for name in fields})
        write_text(path, existing + out.getvalue())


def _csv_value(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    return value
