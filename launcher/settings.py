"""Run settings: one value per knob, from the command line, else the job file, else a default.

:func:`resolve` is the only place that merges the three into :class:`Settings`, so ``pardnn-launch
--iterations 50`` and ``launcher.run(job, iterations=50)`` fail the same way. :data:`OVERRIDABLE` names
every setting; :data:`SCHEMA` checks the ones a job file also has with the job schema's own
:class:`~pardnn.settings.Param`; :data:`DEFAULTS` gives the rest. Each value remembers where it came from
(``Settings.sources``), and errors say so. Rules: docs/notes-launcher.md.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from jobs.schema import AUTO, COMMAND_LINE, DEFAULT, JOB_FILE, PLACEMENT_TABLE, RUN_TABLE, TRAIN, normalise, window_fits
from launcher.cluster.gpus import adapt, detect_gpus
from launcher.errors import LaunchError
from launcher.variants import plan_entry, variant_settings
from pardnn.costs.machine import parse_bytes
from pardnn.settings import RUN as SHARED_RUN
from pardnn.settings import Param

__all__ = ["ALLREDUCE_CHOICES", "DEFAULTS", "OVERRIDABLE", "SCHEMA", "Settings", "check_auto", "check_replicas",
           "parse_window", "resolve"]

# Settings a job file has (the Job field of the same name), checked by the job schema's Param.
SCHEMA: dict[str, Param] = {"batch_size": TRAIN["batch_size"], "micro_batches": TRAIN["micro_batches"], **SHARED_RUN,
                             **RUN_TABLE, **PLACEMENT_TABLE}
# Settings of the launcher only (command line or keyword arguments).
LAUNCHER_DEFAULTS: dict[str, Any] = {"out": Path("runs"), "progress": True}
# Checkpoints (launcher.rank.checkpoint): every N iterations (0: none periodic), the folder (default
# OUT/<run>/checkpoint), and a checkpoint (folder or "latest") to resume from; how many checkpoints a
# folder keeps (0: all); --replace: place a resumed graph anew instead of taking the saved placement.
LAUNCHER_DEFAULTS.update({"checkpoint_every": 0, "checkpoint_dir": None, "resume": None, "keep_checkpoints": 3,
                          "replace": False})
# Where rank 0 writes the trained model in Keras' files at the end (jobs.export; None: nowhere).
LAUNCHER_DEFAULTS.update({"save_model": None})
# What runs (launcher.variants): model or data parallelism, gradient checkpointing, placers side by side.
LAUNCHER_DEFAULTS.update({"parallelism": "model", "recompute": False, "compare": None})
# How gradients are averaged across ranks (launcher.training.dataparallel): auto, horovod or mpi4py.
LAUNCHER_DEFAULTS.update({"allreduce": "auto"})
# Devices per model-parallel replica (None: all of the node's, one replica per node); see check_replicas.
LAUNCHER_DEFAULTS.update({"replica_devices": None})
# Used when neither the command line nor the job sets a value (the job file's own defaults,
# applied by jobs.load_job, count as the job's). batch_size has none: the job or --batch-size gives it.
DEFAULTS: dict[str, Any] = {**{name: None if param.required else param.default for name, param in SCHEMA.items()},
                            **LAUNCHER_DEFAULTS}
OVERRIDABLE = tuple(DEFAULTS)


# --allreduce: how gradients are averaged across ranks (launcher.training.dataparallel.pick_backend).
ALLREDUCE_CHOICES = ("auto", "horovod", "mpi4py")


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
    stall_timeout: float | None
    checkpoint_every: int = 0
    checkpoint_dir: Path | None = None
    resume: str | None = None
    keep_checkpoints: int = 3
    replace: bool = False
    save_model: Path | None = None  # the trained model's file (jobs.export), written by rank 0 at the end
    run_order: bool = True
    micro_batches: int | str = 1  # the batch split into M micro-batches per step (jobs.microbatch), or "auto"
    placer: str = "pardnn"
    parallelism: str = "model"
    recompute: bool = False
    compare: tuple[str, ...] = ()
    allreduce: str = "auto"
    replica_devices: int | str | None = None  # k: devices_per_node / k replicas of k devices per node; or "auto"
    sources: dict[str, str] = field(default_factory=dict, compare=False)
    gpus: str | None = None  # "8 × NVIDIA A100-SXM4-80GB" when GPUs were detected (launcher.cluster.gpus)

    @property
    def replicas_per_node(self) -> int:
        """Model-parallel replicas on each node: ``devices_per_node / replica_devices`` (1 by default)."""
        if self.replica_devices == AUTO:
            raise LaunchError("--replica-devices auto: no plan was chosen yet")  # launcher.placing.planning does
        return 1 if self.replica_devices is None else self.devices_per_node // int(self.replica_devices)

    @property
    def memory_bytes(self) -> int | None:
        return None if self.memory is None else parse_bytes(self.memory, "memory")

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["out"] = str(self.out)
        out["window"] = list(self.window)
        out["checkpoint_dir"] = None if self.checkpoint_dir is None else str(self.checkpoint_dir)
        out["save_model"] = None if self.save_model is None else str(self.save_model)
        return out


def parse_window(value: str | tuple[int, int] | list[int]) -> tuple[int, int]:
    """``"100:150"`` (or ``(100, 150)``) → ``(100, 150)``: measured iterations, start inclusive, end exclusive."""
    param = SCHEMA["window"]
    try:
        return param.parse(value) if isinstance(value, str) else param.check(value)
    except ValueError:
        raise LaunchError(f"window: cannot read {value!r}; expected {param.expected()}, "
                          "written START:END on the command line, e.g. 100:150") from None


def _checked(name: str, value: Any, origin: str) -> Any:
    """``value`` as ``SCHEMA[name]`` accepts it: text (the command line) parsed, other values checked."""
    param = SCHEMA[name]
    value = normalise(name, value)
    if value is None and param.default is None:
        return None  # unset, and the key has no fixed default (memory: unlimited; stall_timeout: derived)
    try:
        return param.parse(value) if isinstance(value, str) else param.check(value)
    except ValueError:
        raise LaunchError(f"{name} ({origin}): {value!r}: expected {param.expected()}") from None


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
        elif name in SCHEMA and getattr(job, name, None) is not None:
            values[name], sources[name] = getattr(job, name), JOB_FILE
        else:
            values[name], sources[name] = default, DEFAULT

    if values["batch_size"] is None:
        raise LaunchError("batch_size: the job sets none; pass --batch-size")
    checked = {name: _checked(name, values[name], sources[name]) for name in SCHEMA}
    iterations, window = checked["iterations"], checked["window"]
    if not window_fits(window, iterations):
        start, end = window
        raise LaunchError(
            f"window {start}:{end} ({sources['window']}) must satisfy 0 <= start < end <= iterations = {iterations} "
            f"({sources['iterations']}); pass --window START:END within the iterations, or more --iterations")
    if values["allreduce"] not in ALLREDUCE_CHOICES:
        raise LaunchError(f"allreduce ({sources['allreduce']}): {values['allreduce']!r}: expected one of "
                          f"{', '.join(ALLREDUCE_CHOICES)}")
    settings = Settings(**checked, out=Path(values["out"]), progress=bool(values["progress"]), sources=sources,
                        allreduce=values["allreduce"], replica_devices=_replica_devices(values["replica_devices"]),
                        save_model=_save_model(values["save_model"], values["compare"]),
                        **_checkpoint_settings(values), **variant_settings(values, sources))
    check_auto(settings)  # --micro-batches auto: one placer's model-parallel run only
    # The GPUs there set what the user left unpinned (devices_per_node, device_preset, memory).
    settings = adapt(settings, job, detect_gpus())
    check_replicas(settings)
    return settings


def _save_model(value: Any, compare: Any) -> Path | None:
    """``--save-model PATH``: a file name Keras can write there (:func:`jobs.export.check_path`), for one run."""
    if value is None:
        return None
    if compare:
        raise LaunchError(f"--save-model {value}: saves the model of one run; --compare trains several (run the one "
                          "to keep without --compare)")
    from jobs.config import JobError
    from jobs.export import check_path

    try:
        return check_path(value)
    except JobError as error:
        raise LaunchError(str(error)) from None


def _replica_devices(value: Any) -> int | str | None:
    if value is None or value == AUTO:
        return value
    try:
        number = int(value)
    except (TypeError, ValueError):
        number = 0
    if isinstance(value, bool) or number < 1 or (not isinstance(value, str) and number != value):
        raise LaunchError(f"--replica-devices {value!r}: expected a whole number >= 1 (devices per replica) or auto")
    return number


def check_replicas(settings: Settings) -> None:
    """``--replica-devices k`` and each ``--compare`` entry ``k=K``: k divides the node's devices, the
    node's batch splits into its replicas (and each replica's share into its micro-batches); ``k`` and
    ``auto`` are one placer's model parallelism, not data parallelism or a comparison."""
    k = settings.replica_devices
    if k is not None and (settings.parallelism == "data" or settings.compare):
        raise LaunchError(f"--replica-devices {k} places replicas of k devices each for one placer; it does not "
                          "combine with --parallelism data (k = 1 of a data-parallel run) or --compare (list plans "
                          "there: --compare k=1,k=2,...)")
    if k == AUTO:
        return  # every k dividing the node's devices is tried: launcher.placing.planning
    compared = [entry for entry in map(plan_entry, settings.compare) if entry is not None]
    for value, where in [(k, f"--replica-devices {k}")] + [(entry, f"--compare k={entry}") for entry in compared]:
        if value is not None:
            _check_split(settings, int(value), where)


