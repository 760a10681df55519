"""Stop signals: SIGTERM and SIGUSR1 (a time limit), SIGINT (Ctrl-C), answered while the main thread is busy.

Inside ``with StopGuard(on_stop) as guard:`` a signal calls ``on_stop(status, message)`` at once from a
watcher thread, and :meth:`StopGuard.check` (the training loop, each iteration) raises
:class:`Terminated` or :class:`Interrupted`; a main thread still blocked ``grace_seconds`` later is ended
with the signal's exit code. :func:`stop_error` maps a signal to its error. Why SIGUSR1 and the watcher
thread: docs/notes-launcher.md.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from types import TracebackType

from launcher.errors import Interrupted, Stopped, Terminated

__all__ = ["REASONS", "StopGuard", "stop_error"]

logger = logging.getLogger(__name__)

PROGRAM = "pardnn-launch"
# signal -> (exception, message)
REASONS: dict[int, tuple[type[Stopped], str]] = {
    signal.SIGTERM: (Terminated, "stopped by SIGTERM (Slurm's time limit or scancel)"),
    signal.SIGUSR1: (Terminated, "stopped by SIGUSR1 (the time limit, passed on by the batch script)"),
    signal.SIGINT: (Interrupted, "interrupted (SIGINT, Ctrl-C)"),
}


def stop_error(signum: int) -> Stopped:
    kind, message = REASONS[signum]
    return kind(message)


class StopGuard:
    """Turns the stop signals into an immediate ``on_stop`` plus a stop at the next iteration.

    Use as a context manager in the main thread; ``check()`` raises once a signal arrived.
    ``exit_now(code)`` ends the process when the main thread does not come back (default
    ``os._exit``; the launcher drains its console first).
    """

    def __init__(self, on_stop: Callable[[str, str], None], *, grace_seconds: float = 20.0,
                 exit_now: Callable[[int], None] = os._exit) -> None:
        self._on_stop = on_stop
        self._grace = grace_seconds
        self._exit_now = exit_now
        self._stop = threading.Event()
        self._closed = threading.Event()
        self._signal: int | None = None
        self._previous: dict[int, object] = {}
        self._previous_fd = -1
        self._pipe: tuple[int, int] | None = None

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def check(self) -> None:
        if self._stop.is_set():
            raise stop_error(self._signal or signal.SIGTERM)

    def _handler(self, signum: int, frame: object) -> None:
        if self._signal is None:
            self._signal = signum
        self._stop.set()

    def _watch(self, read_fd: int) -> None:
        try:
            self._watch_until_closed(read_fd)
        finally:
            os.close(read_fd)

    def _watch_until_closed(self, read_fd: int) -> None:
        while True:
            try:
                data = os.read(read_fd, 64)
            except OSError:
                return
            if not data or self._closed.is_set():
                return
            received = [s for s in REASONS if s in data]
            if not received:
                continue
            signum = self._signal or received[0]
            self._signal = signum
            self._stop.set()
            error = stop_error(signum)
            logger.info("%s: writing what was measured; stopping at the next iteration", error)
            try:
                self._on_stop(error.status, str(error))
            except Exception:
                logger.exception("could not write the run's files after %s", signal.Signals(signum).name)
            if not self._closed.wait(self._grace):
                print(f"{PROGRAM}: still running {self._grace:g} s after {signal.Signals(signum).name}; exiting",
                      file=sys.stderr, flush=True)
                self._exit_now(error.exit_code)
            return

    def __enter__(self) -> StopGuard:
        if threading.current_thread() is not threading.main_thread():
            return self  # signal handlers can only be installed from the main thread
        read_fd, write_fd = os.pipe()
        os.set_blocking(write_fd, False)
        self._pipe = (read_fd, write_fd)
        for signum in REASONS:
            self._previous[signum] = signal.signal(signum, self._handler)
        self._previous_fd = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
        threading.Thread(target=self._watch, args=(read_fd,), name="pardnn-signals", daemon=True).start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self._closed.set()
        if self._pipe is None:
            return
        signal.set_wakeup_fd(self._previous_fd)
        for signum, previous in self._previous.items():
            signal.signal(signum, previous if previous is not None else signal.SIG_DFL)  # type: ignore[arg-type]
        os.close(self._pipe[1])  # the watcher's read returns b"" and it ends, closing the read end
        self._pipe = None
