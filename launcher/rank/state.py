"""One rank's run: what it knows so far, the files it writes from it, and the ways it ends early.

:class:`RunState` is what :mod:`launcher.core` fills in as the run goes (devices, placement, samples per
step, whether training began) and writes this rank's files and the run's from, at any moment and from any
thread. Its :meth:`~RunState.stop` answers a stop signal (:mod:`launcher.rank.signals`),
:meth:`~RunState.stalled` a stall (:mod:`launcher.rank.heartbeat`), :meth:`~RunState.flush` an error.
Which files: docs/notes-launcher.md.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
import threading
from pathlib import Path
from typing import Any

from launcher.cluster.topology import Topology
from launcher.env import slurm_context
from launcher.errors import Interrupted, Stalled, Terminated
from launcher.files import append_csv_row, write_json
from launcher.rank.ending import Finisher, merge_figures, utc_now, write_figures, write_status
from launcher.rank.heartbeat import HEARTBEAT_FILE, Heartbeat, Stall, Watchdog, read_heartbeat
from launcher.reporting import console
from launcher.reporting.collector import Collector
from launcher.reporting.summary import RESULTS_COLUMNS, results_row, summarize
from launcher.settings import Settings
from launcher.variants import Variant

__all__ = ["RESULTS_FILE", "SUMMARY_FILE", "RunState"]

logger = logging.getLogger("launcher")

SUMMARY_FILE = "summary.json"
RESULTS_FILE = "results.csv"
PROGRAM = "pardnn-launch"
_EXIT = {"time_limit": Terminated.exit_code, "interrupted": Interrupted.exit_code, "stalled": Stalled.exit_code}


@dataclasses.dataclass
class RunState:
    """What the run knows so far on this rank (see the module docstring)."""

    job: Any
    settings: Settings
    topology: Topology
    directory: Path
    collector: Collector
    variant: Variant = dataclasses.field(default_factory=Variant)
    batch_size: int | None = None  # samples per step of one replica (the settings' unless data parallel)
    summary: dict[str, Any] | None = None  # as written to summary.json (rank 0)
    devices: dict[str, Any] = dataclasses.field(default_factory=dict)
    placement: dict[str, Any] = dataclasses.field(default_factory=dict)
    resume_from: Path | None = None  # --resume: the checkpoint every rank resumes from (rank.checkpoint.locate)
    resume_located: bool = False
    allreduce: str | None = None  # the backend averaging gradients (launcher.training.dataparallel); None: one rank
    micro_batches: dict[str, Any] | None = None  # --micro-batches auto: every M tried (planning.micro_report)
    plan: dict[str, Any] | None = None  # --replica-devices auto: every plan tried (launcher.placing.planning)
    samples_per_step: int = 0
    tokens_per_step: int | None = None
    recipe: dict[str, Any] | None = None  # what the step trains with (jobs.recipe): optimizer, schedule, ...
    training: bool = False
    heartbeat: Heartbeat | None = None
    watchdog: Watchdog | None = None
    finisher: Finisher | None = None
    checkpointer: Any = None  # launcher.rank.checkpoint.Checkpointer once training began
    trained: tuple[dict[str, Any] | None, dict[str, Any]] | None = None  # --save-model: the model, its final values
    reported: bool = False  # the one line of a stop or stall was printed
    summary_written: bool = False
    _figures_lock: threading.Lock = dataclasses.field(default_factory=threading.Lock, repr=False)
    _figures_final: bool = False
    _report_lock: threading.Lock = dataclasses.field(default_factory=threading.Lock, repr=False)

    def claim_report(self) -> bool:
        """Whether the caller is the first to report how the run ended (then it prints the one line).

        A stop signal is seen twice: the main thread raises at its next iteration while the signal
        watcher's thread writes the files and announces; whichever comes first prints, once.
        """
        with self._report_lock:
            if self.reported:
                return False
            self.reported = True
            return True

    def count(self, trained: Any) -> None:
        """Take a built step's samples, tokens and recipe (what the summary names it trains with)."""
        self.samples_per_step = int(trained.samples_per_step)
        self.tokens_per_step = None if trained.tokens_per_step is None else int(trained.tokens_per_step)
        made = getattr(trained, "recipe", None)
        if made is not None and hasattr(made, "describe"):
            scale = getattr(made, "loss_scale", None)
            self.recipe = {"optimizer": made.optimizer, "schedule": made.schedule,
                           "precision": getattr(made, "precision", "float32"),
                           "loss_scale": None if scale is None else {  # its settings (rules: the model's Keras)
                               key: value for key, value in dataclasses.asdict(scale).items() if key != "keras3"},
                           "describe": made.describe()}

    # ------------------------------------------------------------------ figures and summaries
    def variant_info(self) -> dict[str, Any]:
        """What ran: ``placer`` (``None`` for data parallelism), ``parallelism``, ``recompute``."""
        variant = self.variant
        return {"placer": variant.placer, "parallelism": variant.parallelism, "recompute": variant.recompute}

    @property
    def replica_batch(self) -> int:
        return self.settings.batch_size if self.batch_size is None else self.batch_size

    def run_info(self) -> dict[str, Any]:
        """What a figures file needs to stand alone in ``pardnn-report``: the run's configuration."""
        settings = self.settings
        return {"job": str(getattr(self.job, "name", "job")), "model": getattr(self.job, "model", None),
                "nodes": self.topology.node_count, "replicas": self.topology.size, **self.variant_info(),
                "devices_per_node": settings.devices_per_node,
                "device_kind": self.devices.get("kind"), "batch_size": self.replica_batch,
                "iterations": settings.iterations, "window": list(settings.window), "costs": settings.costs,
                "memory": settings.memory, "placement_sha256": self.placement.get("sha256"),
                "simulated_makespan_us": self.placement.get("report", {}).get("evaluation", {}).get("makespan_us"),
                "run_dir": str(self.directory)}

    def node_figures(self) -> dict[str, Any]:
        figures = self.collector.node_summary(self.settings.window, self.samples_per_step, self.tokens_per_step)
        figures["placement_sha256"] = self.placement.get("sha256")
        return figures

    def write_figures(self, status: str, figures: dict[str, Any] | None = None) -> None:
        """``figures-<r>.json``; a periodic ``running`` write never replaces a final one (another thread's)."""
        with self._figures_lock:
            if status == "running" and self._figures_final:
                return
            self._figures_final = status != "running"
            write_figures(self.directory, self.topology.rank, status, self.run_info(), figures or self.node_figures())

    def write_summary(self, status: str, nodes: list[dict[str, Any]], extra: dict[str, Any]) -> dict[str, Any]:
        summary = summarize(status=status, job=self.job, settings=self.settings.to_dict(), nodes=nodes,
                            node_count=self.topology.size, devices=self.devices, placement=self.placement,
                            replicas_per_node=self.topology.ranks_per_node, batch_size=self.replica_batch,
                            extra={"run_dir": str(self.directory), "emulated_nodes": self.topology.emulated,
                                   **self.variant_info(), "allreduce": self.allreduce, "slurm": slurm_context(),
                                   **({} if self.micro_batches is None else {"micro_batches": self.micro_batches}),
                                   **({} if self.plan is None else {"plan": self.plan}),
                                   **({} if self.recipe is None else {"training": self.recipe}),
                                   **extra})
        write_json(self.directory / SUMMARY_FILE, summary)
        self.summary_written = True
        self.summary = summary
        append_csv_row(self.settings.out / RESULTS_FILE, RESULTS_COLUMNS, results_row(summary, utc_now(),
                                                                                      self.directory))
        return summary

    def write_status(self, status: str, message: str | None, exit_code: int | None) -> None:
        write_status(self.directory, status, message=message, rank=self.topology.rank, node=self.topology.node,
                     exit_code=exit_code)

    # ------------------------------------------------------------------ ending.RunFiles
    def flush_rank(self, status: str, message: str | None) -> None:
        self.collector.flush(status, message)
        self.write_figures(status)

    def write_run(self, status: str, message: str | None, figures: list[dict[str, Any]], missing: list[int],
                  exit_code: int) -> None:
        if self.training and not self.summary_written:
            self.write_summary(status, figures, {"message": message, "partial": True, "nodes_missing": missing})
        self.write_status(status, message, exit_code)

    # ------------------------------------------------------------------ watching and ending
    def start_watch(self) -> None:
        """Start the heartbeat and the stall watchdog (``stall_timeout`` 0: heartbeat only, no stall)."""
        self.heartbeat = Heartbeat(self.directory, self.topology.rank, self.topology.node)
        self.heartbeat.write()
        self.watchdog = Watchdog(self.heartbeat, self.topology.nodes, self.settings.stall_timeout,
                                 self.collector.progress, lambda: self.collector.step_seconds, self.stalled)
        watchdog = self.watchdog
        self.finisher = Finisher(self, self.heartbeat, self.topology.size,
                                 live=lambda: [r for r in range(self.topology.size) if r not in watchdog.silent()])
        watchdog.start()

    def end_watch(self, status: str, *, final: bool = True) -> None:
        """Stop the watchdog; the heartbeat says ``status`` (and, if ``final``, that this rank's files are)."""
        if self.watchdog is not None:
            self.watchdog.close()
        if self.heartbeat is not None:
            count, iterations, phase = self.collector.progress()
            self.heartbeat.write(status=status, files_final=final, progress=count, phase=phase,
                                 iteration=iterations - 1 if iterations else None)

    def _speak(self, line: str, speaker: bool) -> None:
        if speaker:
            if self.claim_report():
                sys.stderr.write(f"{PROGRAM}: error: {line}\n")  # one write: other threads may print too
                sys.stderr.flush()
        else:
            logger.info("run ended: %s (the leading rank reports it)", line)

    def _ended_by_peer(self) -> tuple[int, str] | None:
        """A peer whose heartbeat says it ended the run (failed, stalled, inconsistent): then a stop signal
        is only mpirun or srun ending the job after it, and the run keeps that peer's status."""
        for rank in range(self.topology.size):
            if rank != self.topology.rank:
                record = read_heartbeat(self.directory / HEARTBEAT_FILE.format(rank=rank)) or {}
                if record.get("status") in ("failed", "stalled", "inconsistent"):
                    return rank, str(record["status"])
        return None

    def stop(self, status: str, message: str) -> None:
        """A stop signal (the signal watcher's thread): write every file now, then let the main thread stop."""
        if self.watchdog is not None:
            self.watchdog.close()
        if self.checkpointer is not None and self.checkpointer.on_stop() and self.checkpointer.saved:
            logger.info("saved checkpoint %s", self.checkpointer.saved[-1])
        if self.end_stopped(status, message) and self.topology.size > 1:
            self.exit_now(_EXIT.get(status, 1))  # all written: a main thread blocked in an allreduce would wait

    def end_stopped(self, status: str, message: str) -> bool:
        """Write every file of a stopped run and say the one line, once: the signal watcher's thread
        and the main thread (which raises at its next iteration) may both come here, and the
        finisher's lock makes the second wait for the first. ``False`` without a finisher (then
        only this rank's files are written)."""
        ended_by = self._ended_by_peer()
        if ended_by is not None:
            status, message = ended_by[1], f"{message} after rank {ended_by[0]} ended the run ({ended_by[1]})"
            self.reported = True  # that rank reported it
        if self.finisher is None:
            self.flush_rank(status, message)
            return False
        self.finisher.finish(status, message, _EXIT.get(status, 1), own_only=ended_by is not None,
                             announce=lambda leader: self._speak(message, leader))
        return True

    def stalled(self, stall: Stall) -> None:
        """A stall (the watchdog's thread): write every live rank's files, say it once, exit."""
        assert self.finisher is not None
        self.finisher.finish("stalled", stall.message, Stalled.exit_code, leader=stall.leader,
                             announce=lambda leader: self._speak(stall.message, leader))
        self.exit_now(Stalled.exit_code)

    def flush(self, status: str, message: str | None, *, speaker: bool, exit_code: int) -> None:
        """After an error (:func:`launcher.rank.failure.fail`): this rank's files, and the run's if it speaks."""
        if self.finisher is not None and self.finisher.ended is not None:
            self.finisher.wait()
            return  # a stop or stall wrote everything
        self.end_watch(status)
        self.flush_rank(status, message)
        if speaker:
            figures, missing = merge_figures(self.directory, self.topology.size)
            if self.topology.is_root:
                self.write_run(status, message, figures, missing, exit_code)
            else:
                self.write_status(status, message, exit_code)

    @staticmethod
    def exit_now(code: int) -> None:
        """End the process now (MPI and Horovod would wait for peers that are gone), output copied first."""
        console.drain()
        os._exit(code)
