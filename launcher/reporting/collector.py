"""The collector: what one rank measured, as JSON lines, and the figures the summary is made of.

A :class:`Collector` records phases (:meth:`Collector.phase`), every training iteration
(:meth:`Collector.iteration`) and the host's CPU and memory over the window; :meth:`Collector.flush`
writes them to ``rank-<r>.jsonl`` atomically. :func:`window_throughput` is the throughput over the
window ``[start, end)``. The memory probe is passed in, so this module needs neither TensorFlow nor MPI.
What is measured how: docs/notes-launcher.md.
"""

from __future__ import annotations

import math
import resource
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from launcher.files import write_json_lines

__all__ = ["Collector", "MemoryProbe", "host_sample", "peak_rss_bytes", "process_rss_bytes", "window_throughput"]

MemoryProbe = Callable[[], Mapping[str, int | None]]

try:
    import psutil
except ImportError:  # psutil is in the [dist] extra; without it host figures are left out
    psutil = None


def peak_rss_bytes() -> int:
    """Peak resident set size of this process (``getrusage``; Linux reports KiB)."""
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def process_rss_bytes() -> int:
    """Current resident set size of this process."""
    if psutil is not None:
        return int(psutil.Process().memory_info().rss)
    return peak_rss_bytes()


def host_sample() -> dict[str, Any]:
    """Host memory in use and in all, CPU count (empty without psutil)."""
    if psutil is None:
        return {}
    memory = psutil.virtual_memory()
    return {"memory_used_bytes": int(memory.total - memory.available), "memory_total_bytes": int(memory.total),
            "cpus": psutil.cpu_count()}


def window_throughput(step_seconds: Sequence[float], window: tuple[int, int], samples_per_step: int,
                      tokens_per_step: int | None) -> dict[str, Any]:
    """Throughput over iterations ``window[0] .. window[1]-1`` of ``step_seconds`` (one entry per iteration).

    Returns ``steps``, ``seconds`` (their sum), ``samples_per_s``, ``tokens_per_s`` (``None`` unless a
    language model), and the mean, median and 90th percentile step time in milliseconds. An
    incomplete window (a stopped run) uses the iterations it has, and says so in ``complete``.
    """
    start, end = window
    times = np.asarray(step_seconds[start:end], dtype=np.float64)
    seconds = float(times.sum())
    steps = int(times.size)
    rate = steps / seconds if seconds > 0 else 0.0
    return {
        "window": [start, end],
        "complete": steps == end - start,
        "steps": steps,
        "seconds": seconds,
        "samples_per_s": rate * samples_per_step,
        "tokens_per_s": None if tokens_per_step is None else rate * tokens_per_step,
        "step_ms_mean": float(times.mean() * 1e3) if steps else None,
        "step_ms_median": float(np.median(times) * 1e3) if steps else None,
        "step_ms_p90": float(np.percentile(times, 90) * 1e3) if steps else None,
    }


