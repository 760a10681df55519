"""How a run ends when it cannot finish: every rank stops within seconds, and one line says why.

:func:`end` is where every error ends (``pardnn-launch`` calls it with the error, the topology and the
run's state): an exception on one rank goes to :func:`fail` (one line, its files, ``MPI_Abort``); an
:class:`AgreedError`, found by every rank, is printed by rank 0 alone; a stop signal or a stall ends
through :mod:`launcher.rank.ending`. :func:`exit_code` and :func:`status_of` map an error to its exit code
and status. The rules: docs/notes-launcher.md.
"""

from __future__ import annotations

import logging
import signal
import sys
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING

from launcher.errors import AgreedError, Stalled, Stopped, Terminated
from launcher.rank.state import RunState
from launcher.reporting import console
from pardnn.errors import InfeasibleError, PardnnError

if TYPE_CHECKING:
    from launcher.cluster.topology import Topology

__all__ = ["EXIT_ERROR", "EXIT_INFEASIBLE", "EXIT_INTERRUPTED", "EXIT_STALLED", "EXIT_TERMINATED", "AgreedError",
           "end", "exit_code", "fail", "one_line", "shared", "status_of"]

logger = logging.getLogger(__name__)

EXIT_ERROR = 1
EXIT_INFEASIBLE = 3
EXIT_STALLED = Stalled.exit_code
EXIT_TERMINATED = 128 + signal.SIGTERM
EXIT_INTERRUPTED = 128 + signal.SIGINT
PROGRAM = "pardnn-launch"
assert Terminated.exit_code == EXIT_TERMINATED


def exit_code(error: BaseException) -> int:
    """1 for errors, 3 infeasible, 4 stalled, 143 after SIGTERM/SIGUSR1, 130 after Ctrl-C."""
    if isinstance(error, AgreedError) and error.exit_code is not None:
        return error.exit_code
    if isinstance(error, Stopped):
        return error.exit_code
    if isinstance(error, InfeasibleError):
        return EXIT_INFEASIBLE
    if isinstance(error, KeyboardInterrupt):
        return EXIT_INTERRUPTED
    return EXIT_ERROR


def status_of(error: BaseException) -> str:
    """The run's status after ``error``: ``time_limit``, ``interrupted``, ``stalled``, ``inconsistent``,
    ``does_not_fit`` (also TensorFlow out of memory), ``failed``."""
    if isinstance(error, KeyboardInterrupt):
        return "interrupted"
    if type(error).__name__ == "ResourceExhaustedError":  # TensorFlow out of memory (not imported here)
        return "does_not_fit"
    return str(getattr(error, "status", "failed"))


def shared(error: BaseException) -> bool:
    """Whether every rank meets ``error`` at once (so no rank waits for another, and one copy is enough)."""
    return isinstance(error, (AgreedError, Stopped))


def one_line(error: BaseException) -> str:
    """The error as one line: our own errors by their message, anything else with its type."""
    text = str(error).strip() if isinstance(error, PardnnError) else f"{type(error).__name__}: {error}".strip()
    return " ".join(text.split()) or type(error).__name__


def fail(error: BaseException, topology: Topology | None, flush: Callable[[str, str], None] | None = None, *,
         reported: bool = False) -> None:
    """Report ``error`` of this rank and end the job's other ranks; returns (to re-raise) only if none wait.

    ``flush(status, message)`` writes what the run has. Unexpected errors (not a
    :class:`~pardnn.errors.PardnnError`) also write their traceback: to the rank's log when the
    console tee runs (the line says where), else to stderr before the line.
    ``reported``: the line was printed already (the stop and stall paths print their own).
    """
    message = one_line(error)
    if flush is not None:
        try:
            flush(status_of(error), message)
        except Exception:  # reporting the original error matters more than the files
            logger.exception("could not write the run's files")
    multi = topology is not None and topology.size > 1
    if not isinstance(error, (PardnnError, KeyboardInterrupt)):  # a bug: its traceback, in the log if there is one
        console.drain()
        log = console.log_only(f"{PROGRAM}: unexpected error\n{''.join(traceback.format_exception(error))}")
        if log is None:
            logger.error("unexpected error", exc_info=error)
        else:
            message += f" (traceback in {log})"
    # An error every rank found names no rank (the message names the nodes when they differ).
    where = f" on {topology.where()}" if multi and not shared(error) else ""  # type: ignore[union-attr]
    line = f"{PROGRAM}: error{where}: {message}"
    if reported:
        pass
    elif multi and shared(error) and not topology.is_root:  # type: ignore[union-attr]
        logger.info("%s (rank 0 reports it)", line)  # this rank's log only: the console shows rank 0's copy
    else:
        sys.stderr.write(line + "\n")  # one write: a watcher thread may be printing too
        sys.stderr.flush()
    console.drain()
    if multi and not shared(error):
        topology.abort(exit_code(error))  # type: ignore[union-attr]


def end(error: BaseException, topology: Topology | None, state: RunState | None) -> None:
    """Report ``error`` once, write the files, and end the other ranks as the error requires."""
    multi = topology is not None and topology.size > 1
    speaker = not (multi and shared(error)) or topology.is_root  # type: ignore[union-attr]
    flush = None
    if state is not None:
        if state.finisher is not None and isinstance(error, Stopped) and not isinstance(error, Stalled):
            # A stop signal: its watcher may be writing the files, or may not have begun (or never will,
            # once the stop guard closed); the finisher does it once, whoever comes first.
            state.end_stopped(status_of(error), one_line(error))
        def flush(status: str, message: str) -> None:
            state.flush(status, message, speaker=speaker, exit_code=exit_code(error))
    fail(error, topology, flush, reported=state is not None and not state.claim_report())
    if multi and isinstance(error, Stopped):
        RunState.exit_now(exit_code(error))  # peers may be gone: MPI's and Horovod's shutdown would wait
