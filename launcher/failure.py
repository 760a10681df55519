"""How a run ends when it cannot finish: every rank stops within seconds, and says why.

- **An exception on one rank** (:func:`fail`): the rank prints one line naming itself and the
  error, flushes what its collector has, and calls ``MPI_Abort``, which ends every rank of the job
  (the others may be blocked in an allreduce that will never complete; only an abort frees them).
- **An error every rank finds together** (:class:`AgreedError`: ranks sharing a node, nodes that
  computed different placements): no rank is waiting, so rank 0 prints it and all exit normally.
- **SIGTERM** (Slurm's time limit, ``scancel``; :class:`StopGuard`): Python runs signal handlers
  only between bytecodes, and the main thread may sit for long in ``Session.run``. So the C-level
  handler's wake-up byte (``signal.set_wakeup_fd``) wakes a watcher thread, which flushes the
  collector at once and sets the stop flag the training loop checks each iteration. If the main
  thread has not finished ``grace_seconds`` later, the watcher ends the process (exit 143).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING

from launcher.errors import AgreedError, Terminated
from pardnn.errors import InfeasibleError, PardnnError

if TYPE_CHECKING:
    from launcher.topology import Topology

__all__ = ["EXIT_ERROR", "EXIT_INFEASIBLE", "EXIT_TERMINATED", "AgreedError", "StopGuard", "exit_code", "fail",
           "one_line"]

logger = logging.getLogger(__name__)

EXIT_ERROR = 1
EXIT_INFEASIBLE = 3
EXIT_TERMINATED = 128 + signal.SIGTERM
EXIT_INTERRUPTED = 128 + signal.SIGINT
PROGRAM = "pardnn-launch"


def exit_code(error: BaseException) -> int:
    """1 for errors, 3 for an infeasible placement, 143 after SIGTERM, 130 after Ctrl-C."""
    if isinstance(error, AgreedError) and error.exit_code is not None:
        return error.exit_code
    if isinstance(error, Terminated):
        return EXIT_TERMINATED
    if isinstance(error, InfeasibleError):
        return EXIT_INFEASIBLE
    if isinstance(error, KeyboardInterrupt):
        return EXIT_INTERRUPTED
    return EXIT_ERROR


def one_line(error: BaseException) -> str:
    """The error as one line: our own errors by their message, anything else with its type."""
    text = str(error).strip() if isinstance(error, PardnnError) else f"{type(error).__name__}: {error}".strip()
    return " ".join(text.split()) or type(error).__name__


def fail(error: BaseException, topology: Topology | None, flush: Callable[[str, str], None] | None = None) -> None:
    """Report ``error`` of this rank and end the job's other ranks; returns (to re-raise) only if none wait.

    ``flush(status, message)`` writes what the collector has. Unexpected errors (not a
    :class:`~pardnn.errors.PardnnError`) also print their traceback, before the one line.
    """
    message = one_line(error)
    status = "terminated" if isinstance(error, Terminated) else "failed"
    if flush is not None:
        try:
            flush(status, message)
        except Exception:  # reporting the original error matters more than the collector's files
            logger.exception("could not write the collector's files")
    multi = topology is not None and topology.size > 1
    agreed = isinstance(error, AgreedError)
    if not isinstance(error, (PardnnError, KeyboardInterrupt)):
        logger.error("unexpected error", exc_info=error)
    if not (agreed and multi and not topology.is_root):  # type: ignore[union-attr]
        where = f" on {topology.where()}" if multi else ""  # type: ignore[union-attr]
        print(f"{PROGRAM}: error{where}: {message}", file=sys.stderr, flush=True)
    sys.stdout.flush()
    if multi and not agreed:
        topology.abort(exit_code(error))  # type: ignore[union-attr]


class StopGuard:
    """Turns SIGTERM into an immediate flush plus a stop at the next iteration (see module docstring).

    Use as a context manager in the main thread; ``check()`` raises :class:`Terminated` once asked.
    """

    def __init__(self, flush: Callable[[str, str], None], *, grace_seconds: float = 20.0) -> None:
        self._flush = flush
        self._grace = grace_seconds
        self._stop = threading.Event()
        self._closed = threading.Event()
        self._signal: int | None = None
        self._previous_handler: object = None
        self._previous_fd = -1
        self._pipe: tuple[int, int] | None = None

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def check(self) -> None:
        if self._stop.is_set():
            name = signal.Signals(self._signal or signal.SIGTERM).name
            raise Terminated(f"stopped by {name} (time limit or scancel); the collector's files hold what was measured")

    def _handler(self, signum: int, frame: object) -> None:
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
            if signal.SIGTERM not in data:
                continue
            self._signal = signal.SIGTERM
            self._stop.set()
            logger.warning("SIGTERM: writing what was collected; stopping at the next iteration")
            try:
                self._flush("terminated", "stopped by SIGTERM")
            except Exception:
                logger.exception("could not write the collector's files on SIGTERM")
            if not self._closed.wait(self._grace):
                print(f"{PROGRAM}: still running {self._grace:g} s after SIGTERM; exiting", file=sys.stderr, flush=True)
                os._exit(EXIT_TERMINATED)
            return

    def __enter__(self) -> StopGuard:
        if threading.current_thread() is not threading.main_thread():
            return self  # signal handlers can only be installed from the main thread
        read_fd, write_fd = os.pipe()
        os.set_blocking(write_fd, False)
        self._pipe = (read_fd, write_fd)
        self._previous_handler = signal.signal(signal.SIGTERM, self._handler)
        self._previous_fd = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
        threading.Thread(target=self._watch, args=(read_fd,), name="pardnn-sigterm", daemon=True).start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self._closed.set()
        if self._pipe is None:
            return
        signal.set_wakeup_fd(self._previous_fd)
        previous = self._previous_handler if self._previous_handler is not None else signal.SIG_DFL
        signal.signal(signal.SIGTERM, previous)  # type: ignore[arg-type]
        os.close(self._pipe[1])  # the watcher's read returns b"" and it ends, closing the read end
        self._pipe = None