def _check_split(settings: Settings, k: int, where: str) -> None:
    devices = settings.devices_per_node
    if k > devices or devices % k:
        dividers = [d for d in range(1, devices + 1) if devices % d == 0]
        raise LaunchError(f"{where} does not divide the node's {devices} devices "
                          f"({settings.sources.get('devices_per_node', DEFAULT)} devices_per_node); "
                          f"choose one of {', '.join(map(str, dividers))}")
    replicas, batch = devices // k, settings.batch_size
    if batch % replicas:
        raise LaunchError(f"batch_size {batch} per node does not split over its {replicas} replicas of {k} devices "
                          f"({where}); pass a batch size divisible by {replicas}")
    micro = settings.micro_batches
    if isinstance(micro, int) and (batch // replicas) % micro:
        raise LaunchError(f"each replica's {batch // replicas} samples (batch_size {batch} over {replicas} replicas, "
                          f"{where}) do not split into --micro-batches {micro}; pass a batch size divisible by "
                          f"{replicas * micro}")


def _checkpoint_settings(values: dict[str, Any]) -> dict[str, Any]:
    """``checkpoint_every``, ``keep_checkpoints`` (whole numbers >= 0), ``checkpoint_dir`` (a path), ``resume``
    (text), ``replace`` (a flag), checked."""
    every, keep = values["checkpoint_every"], values["keep_checkpoints"]
    if isinstance(every, bool) or not isinstance(every, int) or every < 0:
        raise LaunchError(f"checkpoint_every: {every!r}: expected a whole number >= 0 (0: no periodic checkpoint)")
    if isinstance(keep, bool) or not isinstance(keep, int) or keep < 0:
        raise LaunchError(f"keep_checkpoints: {keep!r}: expected a whole number >= 0 (0: keep every checkpoint)")
    folder, resume, replace = values["checkpoint_dir"], values["resume"], bool(values["replace"])
    if replace and resume is None:
        raise LaunchError("--replace places a resumed run's graph anew: it needs --resume")
    return {"checkpoint_every": every, "checkpoint_dir": None if folder is None else Path(folder),
            "resume": None if resume is None else str(resume), "keep_checkpoints": keep, "replace": replace}


def check_auto(settings: Settings) -> None:
    """``micro_batches = "auto"`` chooses M for one placer's model-parallel run: with ``--compare`` or
    data parallelism it is a one-line error."""
    if settings.micro_batches != AUTO:
        return
    if settings.compare:
        raise LaunchError("--micro-batches auto chooses M for one placement; --compare trains several: give a whole "
                          "number M (--micro-batches M)")
    if settings.parallelism == "data":
        raise LaunchError("--micro-batches auto chooses M for a placement across the node's devices; with "
                          "--parallelism data give a whole number M or leave it out")
