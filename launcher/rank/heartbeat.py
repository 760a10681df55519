"""Stall detection without a collective: a heartbeat file and a watchdog thread per rank.

A :class:`Watchdog` writes this rank's :class:`Heartbeat` (``OUT/<run>/heartbeat-<r>.json``) every
``interval`` seconds, reads the others' and reports a :class:`Stall` when no rank has progressed for the
stall timeout (:func:`stall_timeout`: ``--stall-timeout``, else ``max(60 s, 20 x the median step)``;
``0`` turns detection off). The output folder must be shared by all nodes for ranks to see each other.
The rules and why the file is written in place: docs/notes-launcher.md.
"""

from __future__ import annotations

import json
import os
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from launcher.files import file_mode

__all__ = ["HEARTBEAT_FILE", "STARTUP_SECONDS", "Heartbeat", "Stall", "Watchdog", "default_timeout",
           "read_heartbeat", "stall_timeout"]

HEARTBEAT_FILE = "heartbeat-{rank}.json"
RECORD_BYTES = 1024
STARTUP_SECONDS = 1800.0  # before the first iteration: building, profiling, partitioning, the first step
FLOOR_SECONDS = 60.0
STEP_FACTOR = 20.0


def default_timeout(step_seconds: Sequence[float]) -> float:
    """``max(60 s, 20 x median step)`` over the last 100 steps (the floor when none were measured)."""
    recent = list(step_seconds[-100:])
    return max(FLOOR_SECONDS, STEP_FACTOR * statistics.median(recent)) if recent else FLOOR_SECONDS


def stall_timeout(setting: float | None, step_seconds: Sequence[float]) -> float:
    """Seconds without progress that make a stall: see the module docstring."""
    if not step_seconds:
        return max(STARTUP_SECONDS, setting or 0.0)
    return setting if setting is not None else default_timeout(step_seconds)


class Heartbeat:
    """This rank's heartbeat file; :meth:`update` sets fields, :meth:`write` writes them (thread-safe)."""

    def __init__(self, directory: Path, rank: int, node: str) -> None:
        self.path = directory / HEARTBEAT_FILE.format(rank=rank)
        self._lock = threading.Lock()
        self.fields: dict[str, Any] = {"rank": rank, "node": node, "pid": os.getpid(), "beat": 0, "progress": 0,
                                       "iteration": None, "phase": None, "status": "running",
                                       "files_final": False, "run_files": False, "exiting": False, "time": time.time()}

    def update(self, **fields: Any) -> None:
        with self._lock:
            self.fields.update(fields)

    def write(self, **fields: Any) -> None:
        with self._lock:
            self.fields.update(fields, time=time.time())
            data = json.dumps(self.fields).encode()
            if len(data) >= RECORD_BYTES:  # only a node name of hundreds of characters does this
                data = json.dumps({**self.fields, "node": str(self.fields["node"])[:200]}).encode()[:RECORD_BYTES - 1]
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, file_mode())
            except OSError:
                return  # the folder went away: stall detection must not end the run
            try:
                os.write(fd, data.ljust(RECORD_BYTES - 1) + b"\n")
            except OSError:
                pass
            finally:
                os.close(fd)


def read_heartbeat(path: Path) -> dict[str, Any] | None:
    """A heartbeat record, or ``None`` when missing, unreadable or torn mid-write."""
    try:
        record = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


@dataclass(frozen=True)
class Stall:
    """A stall verdict: the one-line message, the ranks named, and the lowest rank still beating."""

    message: str
    ranks: tuple[int, ...]
    silent: tuple[int, ...]
    leader: int


@dataclass
class _Peer:
    beat: Any = None
    progress: Any = None
    beat_seen: float = 0.0
    progress_seen: float = 0.0
    record: dict[str, Any] | None = None


