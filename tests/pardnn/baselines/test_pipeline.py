"""The pipeline candidate (pardnn/baselines/pipeline.py): layers found from the graph, stages balanced,
every micro-batch copy with its op, a 1F1B or GPipe run order; and the guard carrying it."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pardnn import partition
from pardnn.baselines.pipeline import layer_positions, pipeline_placement, run_order, stage_split
from pardnn.costs.graph import CostGraph, Kind
from pardnn.costs.machine import Machine
from pardnn.emulation.checks import check_order
from pardnn.emulation.emulator import emulate
from pardnn.emulation.simulate import evaluate
from pardnn.registry import PLACERS
from tests.conftest import most_reach, random_dags, reached

FREE = {"bandwidth": "1000000TB/s", "latency": "0us"}  # transfers cost nothing: makespans by hand


def chain_copies(layers: int = 2, micro: int = 2, *, fwd_us: float = 1.0, act: int = 1 << 20,
                 weight: int = 1 << 20, name: str = "chain") -> CostGraph:
    """A chain of ``layers`` weight layers trained on ``micro`` micro-batches, built as a captured
    micro-batched step is: per layer a variable ``W``, its read ``R`` and its update ``U`` (one
    colocation group); per micro-batch ``m`` the input ``x``, forward ``f_l`` (reads ``f_{l-1}`` and
    ``R_l``), the loss, and backward ``dW_l`` (reads the gradient from above and ``f_{l-1}``) and
    ``g_l`` (the gradient below: reads the gradient from above, ``R_l`` and ``f_l``); the shared sum
    ``S_l`` of the micro-batches' ``dW_l`` feeds ``U_l``. Forward and each backward op cost ``fwd_us``."""
    names: list[str] = []
    comp: list[float] = []
    out: list[int] = []
    kind: list[int] = []
    group: list[str | None] = []
    ops: list[str] = []
    batch: list[int | None] = []
    source: list[int | None] = []
    index: dict[str, int] = {}

    def add(op: str, us: float, nbytes: int, *, k: Kind = Kind.NORMAL, g: str | None = None, m: int = -1,
            original: str | None = None) -> None:
        index[op] = len(names)
        names.append(op)
        comp.append(us)
        out.append(nbytes)
        kind.append(int(k))
        group.append(g)
        ops.append(op.split("/")[-1].rstrip("0123456789"))
        batch.append(None if m < 0 else m)
        source.append(None if original is None else index[original])

    edges: list[tuple[str, str, int]] = []
    for layer in range(layers):
        add(f"W{layer}", 0.0, weight, k=Kind.RESIDUAL, g=f"W{layer}")
        add(f"R{layer}", 0.0, 0, g=f"W{layer}")
        edges.append((f"W{layer}", f"R{layer}", 0))
    for m in range(micro):
        scope = f"m{m}/"

        def of(op: str, m: int = m) -> str | None:
            return None if m == 0 else f"m0/{op}"

        add(scope + "x", 0.0, act, m=m, original=of("x"))
        before = scope + "x"
        for layer in range(layers):
            add(scope + f"f{layer}", fwd_us, act, m=m, original=of(f"f{layer}"))
            edges += [(before, scope + f"f{layer}", act), (f"R{layer}", scope + f"f{layer}", weight)]
            before = scope + f"f{layer}"
        add(scope + "loss", 0.0, 4, m=m, original=of("loss"))
        edges.append((before, scope + "loss", act))
        grad = scope + "loss"
        for layer in reversed(range(layers)):
            below = scope + (f"f{layer - 1}" if layer else "x")
            add(scope + f"dW{layer}", fwd_us, weight, m=m, original=of(f"dW{layer}"))
            edges += [(grad, scope + f"dW{layer}", act), (below, scope + f"dW{layer}", act)]
            add(scope + f"g{layer}", fwd_us, act, m=m, original=of(f"g{layer}"))
            edges += [(grad, scope + f"g{layer}", act), (f"R{layer}", scope + f"g{layer}", weight),
                      (scope + f"f{layer}", scope + f"g{layer}", act)]
            grad = scope + f"g{layer}"
    for layer in range(layers):
        add(f"S{layer}", 0.0, weight)
        edges += [(f"m{m}/dW{layer}", f"S{layer}", weight) for m in range(micro)]
        add(f"U{layer}", 0.0, 0, k=Kind.REFERENCE, g=f"W{layer}")
        edges.append((f"S{layer}", f"U{layer}", weight))
    return CostGraph.from_named_edges(names, comp, out, edges, kind=kind, colocation=group, ops=ops,
                                      micro_batch=batch, copy_of=source, name=name)


def test_layers_of_a_chain_put_backward_ops_with_their_forward_ops_and_weights():
    g = chain_copies(layers=3, micro=2)
    pos, late, layers = layer_positions(g)
    at = dict(zip(g.names, pos.tolist(), strict=True))
    assert layers == 3
    for layer in range(3):
        for m in range(2):
            for op in (f"f{layer}", f"dW{layer}", f"g{layer}"):
                assert at[f"m{m}/{op}"] == layer, op
        assert at[f"W{layer}"] == at[f"R{layer}"] == at[f"U{layer}"] == at[f"S{layer}"] == layer
    assert at["m0/x"] == 0 and at["m1/loss"] == 2
    assert late[g.index["m0/g1"]] and not late[g.index["m0/f1"]]