class Collector:
    """Records one rank's events and writes them; thread-safe (the SIGTERM watcher flushes too).

    Parameters
    ----------
    path:
        The JSON-lines file to write (``None``: keep in memory only).
    identity:
        Fields every record carries (``rank``, ``node``).
    flush_every:
        Seconds between periodic flushes during training.
    clock:
        Monotonic seconds (tests pass a fake).
    """

    def __init__(self, path: Path | None, identity: Mapping[str, Any], *, flush_every: float = 30.0,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.path = path
        self.identity = dict(identity)
        self._clock = clock
        self._flush_every = flush_every
        self._started = clock()
        self._last_flush = self._started
        self._lock = threading.RLock()
        self._records: list[dict[str, Any]] = []
        self.phases: dict[str, float] = {}
        self.step_seconds: list[float] = []
        self.first_iteration = 0  # a resumed run's first iteration: step_seconds[0] is its time
        self.losses: list[float] = []
        self.input_waits: list[float] = []  # seconds each iteration waited for its batch (the input)
        self.input_source: str | None = None  # "dataset" (tf.data in the graph) or "function" (fed per step)
        self.validations: list[dict[str, Any]] = []  # [eval]: {iteration, loss, metrics, samples, seconds}
        self.loss_scaling: dict[str, Any] = {}  # with loss scaling: the last scale, the steps skipped
        self._probe: MemoryProbe | None = None
        self._memory_source = "process-rss"
        self.device_peak_bytes: dict[str, int] = {}
        self.host_peak_used_bytes = 0
        self._window: tuple[int, int] | None = None
        self._window_marks: dict[str, Any] = {}
        self.host_window: dict[str, Any] = {}
        self._progress = 0
        self._phase = "start"
        self._final = False
        self.event("start", **host_sample())

    # ------------------------------------------------------------------ recording
    def event(self, kind: str, **fields: Any) -> None:
        record = {"event": kind, "t": round(self._clock() - self._started, 6), **self.identity, **fields}
        with self._lock:
            self._records.append(record)
            self._progress += 1

    def progress(self) -> tuple[int, int, str]:
        """``(events so far, iterations completed, current phase)``: what the stall watchdog watches."""
        return self._progress, self.first_iteration + len(self.step_seconds), self._phase

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time the block as phase ``name`` (its seconds are recorded even if the block raises)."""
        start = self._clock()
        with self._lock:
            self._phase = name
            self._progress += 1
        try:
            yield
        finally:
            seconds = self._clock() - start
            self.phases[name] = self.phases.get(name, 0.0) + seconds
            self.event("phase", name=name, seconds=seconds)

    def watch_memory(self, probe: MemoryProbe, source: str, window: tuple[int, int]) -> None:
        """Sample ``probe`` (device name → bytes) every iteration; measure the host over ``window``."""
        self._probe = probe
        self._memory_source = source
        self._window = window
        self._sample_memory()

    def _sample_memory(self) -> None:
        if self._probe is not None:
            for device, used in self._probe().items():
                if used is not None:
                    self.device_peak_bytes[device] = max(self.device_peak_bytes.get(device, 0), int(used))
        used = host_sample().get("memory_used_bytes")
        if used is not None:
            self.host_peak_used_bytes = max(self.host_peak_used_bytes, used)

    def before_iteration(self, index: int) -> None:
        """Call before running iteration ``index``: opens and closes the host measurement of the window."""
        if self._window is None:
            return
        if index == self._window[0]:
            self._open_window()
        elif index == self._window[1]:
            self._close_window()

    def _open_window(self) -> None:
        self._window_marks = {"wall": time.perf_counter()}
        if psutil is not None:
            psutil.cpu_percent(None)
            self._window_marks["process_cpu"] = sum(psutil.Process().cpu_times()[:2])

    def _close_window(self) -> None:
        if not self._window_marks or self.host_window:
            return
        wall = time.perf_counter() - self._window_marks["wall"]
        stats: dict[str, Any] = {"seconds": wall}
        if psutil is not None:
            stats["host_cpu_percent"] = float(psutil.cpu_percent(None))
            busy = sum(psutil.Process().cpu_times()[:2]) - self._window_marks["process_cpu"]
            stats["process_cpu_cores"] = busy / wall if wall > 0 else None
            stats.update(host_sample())
        self.host_window = stats
        self.event("host_window", **stats)

    def iteration(self, index: int, seconds: float, loss: float | None = None, learning_rate: float | None = None,
                  loss_scale: float | None = None, skipped: bool | None = None,
                  input_wait: float | None = None) -> bool:
        """Record iteration ``index``: its wall seconds, loss, (a Keras optimizer's) learning rate,
        (with loss scaling) the scale it used and whether it skipped its update, and the seconds it
        waited for its batch; samples memory; flushes periodically (and at the end of the measured
        window): returns whether it flushed."""
        self._sample_memory()
        self.step_seconds.append(seconds)
        if input_wait is not None:
            self.input_waits.append(max(float(input_wait), 0.0))
        loss = None if loss is None or not math.isfinite(loss) else float(loss)  # JSON null: a float16 overflow
        if loss is not None:
            self.losses.append(loss)
        extra: dict[str, Any] = {} if learning_rate is None else {"learning_rate": float(learning_rate)}
        if input_wait is not None:
            extra["input_wait_s"] = max(float(input_wait), 0.0)
        if loss_scale is not None:
            extra.update(loss_scale=loss_scale, skipped=bool(skipped))
            self.loss_scaling = {"last_scale": loss_scale,
                                 "skipped_steps": self.loss_scaling.get("skipped_steps", 0) + bool(skipped)}
        self.event("iteration", index=index, seconds=seconds, loss=loss, rss_bytes=process_rss_bytes(), **extra)
        window_closed = self._window is not None and index + 1 == self._window[1]
        if window_closed:
            self._close_window()
        if self.path is not None and (window_closed or self._clock() - self._last_flush >= self._flush_every):
            self.flush("running")
            return True
        return False

    def validated(self, record: dict[str, Any]) -> None:
        """Record a validation (every rank's average): in the rank's records and the summary's list."""
        self.validations.append(dict(record))
        self.event("eval", **record)

    # ------------------------------------------------------------------ results
    def memory(self) -> dict[str, Any]:
        """Peak bytes per device (and where the figure comes from), process RSS peak, host peak in use."""
        return {"source": self._memory_source, "device_peak_bytes": dict(self.device_peak_bytes),
                "process_peak_rss_bytes": peak_rss_bytes(), "host_peak_used_bytes": self.host_peak_used_bytes or None}

    def node_summary(self, window: tuple[int, int], samples_per_step: int,
                     tokens_per_step: int | None) -> dict[str, Any]:
        """This node's figures for the summary: throughput over the window, phases, memory, host."""
        first = self.first_iteration
        shifted = (max(window[0] - first, 0), max(window[1] - first, 0))
        throughput = window_throughput(self.step_seconds, shifted, samples_per_step, tokens_per_step)
        throughput["window"] = list(window)
        throughput["complete"] = throughput["complete"] and first <= window[0]
        return {
            **self.identity,
            "iterations_run": len(self.step_seconds),
            "first_iteration": first,
            "throughput": throughput,
            "phases_seconds": dict(self.phases),
            "memory": self.memory(),
            "host": self.host_window,
            "final_loss": self.losses[-1] if self.losses else None,
            **({"loss_scaling": dict(self.loss_scaling)} if self.loss_scaling else {}),
            **({"input": self.input_figures(shifted)} if self.input_waits else {}),
        }

    def input_figures(self, window: tuple[int, int]) -> dict[str, Any]:
        """How long the steps of ``window`` (positions in this run's lists) waited for their batches."""
        start, end = window
        waits = np.asarray(self.input_waits[start:end] or self.input_waits, dtype=np.float64)
        steps = np.asarray(self.step_seconds[start:end] or self.step_seconds, dtype=np.float64)
        # A dataset's wait is inside the step; a function's batch is made before it (the step's time excludes it).
        total = float(steps.sum()) + (float(waits.sum()) if self.input_source == "function" else 0.0)
        return {"source": self.input_source, "wait_ms_median": float(np.median(waits) * 1e3),
                "wait_ms_max": float(waits.max() * 1e3), "wait_share": float(waits.sum() / max(total, 1e-12))}

    def flush(self, status: str, message: str | None = None) -> None:
        """Write every record so far, then a ``status`` record, to :attr:`path` atomically. After a final
        status (anything but ``running``), a periodic ``running`` flush does not overwrite it."""
        if self.path is None:
            return
        with self._lock:
            if status == "running" and self._final:
                return
            self._final = status != "running"
            records = [*self._records, {"event": "status", "t": round(self._clock() - self._started, 6),
                                        **self.identity, "status": status, "message": message}]
            write_json_lines(self.path, records)
            self._last_flush = self._clock()
