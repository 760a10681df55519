"""Choosing M: ``--micro-batches auto`` (job files: ``[train] micro_batches = "auto"``).

:func:`search` tries every power of two M up to the node's batch B that divides it (:func:`candidates`),
calling ``measure(M)`` to build, cost and place the M-copy step graph, and keeps the M with the highest
emulated samples/s whose placement fits (:func:`decide`; none: :class:`NoMicroBatchFits`). Each M gives a
:class:`Trial`; :func:`report` is ``summary.json`` → ``micro_batches``. docs/planning.md (Choosing M) has
the rules and the output; why every M is tried: docs/notes-launcher.md.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from launcher.errors import AgreedError, DoesNotFit
from pardnn.costs.machine import format_bytes
from pardnn.emulation.emulated import strictly_shorter

__all__ = ["AUTO", "Measured", "NoMicroBatchFits", "Trial", "candidates", "decide", "failed", "report",
           "search"]

logger = logging.getLogger("launcher")

AUTO = "auto"

# What a trial's status says (summary.json → micro_batches.tried[].status).
CHOSEN, SLOWER, DOES_NOT_FIT, NO_PLACEMENT, SKIPPED = "chosen", "slower", "does_not_fit", "no_placement", "skipped"


@dataclass(frozen=True)
class Measured:
    """What one M's placement gave: its emulated step, peak memory (largest device) and limit; or,
    when its placer found none, ``error`` (``status`` ``does_not_fit`` or ``no_placement``)."""

    micro_batches: int
    ops: int = 0
    step_us: float | None = None
    peak_bytes: int | None = None
    limit_bytes: int | None = None  # per device (the smallest); None: unlimited
    fits: bool = False
    error: str | None = None
    status: str | None = None  # for an error: DOES_NOT_FIT or NO_PLACEMENT


@dataclass(frozen=True)
class Trial:
    """One line of the table: an M, what it gave, and the verdict (``status``, ``reason``)."""

    micro_batches: int
    status: str
    reason: str
    ops: int | None = None
    emulated_step_ms: float | None = None
    samples_per_s: float | None = None
    peak_memory_bytes: int | None = None
    limit_bytes: int | None = None
    fits: bool | None = None


class NoMicroBatchFits(DoesNotFit):
    """No M's placement fits (exit 3, status ``does_not_fit``); ``report`` is the table for ``summary.json``."""

    def __init__(self, message: str, table: dict[str, Any]) -> None:
        super().__init__(message)
        self.report = table


def candidates(batch: int) -> tuple[list[int], list[int]]:
    """The powers of two up to ``batch``: those dividing it (tried) and those not (skipped)."""
    powers = [1 << shift for shift in range(max(int(batch), 1).bit_length()) if 1 << shift <= batch]
    return [m for m in powers if batch % m == 0], [m for m in powers if batch % m]


def _trial(measured: Measured, batch: int, status: str, reason: str) -> Trial:
    step = measured.step_us
    return Trial(measured.micro_batches, status, reason, measured.ops or None,
                 None if step is None else step / 1e3, None if not step else batch / (step * 1e-6),
                 measured.peak_bytes, measured.limit_bytes, None if measured.error else measured.fits)


def _improves(measured: Measured, best: Measured | None) -> bool:
    """``measured`` fits and its step is strictly shorter than ``best``'s (any fitting one beats ``None``)."""
    return measured.error is None and measured.fits and measured.step_us is not None and (
        best is None or strictly_shorter(measured.step_us, best.step_us))  # type: ignore[arg-type]


def _rate(measured: Measured, batch: int) -> float:
    return batch / (measured.step_us * 1e-6) if measured.step_us else float("inf")


def decide(measured: Sequence[Measured], batch: int, skipped: Sequence[int] = ()) -> tuple[list[Trial], Trial, str]:
    """The table (every M in order, skipped ones included), the chosen trial and why.

    Raises :class:`NoMicroBatchFits` (a :class:`DoesNotFit`: exit 3) naming every M's reason when none fits.
    """
    best: Measured | None = None
    for m in measured:  # in order of M: a larger M must be strictly faster
        if _improves(m, best):
            best = m
    trials: list[Trial] = []
    for m in measured:
        if m.error is not None:
            trials.append(_trial(m, batch, m.status or NO_PLACEMENT, m.error))
        elif not m.fits:
            trials.append(_trial(m, batch, DOES_NOT_FIT, f"peak {format_bytes(m.peak_bytes or 0)} over the limit of "
                                                         f"{format_bytes(m.limit_bytes or 0)}"))
        elif m is best:
            trials.append(_trial(m, batch, CHOSEN, "the highest emulated samples/s that fits"))
        else:
            assert best is not None
            trials.append(_trial(m, batch, SLOWER, f"{_rate(m, batch):,.1f} samples/s, not above M = "
                                                   f"{best.micro_batches}'s {_rate(best, batch):,.1f}"))
    trials += [Trial(m, SKIPPED, f"does not divide the batch {batch}") for m in skipped]
    trials.sort(key=lambda trial: trial.micro_batches)
    if best is None:
        reasons: dict[str, list[str]] = {}  # the same reason for several M is said once
        for trial in trials:
            reasons.setdefault(trial.reason.rstrip("."), []).append(str(trial.micro_batches))
        message = (f"--micro-batches auto: no M fits the devices' memory at batch {batch} ("
                   + "; ".join(f"M = {', '.join(ms)}: {reason}" for reason, ms in reasons.items())
                   + "); not trained. Try more devices, a smaller batch or a lower --reserve")
        raise NoMicroBatchFits(message, {"mode": AUTO, "chosen": None, "why": message,
                                         "tried": [asdict(trial) for trial in trials]})
    chosen = next(t for t in trials if t.status == CHOSEN)
    return trials, chosen, _why(trials, chosen)