def test_a_two_layer_two_micro_batch_chain_worked_by_hand():
    """Layers of 3 us per micro-batch (forward 1, two backward ops 1 each), M = 2, K = 2, free transfers:
    stage 0 = layer 0, stage 1 = layer 1 (6 us each). Device 1 runs micro-batch 0's forward, loss and
    backward over [1, 4] (f1 waits for f0 until 1), micro-batch 1's over [4, 7]; device 0 runs f0 of both
    over [0, 2], then dW0, g0 of micro-batch 0 once g1 arrives (4): [4, 6], of micro-batch 1 at 7: [7, 9].
    Makespan 9 in both orders (1F1B's one warm-up forward on stage 0 is GPipe's order here)."""
    g = chain_copies(layers=2, micro=2)
    machine = Machine(2, **FREE)
    placed = pipeline_placement(g, machine)
    device = dict(zip(g.names, placed.placement.tolist(), strict=True))
    for m in range(2):
        assert {device[f"m{m}/{op}"] for op in ("x", "f0", "dW0", "g0")} == {0}
        assert {device[f"m{m}/{op}"] for op in ("f1", "loss", "dW1", "g1")} == {1}
    assert device["W0"] == device["U0"] == device["S0"] == 0 and device["W1"] == device["U1"] == device["S1"] == 1
    assert placed.details["stages"] == 2 and placed.details["micro_batches"] == 2
    assert placed.details["makespans_us"]["1f1b"] == pytest.approx(9.0)
    assert placed.details["makespans_us"]["gpipe"] == pytest.approx(9.0)
    schedule = emulate(g, machine, placed.placement, order=placed.order)
    assert schedule.makespan_us == pytest.approx(9.0)
    start = dict(zip(g.names, schedule.start_us.tolist(), strict=True))
    assert (start["m0/dW0"], start["m1/dW0"], start["m1/f1"]) == pytest.approx((4.0, 7.0, 4.0))


def test_stage_split_is_pipedreams_balance():
    """Units of work 4, 1, 1, 4 on 2 stages: {4, 1} | {1, 4} (5 each); a boundary costing 6 after unit 1
    makes {4} | {1, 1, 4} (6), boundaries of 11 one stage (10); memory 3 per unit under a limit of 6
    forbids any three units on a stage."""
    work = np.array([4.0, 1.0, 1.0, 4.0])
    free = np.zeros(4)
    memory = np.ones((2, 4))
    assert stage_split(work, free, memory, None).tolist() == [0, 2]
    assert stage_split(work, np.array([0.0, 6.0, 0.0, 0.0]), memory, None).tolist() == [0, 1]
    assert stage_split(work, np.array([11.0, 11.0, 11.0, 0.0]), memory, None).tolist() == [0]  # one stage: 10
    assert stage_split(work, free, 3 * memory, np.array([6.0, 6.0])).tolist() == [0, 2]
    assert stage_split(work, free, 3 * memory, np.array([5.0, 5.0])).size == 0  # no split fits


def test_gpipe_and_1f1b_orders_follow_their_schedules():
    """Stage 0 of K = 2 with M = 3: GPipe runs F0 F1 F2 B0 B1 B2; 1F1B one warm-up forward, then F1 B0 F2 B1 B2."""
    g = chain_copies(layers=2, micro=3)
    pos, late, _ = layer_positions(g)
    placement = pos.copy()
    for schedule, expected in (("gpipe", ["f0/0", "f0/1", "f0/2", "g0/0", "g0/1", "g0/2"]),
                               ("1f1b", ["f0/0", "f0/1", "g0/0", "f0/2", "g0/1", "g0/2"])):
        order = run_order(g, placement, late, schedule)
        check_order(g, placement, order)
        ops = [f"m{m}/{op}" for m in range(3) for op in ("f0", "g0")]
        ranked = sorted(ops, key=lambda op: order[g.index[op]])
        assert [f"{op.split('/')[1]}/{op[1]}" for op in ranked] == expected, schedule


@most_reach
@given(random_dags(max_ops=20, min_ops=3), st.sampled_from([2, 3, 2, 3, 1]), st.integers(2, 4), st.booleans(),
       st.sampled_from(["150GB/s", "1GB/s"]))
def test_pipeline_keeps_groups_whole_and_every_copy_with_its_op(dag, micro, k, shared_groups, bandwidth):
    """M copies of a random DAG reading K shared weights by bands of its topological order (colocation
    labels shared by the copies or one set per copy): the placement keeps every group whole and every
    copy on its original's device; its run order is valid."""
    g = _copies(dag, micro, shared_groups, k)
    placed = PLACERS["pipeline"](g, Machine(k, bandwidth=bandwidth, latency="1us"))
    place = placed.placement
    for members in g.group_members():
        assert np.unique(place[members]).size == 1
    assert g.copy_of is not None and (place == place[g.copy_of]).all()
    if placed.order is not None:
        check_order(g, place, placed.order)
    reached(micro > 1 and np.unique(place).size > 1, "copies of a graph placed on two devices or more")


