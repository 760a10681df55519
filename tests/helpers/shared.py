"""What several tests build, built once per test run: the first worker to ask builds it, the rest read it.

    losses = shared(("one-device losses", "word-rnn-tiny", 4, 8, 6), lambda: train(...))

The value is pickled under pytest's temporary root, which every xdist worker of the run shares
(:data:`ROOT`, set by the session fixture in ``tests/conftest.py``), behind a file lock; each process also
keeps what it read. A key names everything the value depends on (the job, batch, micro-batches,
iterations...); a run is on one stack, and the cache lives as long as the run's temporary folder.
Without a run (a helper called outside pytest) the value is made each time.
"""

from __future__ import annotations

import hashlib
import pickle
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any, TypeVar

from filelock import FileLock

T = TypeVar("T")
ROOT: Path | None = None  # this run's shared folder
_here: dict[Hashable, Any] = {}


def run_root(base: Path) -> Path:
    """The temporary folder of a test run that every xdist worker shares, from a worker's ``getbasetemp()``."""
    return base.parent if base.name.startswith("popen-gw") else base


def shared(key: Hashable, make: Callable[[], T]) -> T:
    """``make()``'s value, made once for the whole run under ``key`` (a tuple of plain values)."""
    if key in _here:
        return _here[key]
    if ROOT is None:
        return make()
    folder = ROOT / "shared"
    folder.mkdir(exist_ok=True)
    path = folder / hashlib.sha256(repr(key).encode()).hexdigest()[:24]
    with FileLock(f"{path}.lock"):
        if path.exists():
            value = pickle.loads(path.read_bytes())
        else:
            value = make()
            path.with_suffix(".part").write_bytes(pickle.dumps(value))
            path.with_suffix(".part").replace(path)
    _here[key] = value
    return value
