"""Valid but degenerate graphs through every placer, ``simulate`` and ``info``: never a crash.

The graphs are drawn by hypothesis (so a failure shrinks to a small one) from the shapes a real user
meets by accident: one op; no edges; disconnected parts; zero, tiny (1e-6 µs) and huge (1e12 µs,
2^62 bytes) costs; zero-byte and control edges; every op in one colocation group; residual ops only;
reference ops with their variable; more devices than ops; a ``memory_limit_bytes`` in the file; and a
1 B/s, 0 µs interconnect. Every placer of the registry (:data:`pardnn.registry.PLACERS`) runs on each,
through the library and through the CLI (``pardnn.cli.main``, in process), and so do ``simulate`` and
``info``. Each call gives a valid placement (every op on a device of the machine, colocation groups
whole, a run order consistent with the graph), or, only on a machine with a memory limit, an
:class:`~pardnn.errors.InfeasibleError`; the CLI exits 0 (or 3 with a limit) with one line per error,
warns once when no op costs anything, prints strict JSON, and never a traceback.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, event, example, find, given, settings
from hypothesis import strategies as st

from pardnn.cli import EXIT_INFEASIBLE, EXIT_OK, format_evaluation, format_report, main
from pardnn.costs.graph import CostGraph, Kind
from pardnn.costs.info import graph_info
from pardnn.costs.machine import Machine
from pardnn.emulation.checks import check_order, check_placement
from pardnn.emulation.simulate import evaluate
from pardnn.errors import InfeasibleError, MissingDependencyError
from pardnn.io import read_placement, write_graph
from pardnn.partitioner import partition
from pardnn.registry import PLACERS

MAX_OPS = 6  # plus up to two variable/reference pairs: well under the exact placer's documented 60 ops
TINY_US, HUGE_US, HUGE_BYTES = 1e-6, 1e12, 2**62
COSTS = (0.0, TINY_US, 1.0, 250.0, HUGE_US)
BYTES = (0, 1, 4096, HUGE_BYTES)
WARNING = "pardnn: warning: every op of graph"
KINDS = ("one op", "no edges", "disconnected", "zero costs", "tiny costs", "huge costs", "huge bytes",
         "zero-byte edges", "control edges", "one colocation group", "residual only", "references",
         "more devices than ops", "memory limit in file", "slow link")


class Case:
    """A drawn graph and the machine options to place it with (as the CLI spells them)."""

    def __init__(self, graph: CostGraph, devices: int, bandwidth: str, latency: str, reserve: float) -> None:
        self.graph, self.devices, self.reserve = graph, devices, reserve
        self.bandwidth, self.latency = bandwidth, latency
        self.machine = Machine(devices, graph.memory_limit_bytes, bandwidth, latency, reserve)

    def __repr__(self) -> str:
        g = self.graph
        return (f"Case(n={g.n}, edges={list(zip(g.edge_src.tolist(), g.edge_dst.tolist()))}, "
                f"edge_bytes={g.edge_bytes.tolist()}, comp={g.comp_us.tolist()}, out={g.out_bytes.tolist()}, "
                f"kind={g.kind.tolist()}, groups={g.colocation.tolist()}, limit={g.memory_limit_bytes}, "
                f"K={self.devices}, {self.bandwidth}, {self.latency}, reserve={self.reserve})")

    def kinds(self) -> list[str]:
        """The degenerate kinds this case is (a property of the graph and machine, not of how it was drawn)."""
        g = self.graph
        zero_bytes = g.edge_bytes == 0
        produced = g.out_bytes[g.edge_src] > 0
        reached = {
            "one op": g.n == 1,
            "no edges": g.m == 0,
            "disconnected": g.n > 1 and _components(g) > 1,
            "zero costs": not g.comp_us.any(),
            "tiny costs": bool((g.comp_us == TINY_US).any()),
            "huge costs": bool((g.comp_us >= HUGE_US).any()),
            "huge bytes": bool((g.out_bytes >= HUGE_BYTES).any()),
            "zero-byte edges": bool((zero_bytes & ~produced).any()),
            "control edges": bool((zero_bytes & produced).any()),
            "one colocation group": g.n > 1 and len(g.group_names) == 1 and bool((g.colocation == 0).all()),
            "residual only": bool((g.kind == Kind.RESIDUAL).all()),
            "references": bool((g.kind == Kind.REFERENCE).any()),
            "more devices than ops": self.devices > g.n,
            "memory limit in file": g.memory_limit_bytes is not None,
            "slow link": self.bandwidth == "1B/s",
        }
        return [kind for kind in KINDS if reached[kind]]


def _components(graph: CostGraph) -> int:
    parent = list(range(graph.n))

    def root(v: int) -> int:
        while parent[v] != v:
            v = parent[v]
        return v

    for u, v in zip(graph.edge_src.tolist(), graph.edge_dst.tolist()):
        parent[root(u)] = root(v)
    return len({root(v) for v in range(graph.n)})


def _per_op(draw: st.DrawFn, values: tuple) -> st.SearchStrategy:
    """Values for the ops: one for all of them (as often as not; shrinks to the first), or any."""
    same = draw(st.one_of(st.sampled_from(values), st.none()))
    return st.sampled_from(values) if same is None else st.just(same)


@st.composite
def degenerate_cases(draw: st.DrawFn) -> Case:
    n = draw(st.integers(1, MAX_OPS))
    pairs = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=2 * n))
    edges = sorted({(min(a, b), max(a, b)) for a, b in pairs if a != b})
    if n > 1 and draw(st.booleans()):  # two parts with no edge between them
        cut = draw(st.integers(1, n - 1))
        edges = [(a, b) for a, b in edges if (a < cut) == (b < cut)]
    costs, sizes = _per_op(draw, COSTS), _per_op(draw, BYTES)
    comp = draw(st.lists(costs, min_size=n, max_size=n))
    out = draw(st.lists(sizes, min_size=n, max_size=n))
    kind = [draw(st.sampled_from([Kind.NORMAL, Kind.RESIDUAL]))] * n if draw(st.booleans()) else \
        draw(st.lists(st.sampled_from([Kind.NORMAL, Kind.RESIDUAL]), min_size=n, max_size=n))
    grouping = draw(st.sampled_from(["none", "one", "some"]))
    groups: list[str | None] = ["all"] * n if grouping == "one" else [None] * n
    if grouping == "some":
        groups = draw(st.lists(st.sampled_from([None, "g0", "g1"]), min_size=n, max_size=n))
    names = [f"op{v}" for v in range(n)]
    for i in range(draw(st.integers(0, 2))):  # a variable and the op that updates it, on its device
        var, update = len(names), len(names) + 1
        names += [f"var{i}", f"var{i}/Apply"]
        comp += [draw(costs)] * 2
        out += [draw(sizes), 0]
        kind += [Kind.RESIDUAL, Kind.REFERENCE]
        groups += [f"var{i}"] * 2 if grouping != "one" else ["all"] * 2
        edges += [(var, update), (draw(st.integers(0, n - 1)), update)]
    control = draw(st.lists(st.booleans(), min_size=len(edges), max_size=len(edges)))
    src, dst = zip(*edges) if edges else ((), ())
    limit = draw(st.one_of(st.none(), st.sampled_from([1, 4096, HUGE_BYTES, 2**63 - 1])))
    graph = CostGraph(names, comp, out, list(src), list(dst), [0 if c else None for c in control], kind=kind,
                      colocation=groups, name="degenerate", memory_limit_bytes=limit)
    devices = draw(st.sampled_from([1, 2, 3, 16, graph.n + 1]))
    return Case(graph, devices, draw(st.sampled_from(["150GB/s", "1B/s"])), draw(st.sampled_from(["25us", "0us"])),
                draw(st.sampled_from([0.1, 0.0])))


def _check_placed(case: Case, placement: np.ndarray, order: np.ndarray | None) -> None:
    place = check_placement(case.graph, case.machine, placement, colocation=True)  # every op, groups whole
    assert place.shape == (case.graph.n,)
    if order is not None:
        check_order(case.graph, place, order)


def _strict_json(text: str) -> dict:
    def refuse(constant: str) -> None:
        raise AssertionError(f"not JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse: a bad command line (never expected here)
            code = int(exc.code or 0)
    assert "Traceback" not in err.getvalue(), err.getvalue()
    return code, out.getvalue(), err.getvalue()


def _library(case: Case) -> None:
    graph, machine = case.graph, case.machine
    info = graph_info(graph, machine)
    assert info["dop"] is None or info["dop"] >= 1 - 1e-9
    assert info["ccr"] is None or info["ccr"] >= 0
    proofs, fitting = [], []
    for name, placer in PLACERS.items():
        try:
            result = placer(graph, machine)
        except InfeasibleError as exc:
            assert machine.bounded, f"{name}: {exc}"
            event(f"library: {name} raised {type(exc).__name__}")
            proofs += [f"{name}: {exc}"] if exc.proven else []
            continue
        except MissingDependencyError:  # documented: metis without pymetis, exact without OR-Tools
            continue
        _check_placed(case, result.placement, result.order)
        evaluation = evaluate(graph, machine, result.placement, order=result.order)
        assert evaluation.ratio is None or evaluation.ratio >= 1 - 1e-9, (name, evaluation)
        assert format_report(result.report) and format_evaluation(evaluation)  # the CLI's text, "—" for no ratio
        fitting += [name] if evaluation.memory_fits else []
    assert not (proofs and fitting), f"proven infeasible, yet {fitting} fit: {proofs}"  # docs/design.md, "Errors"


def _cli(case: Case, folder: Path) -> None:
    graph_path = folder / "g.json"
    write_graph(case.graph, graph_path)
    link = ["--bandwidth", case.bandwidth, "--latency", case.latency, "--reserve", str(case.reserve)]
    for text in ([], ["--json"]):
        code, out, err = _run(["info", str(graph_path), *link[:4], *text])
        assert code == EXIT_OK and not err, err
        if text:
            _strict_json(out)
    uncosted = not case.graph.comp_us.any()
    for name in PLACERS:
        placement = folder / f"{name}.txt"
        code, out, err = _run(["place", str(graph_path), "-k", str(case.devices), "-a", name, *link, "--json",
                               "--refine-seconds", "0.01", "--time-budget", "1", "-o", str(placement)])
        warnings = [line for line in err.splitlines() if line.startswith(WARNING)]
        assert len(warnings) == int(uncosted), err  # the zero-cost warning, once
        errors = [line for line in err.splitlines() if not line.startswith(WARNING)]
        assert all(line.startswith("pardnn: ") for line in errors), err
        if code == EXIT_INFEASIBLE:
            assert case.machine.bounded, err
            assert len(errors) == 2 and errors[1] == "pardnn: no placement was written", err  # one line, and that
            assert not placement.exists()
            event(f"CLI: {name} exit 3")
            continue
        if "not installed" in err or "needs OR-Tools" in err:
            continue
        assert code == EXIT_OK and not errors, (name, code, err)
        report = _strict_json(out)
        assert report["ops"] == case.graph.n
        for view in ([], ["--json"]):
            code, out, err = _run(["simulate", str(graph_path), str(placement), "-k", str(case.devices), *link, *view])
            assert code == EXIT_OK and not err, err
            if view:
                _strict_json(out)


# A user's graph: a -> b, a -> c, a -> d, d -> e; every op 0 µs with 0-byte outputs.
FAN_OUT = CostGraph(list("abcde"), [0.0] * 5, [0] * 5, [0, 0, 0, 3], [1, 2, 3, 4], name="fan-out")
# Found by this test: 8 EiB of variables fitted in 0 B (int64 wrapped), or in 2^63 - 1 B (it saturated).
EXABYTES = CostGraph(["a", "v", "v/Apply", "w", "w/Apply"], [0.0] * 5, [HUGE_BYTES, HUGE_BYTES, 0, HUGE_BYTES, 0],
                     [0, 0, 1, 3], [2, 4, 2, 4], kind=[0, 1, 2, 1, 2], colocation=[None, "v", "v", "w", "w"],
                     name="exabytes", memory_limit_bytes=1)

# Found by this test: heuristic I moved a 2^63-byte unit (two 2^62-byte buffers) and its room
# arithmetic passed int64 (OverflowError); rooms are now float64, reservations saturate.
ONE_GROUP = CostGraph([f"op{i}" for i in range(6)], [0.0] * 6, [0, HUGE_BYTES, 0, 0, HUGE_BYTES, 0],
                      [0, 0, 2, 4], [3, 5, 3, 5], [0, 0, 0, HUGE_BYTES], kind=[0, 0, 1, 2, 1, 2],
                      colocation=[0] * 6, name="one-group", memory_limit_bytes=2**63 - 1)


@pytest.mark.slow
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(degenerate_cases())
@example(Case(FAN_OUT.replace(memory_limit_bytes=1024), 16, "150GB/s", "25us", 0.0))
@example(Case(EXABYTES, 1, "150GB/s", "25us", 0.1))
@example(Case(EXABYTES.replace(memory_limit_bytes=2**63 - 1), 1, "1B/s", "0us", 0.0))
@example(Case(ONE_GROUP, 16, "150GB/s", "25us", 0.0))
def test_degenerate_graphs_place_simulate_and_inform(case: Case) -> None:
    for kind in case.kinds():
        event(kind)
    _library(case)
    with tempfile.TemporaryDirectory() as folder:
        _cli(case, Path(folder))


@pytest.mark.parametrize("kind", KINDS)
def test_the_strategy_reaches_every_degenerate_kind(kind: str) -> None:
    """The property test's graphs are not mostly trivial: each kind is drawn (and shrinks to a small case)."""
    case = find(degenerate_cases(), lambda c: kind in c.kinds(),
                settings=settings(max_examples=2000, database=None, phases=[Phase.generate]))
    assert kind in case.kinds()


