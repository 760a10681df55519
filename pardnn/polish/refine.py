"""After the guard: local search on the emulated schedule (the refinement stage).

:func:`refine` emulates the step, follows its critical chain back from the op that finishes last and
tries the moves that could shorten it (a unit to the device of the transfer it waited for, or off a
busy device), keeping a move only when the step gets strictly shorter and every device still fits;
on small graphs it also sweeps every unit and linked pair, then iterates with seeded random kicks,
and ends moving clusters of units joined by heavy edges (:mod:`pardnn.polish.clusters`).
``seconds`` of budget becomes a fixed number of emulations (deterministic on every node).
docs/internals.md ("The refinement") has the rules, the choices and the measurements.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from pardnn.costs.csr import pointers, stable_buckets
from pardnn.costs.graph import CostGraph
from pardnn.costs.machine import Machine
from pardnn.emulation.emulated import Emulated, emulate_and_track, strictly_shorter
from pardnn.emulation.emulator import UPWARD_RANK, Emulator, RunOrder, Schedule
from pardnn.emulation.memory import MemoryProfile, accumulating_ops
from pardnn.polish.chain import DEVICE, TRANSFER, chain_moves, critical_chain
from pardnn.polish.clusters import linkage_clusters
from pardnn.polish.kicks import KIND_NAMES, first_shorter, iterate_compiled
from pardnn.polish.stages import Context
from pardnn.steps.units import units_of

__all__ = ["DEVICE", "MAX_EVALUATIONS", "REFINE_SECONDS", "SECONDS_PER_ELEMENT", "SECONDS_PER_MOVE", "TRANSFER",
           "RefineDetails", "Refined", "critical_chain", "evaluations_for", "refine", "refine_stage"]

REFINE_SECONDS = 0.1  # the default budget (on the 200k-op benchmark graph: one move tried)
# The cost model of one move tried (an emulation, the memory sweep of a kept move, its share of the
# chain): a fixed part plus a part per op and per edge. Fitted on the 2-core development machine by
# ``python -m benchmarks.refine_budget`` (RESULTS.md, "refine-budget"): measured / model from about
# 0.3 on mid-sized graphs to 1.05 on 200k ops with a memory limit when fitted; 2.3-3.1 on 200k ops on
# the slower kernel of a later run (docs/algorithm.md, step 6), left as fitted: refitting changes every budget.
SECONDS_PER_MOVE = 1e-5
SECONDS_PER_ELEMENT = 1e-7
MAX_EVALUATIONS = 100_000  # about a second on the smallest graphs
NEIGHBOUR, PAIR, CLUSTER, KICK = "neighbour", "pair", "cluster", "kick"
CLUSTER_MOVES = True  # the last phase (pardnn.polish.clusters); benchmarks.exact_memory switches it off for "before"
CLUSTER_SHARE = 0.25  # the most of the budget the kicks leave to the cluster phase
KICK_UNITS = 4  # units moved at random by one kick of the iterated local search
COMPILED_KICKS = True  # the kicks in one compiled call (pardnn.polish.kicks); tests switch it off to compare


def _kind(units: list[int]) -> str:
    """The log's name of a move of ``units``."""
    return NEIGHBOUR if len(units) == 1 else PAIR if len(units) == 2 else CLUSTER


