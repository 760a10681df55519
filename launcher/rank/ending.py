"""How a run ends early: every live rank's files complete, the run's status in its folder, no collective.

On a stop signal or a stall, :meth:`Finisher.finish` (once per run, in the thread that saw it) has each
rank write its files and the leader merge the nodes' figures (:func:`merge_figures`) into a partial
``summary.json``, the ``results.csv`` row and ``status.json`` (:func:`write_status`). Nothing here uses
MPI: the main thread may be blocked in an allreduce and a peer gone. The protocol: docs/notes-launcher.md.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from launcher.files import write_json
from launcher.rank.heartbeat import HEARTBEAT_FILE, Heartbeat, read_heartbeat

__all__ = ["FIGURES_FILE", "STATUS_FILE", "Finisher", "RunFiles", "merge_figures", "read_figures", "utc_now",
           "write_figures", "write_status"]

logger = logging.getLogger(__name__)

STATUS_FILE = "status.json"
FIGURES_FILE = "figures-{rank}.json"
FIGURES_FORMAT = "pardnn-launch-figures"


def utc_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def write_status(directory: Path, status: str, *, message: str | None = None, rank: int | None = None,
                 node: str | None = None, exit_code: int | None = None) -> None:
    """``status.json``: the run's status, why, who says so, when (atomically replaced)."""
    write_json(directory / STATUS_FILE, {"status": status, "message": message, "rank": rank, "node": node,
                                         "time": utc_now(), "exit_code": exit_code})


def write_figures(directory: Path, rank: int, status: str, run: dict[str, Any], figures: dict[str, Any]) -> None:
    """``figures-<r>.json``: one node's figures (:meth:`Collector.node_summary`) and the run they belong to."""
    write_json(directory / FIGURES_FILE.format(rank=rank),
               {"format": FIGURES_FORMAT, "status": status, "time": utc_now(), "rank": rank, "run": run,
                "figures": figures})


def read_figures(directory: Path, rank: int) -> dict[str, Any] | None:
    """A rank's figures file, or ``None`` when missing or unreadable."""
    try:
        data = json.loads((directory / FIGURES_FILE.format(rank=rank)).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("format") == FIGURES_FORMAT else None


class RunFiles(Protocol):
    """What the finisher writes through (``launcher.core``'s run state)."""

    directory: Path

    def flush_rank(self, status: str, message: str | None) -> None:
        """Write this rank's ``rank-<r>.jsonl`` and ``figures-<r>.json`` with ``status``."""

    def write_run(self, status: str, message: str | None, figures: list[dict[str, Any]], missing: list[int],
                  exit_code: int) -> None:
        """Write the run's files (summary, results row, ``status.json``) from the nodes' figures."""


class Finisher:
    """Ends the run early from any thread, once (see the module docstring).

    ``live()`` gives the ranks still beating (this rank included); ``peer(rank)`` the last heartbeat
    read from a rank (``None`` when not read: then the file is read directly).
    """

    def __init__(self, files: RunFiles, heartbeat: Heartbeat, size: int, *, live: Callable[[], Sequence[int]],
                 deadline: float = 15.0, poll: float = 0.2) -> None:
        self.files = files
        self.heartbeat = heartbeat
        self.rank = int(heartbeat.fields["rank"])
        self.size = size
        self._live = live
        self.deadline = deadline
        self._poll = poll
        self._lock = threading.Lock()
        self.ended: tuple[str, str | None] | None = None
        self.leader: int | None = None
        self._done = threading.Event()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until a :meth:`finish` under way is done (``True`` at once when none began)."""
        return self.ended is None or self._done.wait(self.deadline + 10.0 if timeout is None else timeout)

    def _peer(self, rank: int) -> dict[str, Any] | None:
        return read_heartbeat(self.heartbeat.path.with_name(HEARTBEAT_FILE.format(rank=rank)))

    def _wait(self, ranks: Sequence[int], flag: str, deadline: float) -> list[int]:
        """Wait until each of ``ranks`` shows ``flag`` in its heartbeat; the ones that never did."""
        waiting = set(ranks)
        while waiting:
            waiting = {r for r in waiting if not (self._peer(r) or {}).get(flag)}
            if not waiting or time.monotonic() >= deadline:
                break
            time.sleep(self._poll)
        return sorted(waiting)

    def finish(self, status: str, message: str | None, exit_code: int, *, leader: int | None = None,
               announce: Callable[[bool], None] | None = None, own_only: bool = False) -> None:
        """Write this rank's files, then the run's (leader) or wait for them (others); then
        ``announce(is_leader)``. ``own_only``: this rank's files only (another rank ended the run and
        writes the run's). Once per run: a second caller (a signal during a stall) writes nothing."""
        with self._lock:
            if self.ended is not None:
                return
            self.ended = (status, message)
            deadline = time.monotonic() + self.deadline
            try:
                self.files.flush_rank(status, message)
            except Exception:
                logger.exception("could not write this rank's files")
            self.heartbeat.write(status=status, files_final=True)
            if own_only:
                self._done.set()
                return
            live = sorted(set(self._live()) | {self.rank})
            leader = self.leader = min(live) if leader is None else leader
            others = [r for r in live if r != self.rank]
            if self.rank == leader:
                late = self._wait(others, "files_final", deadline)
                if late:
                    logger.warning("ranks %s did not write their files within %g s; merging what they wrote before",
                                   ", ".join(map(str, late)), self.deadline)
                self._write_run(status, message, exit_code)
                self.heartbeat.write(run_files=True)
                if announce is not None:
                    announce(True)
                # The leader leaves last: srun --kill-on-bad-exit kills the others once one task exits.
                self._wait(others, "exiting", time.monotonic() + min(5.0, self.deadline))
                time.sleep(self._poll)
            else:
                if self._wait([leader], "run_files", deadline + 5.0):
                    logger.warning("rank %d did not write the run's files within %g s", leader, self.deadline + 5.0)
                if announce is not None:
                    announce(False)
                self.heartbeat.write(exiting=True)
            self._done.set()

    def _write_run(self, status: str, message: str | None, exit_code: int) -> None:
        figures, missing = merge_figures(self.files.directory, self.size)
        try:
            self.files.write_run(status, message, figures, missing, exit_code)
        except Exception:
            logger.exception("could not write the run's summary")
            write_status(self.files.directory, status, message=message, rank=self.rank,
                         node=str(self.heartbeat.fields["node"]), exit_code=exit_code)


def merge_figures(directory: Path, size: int) -> tuple[list[dict[str, Any]], list[int]]:
    """The nodes' figures found in ``directory`` (by rank, each with its file's status and time) and
    the ranks without a figures file."""
    figures, missing = [], []
    for rank in range(size):
        found = read_figures(directory, rank)
        if found is None:
            missing.append(rank)
        else:
            figures.append({**found["figures"], "figures_status": found["status"], "figures_time": found["time"]})
    return figures, missing
