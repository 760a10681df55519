"""Atomic output files: every file the launcher writes appears whole or not at all.

Writers go to a temporary file in the destination's directory and ``os.replace`` it (atomic on
POSIX within one file system), so a run killed mid-write (Slurm's time limit) leaves the previous
version, never a truncated one. ``append_csv_row`` also takes an exclusive ``flock`` on a lock file
beside the CSV, so runs of a sweep that finish together do not lose each other's rows.
"""

from __future__ import annotations

import csv
import fcntl
import io
import json
import os
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["append_csv_row", "write_json", "write_json_lines", "write_text"]


def write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically (temp file in the same directory, fsync, rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


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