def evaluations_for(graph: CostGraph, seconds: float) -> int:
    """The number of emulations ``seconds`` buys under the fixed cost model (0 for a budget of 0)."""
    if not seconds > 0:
        return 0
    per = SECONDS_PER_MOVE + SECONDS_PER_ELEMENT * (graph.n + graph.m)
    return int(min(MAX_EVALUATIONS, max(1, seconds // per)))


@dataclass(frozen=True)
class RefineDetails:
    """What the refinement did: the makespan before and after, emulations spent, moves kept, kicks kept."""

    makespan_before_us: float
    makespan_after_us: float
    evaluations: int
    moves: int
    restarts: int


@dataclass
class Refined:
    """The refined answer (never slower than the start, within the limits) and the search's log:
    ``moves`` as ``(link, unit's first op, from, to)``, kicks included (a pair or a cluster: its first
    unit's first op and that op's device)."""

    answer: Emulated
    makespan_before_us: float
    evaluations: int = 0
    restarts: int = 0
    moves: list[tuple[str, int, int, int]] = field(default_factory=list)

    @property
    def placement(self) -> np.ndarray:
        return self.answer.placement

    @property
    def schedule(self) -> Schedule:
        return self.answer.schedule

    @property
    def memory(self) -> MemoryProfile | None:
        return self.answer.memory

    def details(self) -> RefineDetails:
        return RefineDetails(self.makespan_before_us, self.answer.makespan_us, self.evaluations,
                             sum(kind != KICK for kind, *_ in self.moves), self.restarts)


class _Search:
    """The local search of the module docstring over one graph, machine and budget; ``out`` holds the
    best answer so far (every accepted move replaces it)."""

    def __init__(self, graph: CostGraph, machine: Machine, start: Emulated, budget: int, order: RunOrder) -> None:
        self.graph, self.machine, self.budget = graph, machine, budget
        self.out = Refined(replace(start, placement=np.array(start.placement, dtype=np.int64)), start.makespan_us)
        self.unit = unit = units_of(graph)
        # Each unit's ops in index order, as CSR (a counting sort: 0.06 s less than a stable argsort,
        # a search of the bounds and a list of them on 1M ops), and its first op (n for the empty slots).
        self._bounds = bounds = pointers(unit, int(unit.max()) + 1)
        self._members = stable_buckets(unit, bounds)
        self.first_op = first_op = np.full(bounds.size - 1, graph.n, np.int64)
        nonempty = bounds[1:] > bounds[:-1]
        first_op[nonempty] = self._members[bounds[:-1][nonempty]]
        self.units = units = int((first_op < graph.n).sum())  # unit ids of grouped ops' own slots are empty
        # The whole neighbourhood (every unit to every other device) is searched once the chain's moves
        # are exhausted, when the budget could afford one sweep of it; the deep search (linked pairs of
        # units too, then kicks) when it could afford two sweeps of that.
        self.whole = units * (machine.devices - 1) <= budget
        self.deep = 2 * (units + graph.m) * machine.devices <= budget
        self.emulator = Emulator(graph, machine, order=order)  # trials come from a checked placement: no re-check
        # The sweep's and the kicks' unit order, and the linked pairs: only made when they can be used.
        self.order = np.argsort(first_op, kind="stable")[:units].tolist() if self.whole or self.deep else []
        linked = zip(unit[graph.edge_src].tolist(), unit[graph.edge_dst].tolist(), strict=True) if self.deep else ()
        self.pairs = sorted({(min(a, b), max(a, b)) for a, b in linked if a != b})
        # The sweep's moving sets (each unit, then each linked pair) as CSR for the compiled sweep, which
        # emulates in the order of readiness or by upward rank (positions: the Python sweep).
        self.moving = [[u] for u in self.order] + [list(pair) for pair in self.pairs]
        self.sets = self.paired = len(self.moving)  # the sets the sweep moves: the clusters join in the last phase
        if self.whole and CLUSTER_MOVES:
            self.moving += linkage_clusters(graph, unit)
        self.compiled = order is None or order == UPWARD_RANK
        if self.compiled:
            self._edge_comm = machine.edge_comm_us(graph.succ_bytes)  # the chain's moves are tried compiled too
        if self.compiled and self.moving:
            parts = [self.members_of_unit(u) for moving in self.moving for u in moving]
            sizes = [sum(self._bounds[u + 1] - self._bounds[u] for u in moving) for moving in self.moving]
            self._set_ptr = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
            self._set_ops = np.concatenate(parts).astype(np.int64)

    def members_of_unit(self, u: int) -> np.ndarray:
        return self._members[self._bounds[u] : self._bounds[u + 1]]

    @property
    def spent(self) -> bool:
        return self.out.evaluations >= self.budget

    def attempt(self, moving: list[int], target: int, kind: str) -> bool:
        """Move the units ``moving`` to ``target``; kept when strictly shorter and fitting."""
        members = self.members_of_unit(moving[0]) if len(moving) == 1 else np.concatenate(
            [self.members_of_unit(u) for u in moving])
        placement = self.out.answer.placement
        if (placement[members] == target).all():
            return False
        trial = placement.copy()
        trial[members] = target
        return self.accept(trial, (kind, int(self.first_op[moving[0]]), int(placement[members[0]]), int(target)))

    def accept(self, trial: np.ndarray, move: tuple[str, int, int, int], *, worse: bool = False) -> bool:
        """Emulate ``trial``; keep it when it fits and is strictly shorter (or, ``worse``, whatever its makespan)."""
        out = self.out
        out.evaluations += 1
        schedule = self.emulator(trial)
        if not (worse or strictly_shorter(schedule.makespan_us, out.answer.makespan_us)):
            return False
        return self.keep(trial, schedule, move)

    def keep(self, trial: np.ndarray, schedule: Schedule, move: tuple[str, int, int, int]) -> bool:
        """Keep ``trial`` (emulated: ``schedule``) if every device fits; its memory is swept only now."""
        answer = emulate_and_track(self.graph, self.machine, trial, schedule=schedule)
        if not answer.fits(self.machine):
            return False
        self.out.moves.append(move)
        self.out.answer = answer
        return True

    def chain_move(self) -> bool:
        """The first move on the critical chain that shortens the step, costliest links first."""
        out, unit = self.out, self.unit
        # The costliest links only (stable: ties keep chain order).
        links = critical_chain(self.graph, out.answer.placement, out.answer.schedule,
                               keep=max(16, 2 * (self.budget - out.evaluations)))
        moves = chain_moves(self.graph, self.machine, out.answer.placement, unit, self.first_op, links)

        def kind(u: int) -> str:
            return next((k for k, b, a, _ in links if unit[a] == u or unit[b] == u), DEVICE)

        if self.compiled:
            if not moves:
                return False
            parts = [self.members_of_unit(u) for u, _ in moves]
            set_ptr = np.zeros(len(parts) + 1, np.int64)
            np.cumsum([part.size for part in parts], out=set_ptr[1:])
            targets = np.array([target for _, target in moves], np.int64)
            return self._first_kept(set_ptr, np.concatenate(parts).astype(np.int64), targets,
                                    lambda which: ([moves[which][0]], kind(moves[which][0])))
        for u, target in moves:
            if self.spent:
                return False
            if self.attempt([u], target, kind(u)):
                return True
        return False

    def sweep(self, first: int = 0) -> bool:
        """The whole neighbourhood: every unit (in op order), then every linked pair, then (in the last
        phase) every cluster (in merge order), to every device; from moving set ``first``."""
        if self.compiled:
            return self._compiled_sweep(first)
        for moving in self.moving[first : self.sets]:
            for target in range(self.machine.devices):
                if self.spent:
                    return False
                if self.attempt(moving, target, _kind(moving)):
                    return True
        return False

    def _compiled_sweep(self, first: int) -> bool:
        """:meth:`sweep`'s moves tried by :func:`~pardnn.polish.kicks.first_shorter` (the same moves, order, budget and
        answers; about 10x faster)."""

        def moving(which: int) -> tuple[list[int], str]:
            units = self.moving[first + which]
            return units, _kind(units)

        return self._first_kept(self._set_ptr[first : self.sets + 1], self._set_ops, np.zeros(0, np.int64), moving)

    def _first_kept(self, set_ptr: np.ndarray, set_ops: np.ndarray, targets: np.ndarray,
                    moving: Callable[[int], tuple[list[int], str]]) -> bool:
        """The first of the moves (:func:`~pardnn.polish.kicks.first_shorter`'s) that is strictly shorter and
        fits, kept: each shorter trial found in compiled code is kept here if it fits, else the search goes
        on after it.
        ``moving(which)``: the units of moving set ``which`` and the kind of link, for the log."""
        graph, out, devices = self.graph, self.out, self.machine.devices
        begin = 0
        while not self.spent:
            placement = out.answer.placement
            index, used = first_shorter(
                placement, set_ptr, set_ops, devices, begin, self.budget - out.evaluations,
                out.answer.makespan_us, graph.succ_ptr, graph.succ, self._edge_comm, graph.pred_ptr,
                graph.comp_us, graph.topo_rank, graph.topo_order, self.emulator._ranked, targets)
            out.evaluations += used
            if index < 0:
                return False
            which, target = (index, int(targets[index])) if targets.size else divmod(index, devices)
            units, kind = moving(which)
            members = set_ops[set_ptr[which]:set_ptr[which + 1]]
            trial = placement.copy()
            trial[members] = target
            logged = (kind, int(self.first_op[units[0]]), int(placement[members[0]]), target)
            if self.keep(trial, self.emulator(trial), logged):
                return True
            begin = index + 1  # shorter but over a limit: the search goes on after it
        return False

    def descend(self) -> None:
        while not self.spent and (self.chain_move() or (self.whole and self.sweep())):
            pass

    def iterate(self) -> None:
        """Iterated local search: kick, descend, keep if strictly shorter, else go back to before the kick."""
        rng = np.random.default_rng(0)
        out, machine = self.out, self.machine
        if self.deep and not self.spent and self.compiled and COMPILED_KICKS:
            self._compiled_iterate(rng)
            return
        while self.deep and not self.spent:
            before, logged = out.answer, len(out.moves)
            trial = before.placement.copy()
            for u in rng.choice(self.units, size=min(self.units, KICK_UNITS), replace=False).tolist():
                trial[self.members_of_unit(self.order[u])] = rng.integers(machine.devices)
            if self.accept(trial, (KICK, -1, -1, -1), worse=True):
                out.restarts += 1
                self.descend()
                if not strictly_shorter(out.answer.makespan_us, before.makespan_us):
                    out.answer = before
                    del out.moves[logged:]

    def _compiled_iterate(self, rng: np.random.Generator) -> None:
        """:meth:`iterate` in one compiled call (:func:`pardnn.polish.kicks.iterate_compiled`): the same
        kicks, moves, log and answer."""
        graph, machine, out = self.graph, self.machine, self.out
        answer = out.answer
        sets = self.moving[: self.sets]
        kinds = np.array([KIND_NAMES.index(_kind(units)) for units in sets], np.int64)
        firsts = np.array([self.first_op[units[0]] for units in sets], np.int64)
        sweep = (self._set_ptr[: self.sets + 1], self._set_ops, kinds, firsts)
        arrays = (graph.succ_ptr, graph.succ, self._edge_comm, graph.pred_ptr, graph.pred, graph.pred_bytes,
                  graph.pred_edge, graph.edge_src, graph.edge_dst, graph.edge_bytes, graph.comp_us, graph.topo_rank,
                  graph.topo_order, graph.kind, graph.out_bytes, accumulating_ops(graph))
        schedule = answer.schedule
        placement, evaluations, restarts, log = iterate_compiled(
            rng, KICK_UNITS, self.unit, self.first_op, self._bounds, self._members, np.array(self.order, np.int64),
            sweep, out.evaluations, self.budget, arrays, machine.devices, self.emulator._ranked, machine.bounded,
            machine.limits_bytes, answer.placement, schedule.start_us, schedule.finish_us, schedule.edge_arrival_us,
            answer.makespan_us)
        out.evaluations, out.restarts = int(evaluations), out.restarts + int(restarts)
        out.moves.extend((KIND_NAMES[code], first, source, target) for code, first, source, target in log.tolist())
        if not np.array_equal(placement, answer.placement):
            out.answer = emulate_and_track(graph, machine, placement, emulator=self.emulator)

    def run(self) -> None:
        """The descent, the kicks (less what they leave to the cluster phase), then the cluster phase."""
        self.descend()
        reserve = self.cluster_reserve()
        self.budget -= reserve
        self.iterate()
        self.budget += reserve
        self.clustered()

    def cluster_reserve(self) -> int:
        """The emulations the kicks leave to the cluster phase: about two sweeps of the clusters (each to
        every other device), at most :data:`CLUSTER_SHARE` of the budget; none without kicks (the descent
        stops at its local minimum and the phase takes what is left)."""
        if not self.deep:
            return 0
        clusters = len(self.moving) - self.paired
        return min(int(self.budget * CLUSTER_SHARE), 2 * clusters * (self.machine.devices - 1))

    def clustered(self) -> None:
        """The last phase: from the local minimum the search ended in, the first cluster move that shortens
        the step, then the descent with the clusters in the sweep; again while a cluster move is kept."""
        if self.paired == len(self.moving):
            return
        self.sets = len(self.moving)
        while not self.spent and self.sweep(self.paired):
            self.descend()


def refine(graph: CostGraph, machine: Machine, start: Emulated, *, seconds: float = REFINE_SECONDS,
           order: RunOrder = None) -> Refined:
    """Shorten the emulated step of ``start`` by moves on its critical chain (module docstring).

    ``start``: a fitting answer, emulated in ``order`` (:data:`~pardnn.emulation.emulator.RunOrder`: every trial
    is emulated in it too). Returns the best answer found, never slower than ``start``, within the
    limits, with the search's log.
    """
    budget = evaluations_for(graph, seconds)
    if budget == 0 or machine.devices < 2 or graph.n == 0:
        return Refined(start, start.makespan_us)
    search = _Search(graph, machine, start, budget, order)
    search.run()
    return search.out


def refine_stage(graph: CostGraph, machine: Machine, current: Emulated, context: Context
                 ) -> tuple[Emulated, RefineDetails]:
    """The refinement as a polishing stage (:mod:`pardnn.polish.stages`): ``context.seconds`` of budget."""
    refined = refine(graph, machine, current, seconds=context.seconds)
    return refined.answer, refined.details()