def _fan_out(tmp_path: Path) -> tuple[CostGraph, Path]:
    write_graph(FAN_OUT, tmp_path / "g.json")
    return FAN_OUT, tmp_path / "g.json"


@pytest.mark.parametrize("memory", [[], ["--memory", "1KiB", "--reserve", "0"]], ids=["unlimited", "1KiB"])
def test_place_a_graph_without_costs_warns_once(tmp_path, capsys, memory):
    """On 16 devices the paper's placement cuts edges (25 µs each); every op on one device takes 0 µs,
    so the guard keeps that: a ratio over a 0 µs makespan, which crashed (ZeroDivisionError)."""
    graph, path = _fan_out(tmp_path)
    out = tmp_path / "p.txt"
    assert main(["place", str(path), "-k", "16", *memory, "-o", str(out)]) == EXIT_OK
    text, err = capsys.readouterr()
    assert err.count("\n") == 1 and err.startswith(WARNING) and "'fan-out' (5 ops) costs 0 us" in err
    assert "pardnn.tf.profile or pardnn.tf.estimate" in err and "`pardnn capture --profile N`" in err
    assert "makespan        0.0 us   lower bound 0.0 us   ratio 1.000" in text and "CCR —" in text
    assert "single is faster than ParDNN's own placement (0.0 us vs 25.0 us)" in text
    assert read_placement(out, graph, devices=16).tolist() == [0] * 5
    assert main(["place", str(path), "-k", "16", *memory, "-o", str(out), "--json"]) == EXIT_OK
    text, err = capsys.readouterr()
    report = _strict_json(text)
    assert err.count(WARNING) == 1
    assert report["ccr"] is None and report["details"]["guard"]["speedup_over_pardnn"] is None
    assert report["evaluation"]["makespan_us"] == 0 and report["evaluation"]["makespan_over_lower_bound"] == 1.0
    assert main(["info", str(path), "--json"]) == EXIT_OK
    info = _strict_json(capsys.readouterr().out)
    assert info["dop"] is None and info["ccr"] is None and info["total_work_us"] == 0


def test_partition_a_graph_without_costs_warns_once(tmp_path, caplog):
    graph, _ = _fan_out(tmp_path)
    with caplog.at_level(logging.WARNING, logger="pardnn"):
        result = partition(graph, Machine(16, "1KiB", reserve=0))
    assert result.placement.tolist() == [0] * 5 and result.report.evaluation.makespan_us == 0
    warned = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and "costs 0 us" in warned[0].getMessage()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="pardnn"):
        partition(graph.replace(comp_us=[1.0, 0.0, 0.0, 0.0, 0.0]), Machine(16))
    assert not caplog.records  # one op with a cost: no warning
