"""Run settings: one value per knob, from the command line, else the job file, else a default.

:func:`resolve` is the only place that merges the three and the only place that checks ranges, so
``pardnn-launch --iterations 50`` and ``launcher.run(job, iterations=50)`` fail the same way. Each
value remembers where it came from (``Settings.sources``), and error messages say so: a window
from the job file that no longer fits iterations given on the command line names both.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from launcher.errors import LaunchError
from pardnn.errors import InvalidMachineError
from pardnn.machine import parse_bytes
from pardnn.presets import PRESETS, preset

__all__ = ["COSTS", "DEFAULTS", "MEMORY_HEURISTICS", "OVERRIDABLE", "Settings", "parse_window", "resolve"]

COSTS = ("profile", "estimate")
MEMORY_HEURISTICS = ("overflow", "balance", "none")
MAX_DEVICES_PER_NODE = 64

# Used when neither the command line nor the job sets a value (the job file's own defaults,
# applied by jobs.load_job, count as the job's).
DEFAULTS: dict[str, Any] = {
    "devices_per_node": 4,
    "iterations": 150,
    "window": (100, 150),
    "out": Path("runs"),
    "memory": None,
    "costs": "profile",
    "batch_size": None,
    "reserve": 0.10,
    "memory_heuristic": "overflow",
    "device_preset": "v100-32gb",
    "profile_steps": 5,
    "progress": True,
}
# Settings a job file has (Job field of the same name); the others exist only on the command line.
_FROM_JOB = ("devices_per_node", "iterations", "window", "memory", "costs", "batch_size", "reserve",
             "memory_heuristic", "device_preset", "profile_steps")
OVERRIDABLE = tuple(DEFAULTS)

COMMAND_LINE, JOB_FILE, DEFAULT = "command line", "job file", "default"


@dataclass(frozen=True)
class Settings:
    """Resolved, validated settings of one run (see :data:`DEFAULTS` for the defaults)."""

    devices_per_node: int
    iterations: int
    window: tuple[int, int]
    out: Path
    memory: str | None
    costs: str
    batch_size: int
    reserve: float
    memory_heuristic: str
    device_preset: str
    profile_steps: int
    progress: bool
    sources: dict[str, str] = field(default_factory=dict, compare=False)

    @property
    def memory_bytes(self) -> int | None:
        return None if self.memory is None else parse_bytes(self.memory, "memory")

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["out"] = str(self.out)
        out["window"] = list(self.window)
        return out


_WINDOW = re.compile(r"^\s*(\d+)\s*[:,-]\s*(\d+)\s*$")


def parse_window(value: str | tuple[int, int] | list[int]) -> tuple[int, int]:
    """``"100:150"`` (or ``(100, 150)``) → ``(100, 150)``: measured iterations, start inclusive, end exclusive."""
    if isinstance(value, str):
        match = _WINDOW.match(value)
        if not match:
            raise LaunchError(f"window: cannot read {value!r}; write START:END, e.g. 100:150")
        return int(match.group(1)), int(match.group(2))
    items = list(value)
    if len(items) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) for v in items):
        raise LaunchError(f"window: {value!r} must be two whole numbers [START, END], e.g. [100, 150]")
    return items[0], items[1]


def _whole(name: str, value: Any, low: int, high: int | None, origin: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise LaunchError(f"{name} ({origin}): {value!r} must be a whole number")
    if value < low or (high is not None and value > high):
        bound = f">= {low}" if high is None else f"in {low}..{high}"
        raise LaunchError(f"{name} ({origin}): {value} must be {bound}")
    return value


def _choice(name: str, value: Any, allowed: tuple[str, ...], origin: str) -> str:
    text = str(value).lower()
    if text not in allowed:
        raise LaunchError(f"{name} ({origin}): {value!r}; expected one of {', '.join(allowed)}")
    return text


def _memory(value: Any, origin: str) -> str | None:
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "none", "unlimited")):
        return None
    try:
        size = parse_bytes(value, "memory")
    except InvalidMachineError as error:
        raise LaunchError(f"memory ({origin}): {error}") from None
    if size <= 0:
        raise LaunchError(f"memory ({origin}): {value!r} must be > 0 (or 'unlimited')")
    return str(value)


def _preset(value: Any, origin: str) -> str:
    try:
        return preset(str(value)).name
    except InvalidMachineError:
        raise LaunchError(f"device_preset ({origin}): {value!r}; expected one of {', '.join(PRESETS)}") from None


def resolve(job: Any, overrides: dict[str, Any] | None = None) -> Settings:
    """Merge ``overrides`` (command line / keyword arguments; ``None`` = not given), ``job``, defaults.

    Parameters
    ----------
    job:
        A ``jobs.Job`` (any object with the contract's fields; missing fields fall back to defaults).
    overrides:
        ``{setting: value}`` for settings in :data:`OVERRIDABLE`.

    Raises
    ------
    LaunchError
        An unknown setting, or a value out of range; the message names the setting, where the value
        came from, the value, and what is allowed.
    """
    overrides = {k: v for k, v in (overrides or {}).items() if v is not None}
    unknown = sorted(set(overrides) - set(OVERRIDABLE))
    if unknown:
        raise LaunchError(f"unknown setting {', '.join(unknown)}; expected some of {', '.join(OVERRIDABLE)}")
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for name, default in DEFAULTS.items():
        if name in overrides:
            values[name], sources[name] = overrides[name], COMMAND_LINE
        elif name in _FROM_JOB and getattr(job, name, None) is not None:
            values[name], sources[name] = getattr(job, name), JOB_FILE
        else:
            values[name], sources[name] = default, DEFAULT

    def origin(name: str) -> str:
        return sources[name]

    devices = _whole("devices_per_node", values["devices_per_node"], 1, MAX_DEVICES_PER_NODE,
                     origin("devices_per_node"))
    iterations = _whole("iterations", values["iterations"], 1, None, origin("iterations"))
    start, end = parse_window(values["window"])
    if not 0 <= start < end <= iterations:
        raise LaunchError(
            f"window {start}:{end} ({origin('window')}) must satisfy 0 <= start < end <= iterations = {iterations} "
            f"({origin('iterations')}); pass --window START:END within the iterations, or more --iterations")
    if values["batch_size"] is None:
        raise LaunchError("batch_size: the job sets none; pass --batch-size")
    batch_size = _whole("batch_size", values["batch_size"], 1, None, origin("batch_size"))
    reserve = values["reserve"]
    if isinstance(reserve, bool) or not isinstance(reserve, (int, float)) or not 0 <= reserve < 1:
        raise LaunchError(f"reserve ({origin('reserve')}): {reserve!r} must be a fraction in [0, 1), e.g. 0.1")
    return Settings(
        devices_per_node=devices,
        iterations=iterations,
        window=(start, end),
        out=Path(values["out"]),
        memory=_memory(values["memory"], origin("memory")),
        costs=_choice("costs", values["costs"], COSTS, origin("costs")),
        batch_size=batch_size,
        reserve=float(reserve),
        memory_heuristic=_choice("memory_heuristic", values["memory_heuristic"], MEMORY_HEURISTICS,
                                 origin("memory_heuristic")),
        device_preset=_preset(values["device_preset"], origin("device_preset")),
        profile_steps=_whole("profile_steps", values["profile_steps"], 1, None, origin("profile_steps")),
        progress=bool(values["progress"]),
        sources=sources,
    )