def _copies(dag: CostGraph, micro: int, shared_groups: bool, weights: int) -> CostGraph:
    """``micro`` copies of ``dag`` (micro-batches 0..micro-1; 10 us added to every op, so a split can
    pay), and ``weights`` shared variables ``W_j`` with their reads ``R_j`` (one group each): op i of
    every copy reads ``R_j`` for the j-th band of the topological order."""
    n = dag.n
    names = [f"m{m}/{name}" for m in range(micro) for name in dag.names] + [f"{w}{j}" for j in range(weights)
                                                                           for w in "WR"]
    labels = [None if c < 0 else dag.group_names[c] for c in dag.colocation.tolist()]
    colocation = [None if label is None else label if shared_groups else f"{label}/m{m}"
                  for m in range(micro) for label in labels] + [f"weight{j}" for j in range(weights) for _ in "WR"]
    base = micro * n
    band = dag.topo_rank * weights // max(n, 1)
    src = np.concatenate([dag.edge_src + m * n for m in range(micro)] + [base + 2 * np.arange(weights)]
                         + [base + 2 * band + 1] * micro)
    dst = np.concatenate([dag.edge_dst + m * n for m in range(micro)] + [base + 2 * np.arange(weights) + 1]
                         + [np.arange(n) + m * n for m in range(micro)])
    edge_bytes = np.concatenate([np.tile(dag.edge_bytes, micro), np.zeros(weights, np.int64),
                                 np.full(micro * n, 4000, np.int64)])
    extra = 2 * weights
    return CostGraph(names, np.concatenate([np.tile(dag.comp_us + 10.0, micro), np.zeros(extra)]),
                     np.concatenate([np.tile(dag.out_bytes, micro), np.tile([4000, 0], weights)]), src, dst, edge_bytes,
                     kind=np.concatenate([np.tile(dag.kind, micro), np.tile([Kind.RESIDUAL, Kind.NORMAL], weights)]),
                     colocation=colocation, ops=list(dag.ops) * micro + ["VarHandleOp", "ReadVariableOp"] * weights,
                     micro_batch=np.concatenate([np.repeat(np.arange(micro), n), np.full(extra, -1)]),
                     copy_of=np.concatenate([np.tile(np.arange(n), micro), base + np.arange(extra)]), name="copies")


def test_a_graph_without_metadata_is_its_own_single_copy():
    g = chain_copies(layers=3, micro=1).replace(micro_batch=None)
    placed = pipeline_placement(g, Machine(3, **FREE))
    assert placed.details["micro_batches"] == 1 and placed.details["stages"] == 3


def test_the_pipeline_wins_the_guard_on_a_chain_of_heavy_layers():
    """8 layers of 1 GiB weights, 8 micro-batches, K = 4: keeping each layer's weights on one device and
    pipelining the micro-batches is what wins; the guard keeps the pipeline in its own run order and
    says so. Measured: pipeline 6,815 us (GPipe order); the next candidate 19,178 us, ParDNN's Steps 1
    and 2 22,695 us."""
    g = chain_copies(layers=8, micro=8, fwd_us=100.0, weight=1 << 30)
    machine = Machine(4, bandwidth="150GB/s", latency="25us")
    result = partition(g, machine, refine_seconds=0)
    guard = result.report.details["guard"]
    assert guard.winner == "pipeline" and guard.ordered
    others = [v for name, v in guard.candidates.items() if name != "pipeline" and v is not None]
    assert guard.candidates["pipeline"] < min(others)
    assert result.report.evaluation.makespan_us <= guard.candidates["pipeline"] * (1 + 1e-9)
    unordered = partition(g, machine, refine_seconds=0, ordered=False)
    assert unordered.order is None  # ordered=False: no order, the pipeline judged in order of readiness


def test_under_a_memory_limit_1f1b_fits_where_gpipe_does_not():
    """2 layers, 4 micro-batches of 1 MiB activations, K = 2: GPipe keeps all 4 micro-batches' activations
    on stage 0 until their backward (peak 9 MiB), 1F1B at most 2 (5 MiB); at 6 MiB per device the placer
    returns the 1F1B order, which fits, although all three orders take the same time."""
    g = chain_copies(layers=2, micro=4, weight=1 << 10)
    unbounded = pipeline_placement(g, Machine(2, **FREE))
    assert all(v == pytest.approx(15.0) for v in unbounded.details["makespans_us"].values())
    machine = Machine(2, memory="6MiB", reserve=0.0, **FREE)
    placed = pipeline_placement(g, machine)
    assert placed.details["schedule"] == "1f1b" and placed.details["memory_respected"]
    result = PLACERS["pipeline"](g, machine)
    assert result.report.evaluation.memory_fits and result.order is not None
    gpipe = run_order(g, placed.placement, layer_positions(g)[1], "gpipe")
    assert not evaluate(g, machine, placed.placement, order=gpipe).memory_fits
    assert not evaluate(g, machine, placed.placement).memory_fits  # nor in order of readiness
