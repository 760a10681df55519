"""Each rank's output: all of it in ``OUT/<run>/rank-<r>.log``, a filtered copy on the console.

:func:`start` (the first thing ``pardnn-launch`` does) points fds 1 and 2 at pipes and copies what
arrives to the log (kept in memory until :func:`attach` names the file) and, filtered by
:meth:`Console.shown`, to the console. Call :func:`drain` before ``os._exit`` or ``MPI_Abort``;
:func:`log_only` writes to the log alone. What each rank shows and why: docs/notes-launcher.md.
"""

from __future__ import annotations

import atexit
import fcntl
import os
import re
import select
import sys
import termios
import threading
import time
from pathlib import Path

__all__ = ["BENIGN", "Console", "active", "attach", "drain", "log_only", "start"]

# A TensorFlow (tsl) or Horovod C++ log line: "2024-01-01 12:00:00.123456: W tensorflow/..." ("[...]" for Horovod).
_CPP = re.compile(r"^\[?\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: ([IWEF]) ")
_ABSL = re.compile(r"^([IWEF])\d{4} \d\d:\d\d:\d+\.\d+ +\d+ ")  # absl / glog ("00:00:<epoch s>" before its set-up)
_PY_LOGGING = re.compile(r"^(WARNING|ERROR|CRITICAL)[: ]")
_OURS = re.compile(r"^pardnn-\w+: (warning|error)\b")
_PY_WARNING = re.compile(r"\w+Warning: ")
_LEVELS = {"I": "info", "W": "warning", "E": "error", "F": "error", "WARNING": "warning", "ERROR": "error",
           "CRITICAL": "error", "warning": "warning", "error": "error"}
# Warnings that are expected on every run of this launcher and say nothing about it.
BENIGN = (
    re.compile(r"GPU trace was not collected"),  # profiling on CPU devices: there is no GPU trace
    re.compile(r"^WARNING: All log messages before absl::InitializeLog\(\) is called"),  # TensorFlow >= 2.16 loading
    # The `tensorflow` wheel (>= 2.16) probing CUDA on a machine without a GPU driver; where GPUs were
    # detected and TensorFlow cannot use them, placing on them fails with TensorFlow's own error.
    re.compile(r"failed call to cuInit: "),
)
_BUFFER_LIMIT = 8 << 20  # output kept before the log file exists
_IDLE_SECONDS = 0.2


class Console:
    """The fd-level tee of one process (see the module docstring)."""

    def __init__(self, rank: int | None = None) -> None:
        self.rank = rank
        self.node: str | None = None
        self.several = False
        self._lock = threading.RLock()
        self._log: int | None = None
        self.path: Path | None = None
        self._early: list[bytes] = []
        self._early_bytes = 0
        self._pipes: dict[int, _Pipe] = {}
        self.terminal = False  # whether the original standard error is a terminal (progress bars)

    # ------------------------------------------------------------------ set-up
    def start(self) -> None:
        self.terminal = os.isatty(2)
        for fd in (1, 2):
            try:
                os.fstat(fd)
            except OSError:
                continue  # nothing to tee (closed descriptor)
            self._pipes[fd] = _Pipe(self, fd)
        atexit.register(self.close)

    def attach(self, path: Path, rank: int, node: str, several: bool) -> None:
        """Write everything so far, and from now on, to ``path``; filter as ``rank`` of ``node``."""
        with self._lock:
            self.rank, self.node, self.several = rank, node, several
            if self._log is not None:
                return
            self._log = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o666)
            self.path = path
            for chunk in self._early:
                _write_all(self._log, chunk)
            self._early, self._early_bytes = [], 0

    def log(self, data: bytes) -> None:
        with self._lock:
            if self._log is not None:
                try:
                    _write_all(self._log, data)
                except OSError:
                    pass
            elif self._early_bytes < _BUFFER_LIMIT:
                self._early.append(data)
                self._early_bytes += len(data)

    def drain(self, timeout: float = 3.0) -> None:
        """Wait until what fds 1 and 2 received so far is in the log and (filtered) on the console."""
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        deadline = time.monotonic() + timeout
        for pipe in list(self._pipes.values()):
            pipe.drain(deadline)

    def close(self) -> None:
        """Put fds 1 and 2 back, copy what is left, close the log (at exit)."""
        self.drain()
        for pipe in list(self._pipes.values()):
            pipe.close()
        self._pipes.clear()
        with self._lock:
            if self._log is not None:
                os.close(self._log)
                self._log = None

    # ------------------------------------------------------------------ filter
    def shown(self, text: str, level: str | None) -> str | None:
        """The console's version of one line of this rank (``None``: log file only)."""
        if level == "info" or any(pattern.search(text) for pattern in BENIGN):
            return None
        root = self.rank in (None, 0)
        if not root and level not in ("warning", "error"):
            return None
        if self.several and level in ("warning", "error") and f"rank {self.rank} (node" not in text:
            return f"[rank {self.rank} {self.node}] {text}"
        return text


def classify(line: str) -> tuple[str | None, bool]:
    """The level of a line (``info``, ``warning``, ``error``, or ``None`` when it has none) and whether
    it is a TensorFlow-style log line (whose unmarked continuation lines share its level)."""
    for pattern, native in ((_CPP, True), (_ABSL, True), (_PY_LOGGING, False), (_OURS, False)):
        match = pattern.match(line)
        if match:
            return _LEVELS[match.group(1)], native
    if line.startswith("Traceback (most recent call last):"):
        return "error", False
    if _PY_WARNING.search(line):
        return "warning", False
    return None, False


