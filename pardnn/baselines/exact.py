"""Exact placement and schedule of small graphs with CP-SAT: the optimum the heuristics are measured against.

:func:`exact_placement` models the emulator's machine (a device per unit, a start per op, transfers on
cut edges, residual bytes within the limits) and minimises the makespan; its ``objective_us`` and
``bound_us`` bound every fitting placement's emulated makespan from below. Deterministic (one worker,
fixed seed); refuses graphs over ``max_ops`` (:data:`DEFAULT_MAX_OPS`). ``details``: ``status``,
``objective_us``, ``bound_us``, ``gap``, ``chosen``, ``run_order``... The model, the proof of the bound
and the search: docs/notes-partitioner.md and docs/algorithm.md ("Exact optimum for small graphs").
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from pardnn.baselines.exact_schedule import Candidate, hint_candidate, pick
from pardnn.costs.graph import CostGraph, Kind
from pardnn.costs.machine import Machine
from pardnn.errors import MissingDependencyError, PardnnError
from pardnn.placement.placer import Placed
from pardnn.placement.result import Progress
from pardnn.steps.units import units_of

__all__ = ["DEFAULT_MAX_OPS", "DEFAULT_TIME_LIMIT_S", "GraphTooLargeError", "exact_placement"]

DEFAULT_TIME_LIMIT_S = 10.0
DEFAULT_MAX_OPS = 60
SEED = 0
# Two single-worker searches: without LP (fast proofs on small graphs), then, if unproven, with LP (the
# bound); each from the best solution so far, for a share of the time limit.
PHASES = ((0, 0.5), (1, 0.5))
TICKS = 1e7  # the horizon in ticks, about
RELATIVE_GAP = 1e-4  # "optimal": proven within 0.01 % of the model's optimum
WALL_FACTOR, WALL_EXTRA_S = 5.0, 10.0  # the wall-clock backstop of the deterministic time limit
BYTES_PER_MODEL = 2**60  # residual bytes the model counts one by one, in total (CP-SAT's limit is ~2^62)
_Solution = tuple[int, np.ndarray, list[int]]  # a search's: makespan, device per unit, start per op (ticks)

class GraphTooLargeError(PardnnError, ValueError):
    """The graph has more ops than the exact solver is asked to take (``max_ops``)."""


def _cp_model() -> Any:
    try:
        from ortools.sat.python import cp_model
    except ImportError as exc:
        raise MissingDependencyError(  # pandas 3 (which OR-Tools would pull) needs numpy 2, TensorFlow 2.15 numpy 1
            "the exact placer needs OR-Tools: pip install ortools==9.9.3963 'pandas<3'") from exc
    return cp_model


def _solve(graph: CostGraph, machine: Machine, time_limit_s: float, ordered: bool) -> dict[str, Any]:
    """Solve on K > 1 devices (module notes): the placement chosen, its run order or None, and ``details``."""
    cp_model = _cp_model()
    comm_us = machine.edge_comm_us(graph.edge_bytes)
    horizon_us = float(graph.comp_us.sum() + comm_us.sum())
    scale = 10.0 ** (math.floor(math.log10(TICKS / horizon_us)) if horizon_us > 0 else 0)
    dur = [int(t) for t in np.floor(graph.comp_us * scale)]
    comm = [int(t) for t in np.floor(comm_us * scale)]
    rank: dict[int, int] = {}
    for v in graph.topo_order.tolist():
        rank.setdefault(int(units_of(graph)[v]), len(rank))
    unit = np.array([rank[int(u)] for u in units_of(graph)], np.int64)  # units in topological order
    count = len(rank)
    residual = np.where(graph.kind == Kind.RESIDUAL, graph.out_bytes, 0).astype(np.int64)
    limits = machine.limits_bytes
    symmetric = not machine.bounded or bool((limits == limits[0]).all())
    built = _build_model(cp_model, graph, machine, dur, comm, unit, residual, symmetric)
    hint = hint_candidate(graph, machine, residual, unit, dur, comm, symmetric)
    if hint is not None:
        device = np.zeros(count, np.int64)
        device[unit] = hint[0]
        built.hint(device, hint[1])
    status, best, bound, wall, dtime, found = _search(cp_model, built, unit, time_limit_s)
    placement, starts, chosen, order = pick(graph, machine, found + ([] if hint is None else
                                                                      [(hint[0], hint[1], f"hint ({hint[2]})")]),
                                            dur, ordered)
    return {
        "placement": placement, "order": order, "status": status,
        "objective_us": None if best is None else best[0] / scale,
        "bound_us": None if status == "infeasible" else max(bound, 0) / scale,
        "solve_seconds": wall, "timeout": status in ("feasible", "unknown"),
        "wall_limit_hit": status in ("feasible", "unknown") and dtime < 0.99 * time_limit_s,
        "deterministic_time": dtime, "chosen": chosen,
        "chosen_model_us": None if starts is None else max(s + t for s, t in zip(starts, dur)) / scale,
        "model_start_us": None if starts is None else [s / scale for s in starts],
        "hint": None if hint is None else hint[2],
        "hint_us": None if hint is None else max(s + t for s, t in zip(hint[1], dur)) / scale,
        "ticks_per_us": scale, "units": count, "symmetry_breaking": symmetric,
    }


@dataclass(frozen=True)
class _Model:
    """The CP-SAT model (module notes) and the variables the searches read and hint."""

    model: Any
    y: list[list[Any]]  # y[u][d]: unit u sits on device d
    start: list[Any]  # start tick per op
    makespan: Any
    apart: dict[tuple[int, int], Any]  # (a, b), a < b: units a and b sit on different devices
    used: list[list[Any]]  # value precedence (empty: off): used[u][d], some unit <= u sits on d
    dur: list[int]

    def hint(self, device: np.ndarray, starts: list[int]) -> None:
        """Hint a solution, replacing the last hint: a device per unit, start ticks per op."""
        model = self.model
        model.clear_hints()
        for u, row in enumerate(self.y):
            for d, on in enumerate(row):
                model.add_hint(on, int(device[u] == d))
                if self.used:
                    model.add_hint(self.used[u][d], int((device[: u + 1] == d).any()))
        for v, tick in enumerate(starts):
            model.add_hint(self.start[v], tick)
        model.add_hint(self.makespan, max(s + t for s, t in zip(starts, self.dur)))
        for (a, b), x in self.apart.items():
            model.add_hint(x, int(device[a] != device[b]))


def _build_model(cp_model: Any, graph: CostGraph, machine: Machine, dur: list[int], comm: list[int],
                 unit: np.ndarray, residual: np.ndarray, symmetric: bool) -> _Model:
    """The constraint program of the module notes, in ticks (``dur`` per op, ``comm`` per edge; ``unit``
    per op, numbered 0, 1, ... in topological order); ``symmetric``: with value precedence."""
    n, k, count = graph.n, machine.devices, int(unit.max()) + 1
    horizon = sum(dur) + sum(comm)
    unit_residual, capacity = _residual_granules(residual, unit, count, machine.limits_bytes)
    model = cp_model.CpModel()
    y = [[model.new_bool_var(f"y{u}_{d}") for d in range(k)] for u in range(count)]
    for row in y:
        model.add_exactly_one(row)
    start = [model.new_int_var(0, horizon, f"s{v}") for v in range(n)]
    makespan = model.new_int_var(0, horizon, "T")
    busy = [v for v in range(n) if dur[v] > 0]
    for d in range(k):
        model.add_no_overlap([model.new_optional_fixed_size_interval_var(start[v], dur[v], y[unit[v]][d], f"i{v}_{d}")
                              for v in busy])
        model.add(sum(dur[v] * y[unit[v]][d] for v in busy) <= makespan)
        if machine.bounded and any(unit_residual):
            model.add(sum(b * y[u][d] for u, b in enumerate(unit_residual) if b) <= capacity[d])
    if busy:
        model.add_cumulative([model.new_fixed_size_interval_var(start[v], dur[v], f"c{v}") for v in busy],
                             [1] * len(busy), k)
    apart: dict[tuple[int, int], Any] = {}
    for e in range(graph.m):
        u, v = int(graph.edge_src[e]), int(graph.edge_dst[e])
        a, b = sorted((int(unit[u]), int(unit[v])))
        if a == b or comm[e] == 0:
            model.add(start[v] >= start[u] + dur[u])
            continue
        if (a, b) not in apart:
            x = apart[a, b] = model.new_bool_var(f"x{a}_{b}")
            for d in range(k):
                model.add_bool_or([y[a][d].Not(), y[b][d], x])
                model.add_bool_or([y[a][d].Not(), y[b][d].Not(), x.Not()])
        model.add(start[v] >= start[u] + dur[u] + comm[e] * apart[a, b])
    for v in range(n):
        if graph.succ_ptr[v] == graph.succ_ptr[v + 1]:
            model.add(makespan >= start[v] + dur[v])
    used = _value_precedence(model, y) if symmetric else []
    model.minimize(makespan)
    return _Model(model, y, start, makespan, apart, used, dur)


def _residual_granules(residual: np.ndarray, unit: np.ndarray, count: int,
                       limits: np.ndarray) -> tuple[list[int], list[int]]:
    """Each unit's residual bytes and each device's limit for the model, in granules of a power of two
    bytes: 1 unless the total nears 2^62, where CP-SAT rejects a constraint its terms could overflow.
    Needs round up and limits down, so a coarse granule only ever forbids more (exabytes, no real model)."""
    need = [0] * count
    for v in np.flatnonzero(residual).tolist():
        need[int(unit[v])] += int(residual[v])  # Python integers: exact at any size
    granule = 1 << (sum(need) // BYTES_PER_MODEL).bit_length()
    return [-(-b // granule) for b in need], [limit // granule for limit in limits.tolist()]


def _value_precedence(model: Any, y: list[list[Any]]) -> list[list[Any]]:
    """Unit ``u`` may use device ``d > 0`` only if an earlier unit uses ``d - 1`` (module notes); returns
    ``used[u][d]``: some unit <= u is on d (``y[u][d]`` needs ``used[u - 1][d - 1]``)."""
    used = [[model.new_bool_var(f"used{u}_{d}") for d in range(len(row))] for u, row in enumerate(y)]
    for u, row in enumerate(used):
        for d in range(len(row)):
            if u == 0:
                model.add(row[d] == y[0][d])
                model.add(y[0][d] == int(d == 0))
                continue
            model.add_bool_or([row[d].Not(), used[u - 1][d], y[u][d]])
            model.add_implication(used[u - 1][d], row[d])
            model.add_implication(y[u][d], row[d])
            if d > 0:
                model.add_implication(y[u][d], used[u - 1][d - 1])
    return used


def _search(cp_model: Any, built: _Model, unit: np.ndarray,
            time_limit_s: float) -> tuple[str, _Solution | None, int, float, float, list[Candidate]]:
    """The searches of the module notes, each from the best solution so far (``built`` holds its hint).

    Returns the status, the best solution (makespan, device per unit, start ticks; None if none), the
    proven bound (ticks), wall seconds, deterministic time, and every solution as a candidate, in order.
    """
    best: _Solution | None = None
    bound, proven, infeasible, wall, dtime = 0, False, False, 0.0, 0.0
    found: list[Candidate] = []  # every solution of both searches, in order
    for lp_level, share in PHASES:
        solver = cp_model.CpSolver()
        params = solver.parameters
        params.num_workers = 1
        params.random_seed = SEED
        params.linearization_level = lp_level
        params.max_deterministic_time = share * time_limit_s
        params.max_time_in_seconds = share * (WALL_FACTOR * time_limit_s + WALL_EXTRA_S)
        params.relative_gap_limit = RELATIVE_GAP
        t0 = time.perf_counter()
        recorder = _recorder(cp_model, built.y, built.start)
        code = solver.solve(built.model, recorder)
        found += [(np.asarray(device, np.int64)[unit], starts, f"solution {len(found) + 1}")
                  for device, starts in recorder.solutions]
        wall += time.perf_counter() - t0
        dtime += solver.response_proto.deterministic_time
        if code not in (cp_model.OPTIMAL, cp_model.FEASIBLE, cp_model.INFEASIBLE, cp_model.UNKNOWN):
            raise RuntimeError(f"CP-SAT rejected the exact model: {solver.status_name(code)}")
        infeasible = code == cp_model.INFEASIBLE
        if code in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            bound = max(bound, int(solver.best_objective_bound))
            value = int(solver.objective_value)
            if best is None or value < best[0]:
                device = np.array([next(d for d, lit in enumerate(row) if solver.boolean_value(lit))
                                   for row in built.y])
                best = (value, device, [int(solver.value(s)) for s in built.start])
                built.hint(best[1], best[2])
        elif code == cp_model.UNKNOWN:
            bound = max(bound, int(solver.best_objective_bound))
        proven = best is not None and best[0] - bound <= RELATIVE_GAP * best[0]
        if infeasible or proven:
            break
    status = "infeasible" if infeasible else "optimal" if proven else "feasible" if best is not None else "unknown"
    return status, best, bound, wall, dtime, found


def _recorder(cp_model: Any, y: list[list[Any]], start: list[Any]) -> Any:
    """A solution callback keeping every solution's device per unit and start ticks per op (a single
    worker reports the same solutions in the same order on every run)."""

    class Recorder(cp_model.CpSolverSolutionCallback):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.solutions: list[tuple[list[int], list[int]]] = []

        def on_solution_callback(self) -> None:
            device = [next(d for d, lit in enumerate(row) if self.boolean_value(lit)) for row in y]
            self.solutions.append((device, [self.value(s) for s in start]))

    return Recorder()


def _trivial(graph: CostGraph, machine: Machine) -> dict[str, Any]:
    """K = 1 or no op: everything on device 0, makespan = total compute (one device never idles)."""
    residual = sum(graph.out_bytes[graph.kind == Kind.RESIDUAL].tolist())  # exact past int64
    fits = not machine.bounded or residual <= int(machine.limits_bytes[0])
    total = float(graph.comp_us.sum()) if fits else None
    return {"placement": np.zeros(graph.n, np.int64), "order": None, "status": "optimal" if fits else "infeasible",
            "objective_us": total, "bound_us": total, "solve_seconds": 0.0, "timeout": False,
            "wall_limit_hit": False, "deterministic_time": 0.0, "chosen": "device 0",
            "chosen_model_us": total, "model_start_us": None, "hint": None, "hint_us": None, "ticks_per_us": None,
            "units": int(np.unique(units_of(graph)).size), "symmetry_breaking": False}


def exact_placement(graph: CostGraph, machine: Machine, *, progress: Progress | None = None,
                    time_limit_s: float = DEFAULT_TIME_LIMIT_S, max_ops: int = DEFAULT_MAX_OPS,
                    ordered: bool = True) -> Placed:
    """Place and schedule ``graph`` optimally on ``machine`` with CP-SAT (small graphs only).

    Parameters
    ----------
    graph, machine:
        What to place, and on what (residual memory is a constraint of the model).
    progress:
        Called as ``progress(stage, done, total)``: ``solve``.
    time_limit_s:
        CP-SAT's deterministic time limit (about seconds of one core); ``inf``: until proven.
    max_ops:
        Refuse graphs of more ops.
    ordered:
        Return the model's run order with the placement when it is faster (module notes); ``False``
        never returns one.

    Returns
    -------
    Placed
        The best placement found (module notes), ``details`` as in the module notes, and its run order.

    Raises
    ------
    GraphTooLargeError
        ``graph.n > max_ops``.
    MissingDependencyError
        OR-Tools is not installed (``pip install ortools==9.9.3963``) and K > 1.
    ValueError
        ``time_limit_s`` is negative or NaN.

    Examples
    --------
    Two independent 5-µs ops on 2 devices: one on each, ``details["objective_us"] == 5.0``, ``optimal``.
    """
    if not time_limit_s >= 0:
        raise ValueError(f"exact: time_limit_s = {time_limit_s!r} must be >= 0 seconds")
    if graph.n > max_ops:
        raise GraphTooLargeError(
            f"the exact placer solves graphs of up to {max_ops} ops; {graph.name!r} has {graph.n:,}. Its time "
            f"grows exponentially: raise the limit (max_ops=...) with a longer time limit (time_limit_s=..., "
            f"--time-budget) to try anyway, or use --algorithm pardnn")
    if progress is not None:
        progress("solve", 0, 1)
    out = (_trivial(graph, machine) if machine.devices == 1 or graph.n == 0
           else _solve(graph, machine, time_limit_s, ordered))
    placement, order = out.pop("placement"), out.pop("order")
    if progress is not None:
        progress("solve", 1, 1)
    objective, bound = out["objective_us"], out["bound_us"]
    out["gap"] = None if objective is None or bound is None else (objective - bound) / objective if objective else 0.0
    out["time_limit_s"] = float(time_limit_s)
    out["run_order"] = order is not None
    return Placed(placement, out, order)