def _why(trials: Sequence[Trial], chosen: Trial) -> str:
    """One sentence: the chosen M, its samples/s against M = 1's, and what the others lost by."""
    text = (f"M = {chosen.micro_batches}: the highest emulated samples/s that fits, {chosen.samples_per_s:,.1f} "
            f"(step {chosen.emulated_step_ms:.3f} ms)")
    one = next((t for t in trials if t.micro_batches == 1 and t.samples_per_s), None)
    if one is not None and chosen.micro_batches != 1 and chosen.samples_per_s:
        text += f", {chosen.samples_per_s / one.samples_per_s:.2f}× M = 1's"
    others = {status: [str(t.micro_batches) for t in trials if t.status == status]
              for status in (SLOWER, DOES_NOT_FIT, NO_PLACEMENT, SKIPPED)}
    words = {SLOWER: "slower", DOES_NOT_FIT: "did not fit", NO_PLACEMENT: "had no placement",
             SKIPPED: "do not divide the batch"}
    parts = [f"M = {', '.join(ms)} {words[status]}" for status, ms in others.items() if ms]
    return text + ("; " + "; ".join(parts) if parts else "")


def search(batch: int, measure: Callable[[int], Measured], *,
           keep: Callable[[int], None] | None = None) -> tuple[list[Trial], Trial, str]:
    """Try every M of :func:`candidates` with ``measure``; the table, the chosen trial and why.

    ``measure(M)`` builds, costs and places the M-copy graph (collective in the launcher). ``keep(M)``
    is called after a measurement that is the fastest fitting one so far, so the caller can keep that
    M's graph and placement and drop the others'. Logs a line per M (the search is long: each M is
    a build, a costing and a placement).
    """
    tried, skipped = candidates(batch)
    if skipped:
        logger.info("micro-batches auto: M = %s skipped (not dividing the batch %d)",
                    ", ".join(map(str, skipped)), batch)
    measured: list[Measured] = []
    best: Measured | None = None
    for index, micro in enumerate(tried, 1):
        logger.info("micro-batches auto: trying M = %d (%d of %d): build, cost, place", micro, index, len(tried))
        result = measure(micro)
        measured.append(result)
        logger.info("micro-batches auto: M = %d: %s", micro, _line(result, batch))
        if _improves(result, best):
            best = result
            if keep is not None:
                keep(micro)
    trials, chosen, why = decide(measured, batch, skipped)
    logger.info("micro-batches auto: chose %s", why)
    return trials, chosen, why


def _line(m: Measured, batch: int) -> str:
    if m.error is not None:
        return f"{m.status or NO_PLACEMENT}: {m.error}"
    limit = "unlimited" if m.limit_bytes is None else format_bytes(m.limit_bytes)
    return (f"{m.ops:,} ops, emulated step {(m.step_us or 0) / 1e3:.3f} ms, {_rate(m, batch):,.1f} samples/s, "
            f"peak {format_bytes(m.peak_bytes or 0)} of {limit}{'' if m.fits else ' (does not fit)'}")


def failed(micro: int, error: AgreedError) -> Measured:
    """An M whose placer found no placement (``does_not_fit``) or gave none (``no_placement``)."""
    status = DOES_NOT_FIT if getattr(error, "status", None) == DOES_NOT_FIT else NO_PLACEMENT
    return Measured(micro, error=str(error).splitlines()[0], status=status)


def report(trials: Sequence[Trial], chosen: Trial, why: str) -> dict[str, Any]:
    """``summary.json`` → ``micro_batches``: what was asked, every M tried, the chosen one and why."""
    return {"mode": AUTO, "chosen": chosen.micro_batches, "why": why,
            "tried": [asdict(trial) for trial in trials]}