class Watchdog:
    """The thread of the module docstring. ``progress()`` gives ``(count, iterations, phase)`` and
    ``steps()`` the step times so far; ``on_stall(stall)`` runs in the thread (it ends the process)."""

    def __init__(self, heartbeat: Heartbeat, nodes: Sequence[str], setting: float | None,
                 progress: Callable[[], tuple[int, int, str]], steps: Callable[[], Sequence[float]],
                 on_stall: Callable[[Stall], None], *, interval: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.heartbeat = heartbeat
        self.rank = int(heartbeat.fields["rank"])
        self.nodes = list(nodes)
        self.setting = setting
        self._progress, self._steps, self._on_stall = progress, steps, on_stall
        self.interval = interval
        self._clock = clock
        started = clock()
        self._peers = {r: _Peer(beat_seen=started, progress_seen=started) for r in range(len(nodes)) if r != self.rank}
        self._own_progress: int | None = None
        self._own_seen = self._last_poll = started
        self._stop = threading.Event()
        self._closed_at: float | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> Watchdog:
        self._thread = threading.Thread(target=self._run, name="pardnn-watchdog", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop watching (the end of training, or the run is ending for another reason); :meth:`silent`
        then judges the peers as of the last round."""
        if not self._stop.is_set():
            self._closed_at = self._last_poll
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            stall = self.poll()
            if stall is not None and not self._stop.is_set():
                self._stop.set()
                self._on_stall(stall)
                return

    def silent_after(self, timeout: float) -> float:
        return max(3 * self.interval, min(10.0, timeout / 2))

    def poll(self) -> Stall | None:
        """One round: write this rank's heartbeat, read the others', judge (see the module docstring)."""
        now = self._clock()
        frozen = now - self._last_poll > max(3 * self.interval, 5.0)
        self._last_poll = now
        if frozen:  # this process was stopped (SIGSTOP) or starved: what it saw before says nothing now
            self._own_seen = now
            for peer in self._peers.values():
                peer.beat_seen = peer.progress_seen = now
        count, iterations, phase = self._progress()
        if count != self._own_progress:
            self._own_progress, self._own_seen = count, now
        self.heartbeat.write(beat=int(self.heartbeat.fields["beat"]) + 1, progress=count,
                             iteration=iterations - 1 if iterations else None, phase=phase)
        for rank, peer in self._peers.items():
            record = read_heartbeat(self.heartbeat.path.with_name(HEARTBEAT_FILE.format(rank=rank)))
            if record is None:
                continue
            peer.record = record
            if record.get("beat") != peer.beat:
                peer.beat, peer.beat_seen = record.get("beat"), now
            if record.get("progress") != peer.progress:
                peer.progress, peer.progress_seen = record.get("progress"), now
        if self.setting == 0:
            return None  # stall detection off: the heartbeat still tells the peers this rank is alive
        timeout = stall_timeout(self.setting, self._steps())
        last = max([self._own_seen, *(p.progress_seen for p in self._peers.values())])
        if now - last <= timeout:
            return None
        return self.verdict(now, timeout, iterations)

    def silent(self, now: float | None = None, timeout: float | None = None) -> list[int]:
        """Ranks whose heartbeat stopped changing (stopped, or hung with the process frozen)."""
        now = (self._closed_at if self._closed_at is not None else self._clock()) if now is None else now
        after = self.silent_after(timeout if timeout is not None else stall_timeout(self.setting, self._steps()))
        return sorted(r for r, p in self._peers.items() if now - p.beat_seen > after)

    def peer(self, rank: int) -> dict[str, Any] | None:
        """The last heartbeat record read from ``rank`` (``None`` before any)."""
        return self._peers[rank].record if rank in self._peers else None

    def where(self, rank: int, iterations: int | None = None) -> str:
        if rank == self.rank:
            record: dict[str, Any] = {"iteration": iterations - 1 if iterations else None,
                                      "phase": self.heartbeat.fields["phase"]}
        else:
            record = self._peers[rank].record or {}
        place = (f"at iteration {record['iteration']}" if record.get("iteration") is not None
                 else f"in phase {record.get('phase') or 'start-up'} (no iteration yet)")
        return f"rank {rank} (node {self.nodes[rank]}) {place}"

    def verdict(self, now: float, timeout: float, iterations: int) -> Stall:
        silent = self.silent(now, timeout)
        live = [r for r in range(len(self.nodes)) if r not in silent]
        head = f"no iteration completed on any rank for {timeout:g} s (stall timeout)"
        if silent:
            named = silent
            parts = [f"{self.where(r).replace(' at ', ' last seen at ', 1)} stopped responding "
                     f"(no heartbeat for {now - self._peers[r].beat_seen:.0f} s)" for r in silent]
            parts.append(f"{self.where(self.rank, iterations)} waits for it")
        else:
            def reached(rank: int) -> int:
                if rank == self.rank:
                    return iterations
                record = self._peers[rank].record or {}
                return -1 if record.get("iteration") is None else int(record["iteration"]) + 1
            lowest = min(reached(r) for r in live)
            named = [r for r in live if reached(r) == lowest]
            alive = ": every rank's heartbeat is alive, so the step itself hangs (a collective, a device, the input)"
            parts = [", ".join(self.where(r, iterations) for r in named) + alive]
        return Stall(f"{head}: {'; '.join(parts)}", tuple(named), tuple(silent), min(live))