class _Pipe:
    """One redirected descriptor: the pipe, the console copy of the original, and the copying thread."""

    def __init__(self, console: Console, fd: int) -> None:
        self.console = console
        self.fd = fd
        self.original = os.dup(fd)
        self.read_fd, write_fd = os.pipe()
        os.dup2(write_fd, fd)
        os.close(write_fd)
        # Wakes the thread at close: a child that inherited fd (Open MPI's singleton server, started when a
        # run without mpirun initialises MPI) keeps the pipe's write end open, so EOF can come long after.
        self.stop_fd, self.stop_write_fd = os.pipe()
        self.busy = False
        self.pending = ""
        self.lock = threading.Lock()
        self.closed = threading.Event()
        self.inherited: str | None = None  # level of a TensorFlow message whose continuation lines follow
        self.in_traceback = False
        self.thread = threading.Thread(target=self._pump, name=f"pardnn-console-{fd}", daemon=True)
        self.thread.start()

    def _pump(self) -> None:
        while True:
            try:
                ready, _, _ = select.select([self.read_fd, self.stop_fd], [], [],
                                            _IDLE_SECONDS if self.pending else None)
            except (OSError, ValueError):
                return
            with self.lock:
                if not ready:
                    self._partial()
                    continue
                if self.read_fd not in ready:  # close(): everything written before it has been read
                    self._partial(force=True)
                    return
                self.busy = True
                try:
                    data = os.read(self.read_fd, 65536)
                except OSError:
                    data = b""
                if not data:
                    self._partial(force=True)
                    self.busy = False
                    return
                self.console.log(data)
                self._lines(data.decode("utf-8", "replace"))
                self.busy = False

    def _lines(self, text: str) -> None:
        parts = re.split(r"(?<=[\r\n])", self.pending + text)
        self.pending = parts.pop() if parts and not parts[-1].endswith(("\n", "\r")) else ""
        self.inherited = None  # continuation lines arrive in the write of their first line
        for part in parts:
            if part:
                self._emit(part)

    def _emit(self, part: str) -> None:
        line = part.rstrip("\r\n")
        level, native = classify(line)
        if self.in_traceback:
            level = "error"
            self.in_traceback = line[:1].isspace() or not line
        elif line.startswith("Traceback (most recent call last):"):
            self.in_traceback = True
        if native:
            self.inherited = level
        elif level is None and self.inherited is not None and line and not line.startswith(("pardnn-", "[")):
            level = self.inherited
        else:
            self.inherited = None
        shown = self.console.shown(line, level)
        if shown is not None:
            self._to_console(shown + part[len(line):])

    def _partial(self, force: bool = False) -> None:
        if not self.pending:
            return
        if force:
            part, self.pending = self.pending, ""
            self._emit(part)
        elif self.console.rank in (None, 0) and classify(self.pending)[0] is None:
            part, self.pending = self.pending, ""
            self._to_console(part)  # a progress bar's update: shown now, not at the next newline

    def _to_console(self, text: str) -> None:
        try:
            _write_all(self.original, text.encode("utf-8", "replace"))
        except OSError:
            pass  # the console went away (closed terminal): the log file still has it

    def drain(self, deadline: float) -> None:
        while time.monotonic() < deadline and self.thread.is_alive():
            with self.lock:
                if not self.busy and _unread(self.read_fd) == 0:
                    self._partial(force=True)
                    return
            time.sleep(0.01)

    def close(self) -> None:
        os.dup2(self.original, self.fd)  # closes our write end: the thread reads EOF and ends, unless a child holds it
        self.drain(time.monotonic() + 3.0)  # what this process wrote is read (as drain() waits for it)
        os.write(self.stop_write_fd, b"x")  # then stop at once rather than wait for the child's EOF
        self.thread.join(timeout=10.0)
        for fd in (self.stop_fd, self.stop_write_fd):
            os.close(fd)


def _unread(fd: int) -> int:
    buffer = bytearray(4)
    try:
        fcntl.ioctl(fd, termios.FIONREAD, buffer)
    except OSError:
        return 0
    return int.from_bytes(buffer, sys.byteorder)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


_active: Console | None = None


def start(rank: int | None = None) -> Console:
    """Redirect fds 1 and 2 through a :class:`Console` (once per process); ``rank``: the launcher's guess."""
    global _active
    if _active is None:
        _active = Console(rank)
        _active.start()
    return _active


def active() -> Console | None:
    return _active


def attach(path: Path, rank: int, node: str, several: bool) -> bool:
    """Send the active console's output to ``path`` too; ``False`` when no console was started."""
    if _active is None:
        return False
    _active.attach(path, rank, node, several)
    return True


def drain(timeout: float = 3.0) -> None:
    """:meth:`Console.drain` of the active console; flushes Python's streams either way."""
    if _active is not None:
        _active.drain(timeout)
    else:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass


def log_only(text: str) -> Path | None:
    """Write ``text`` to the active console's log file only, not to the console (a traceback the console
    replaces with one line); the log's path, or ``None`` when there is no log file to write to."""
    if _active is None or _active.path is None:
        return None
    _active.log(text.encode("utf-8", "replace"))
    return _active.path
