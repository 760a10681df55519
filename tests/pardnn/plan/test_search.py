"""Choosing replicas × devices × micro-batches (pardnn.plan.search): the search, the tie rule, the reasons."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pardnn import CostGraph, Kind, Machine
from pardnn.emulation.allreduce import Cluster
from pardnn.plan.microbound import MicroBound, PlainTerms, launch_bound_us, micro_bound_us, repeated_ops
from pardnn.plan.search import Plan, Planner, PlanSearch, replica_options
from tests.conftest import most_reach, reached


class _Steps:
    """A :class:`pardnn.plan.search.Steps` from stand-in functions."""

    def __init__(self, graph_for, bound_for=None, ahead=None) -> None:
        self.graph_for = graph_for
        if bound_for is not None:
            self.bound_for = bound_for
        if ahead is not None:
            self.ahead = ahead


def search_plans(graph_for, machine_for, cluster_for, *, node_devices: int, nodes: int, node_batch: int,
                 micro_batches=(1, 2, 4, 8, 16), prune: bool = True, bound_for=None, ahead=None,
                 on_trial=None) -> PlanSearch:
    """:meth:`Planner.search` over every k, the plan search's steps given as functions."""
    planner = Planner(_Steps(graph_for, bound_for, ahead), machine_for, cluster_for, node_devices=node_devices,
                      nodes=nodes, node_batch=node_batch)
    return planner.search(micro_batches=micro_batches, prune=prune, on_trial=on_trial)

MB = 1_000_000


def layers(batch: int, micro: int, width: int = 4, tail_us: float = 1.0, overhead_us: float = 0.0) -> CostGraph:
    """``width`` independent layers: each a forward op (10 µs per sample, plus ``overhead_us`` a launch), its
    gradient (1 MB) and its update; with M micro-batches each op's time is per micro-batch, M times over (a
    chain of M copies). The gradient and the update take ``tail_us`` each."""
    names, comp, out, src, dst, kind = [], [], [], [], [], []
    for layer in range(width):
        previous = None
        for m in range(micro):
            names.append(f"l{layer}/fwd{m}")
            comp.append(10.0 * batch / micro + overhead_us)
            out.append(1000)
            kind.append(Kind.NORMAL)
            if previous is not None:
                src.append(previous)
                dst.append(len(names) - 1)
            previous = len(names) - 1
        names += [f"l{layer}/grad", f"l{layer}/update"]
        comp += [tail_us, tail_us]
        out += [MB, 0]
        kind += [Kind.NORMAL, Kind.REFERENCE]
        src += [previous, len(names) - 2]
        dst += [len(names) - 2, len(names) - 1]
    return CostGraph(names, comp, out, src, dst, kind=kind)


def test_replica_options_are_the_divisors_most_replicas_first() -> None:
    assert replica_options(16) == [1, 2, 4, 8, 16] and replica_options(6) == [1, 2, 3, 6]
    assert Plan(4, 2, 16).replicas_per_node == 4 and Plan(4, 2, 16).label == "k=4 M=2"


def test_the_search_reports_every_plan_and_why_some_are_skipped() -> None:
    search = search_plans(layers, lambda k: Machine(k), lambda r: Cluster(nodes=2, replicas_per_node=r),
                          node_devices=4, nodes=2, node_batch=6, micro_batches=(1, 2, 4))
    by_plan = {(t.plan.replica_devices, t.plan.micro_batches): t for t in search.trials}
    assert sorted(by_plan) == [(k, m) for k in (1, 2, 4) for m in (1, 2, 4)]
    assert by_plan[1, 1].reason == "the node's batch 6 does not split over 4 replicas"
    assert by_plan[2, 2].replica_batch == 3 and by_plan[2, 2].reason == ("the replica's batch 3 does not split into "
                                                                         "2 micro-batches")
    assert by_plan[4, 2].status == "fits" and by_plan[4, 2].replica_batch == 6
    assert search.chosen is not None and search.chosen.fits


def test_without_communication_more_replicas_win_the_tie() -> None:
    """A free network and link, gradients and updates of 0 µs: k = 1 runs its 4 layers at batch 2 one after
    another (4 × 20 µs), k = 2 two at batch 4 on each device (2 × 40), k = 4 one at batch 8 on each (80): a
    three-way tie, which goes to the most replicas."""
    free = lambda r: Cluster(nodes=1, replicas_per_node=r, link_Bps=float("inf"), link_latency_us=0, cycle_us=0)  # noqa: E731
    search = search_plans(lambda b, m: layers(b, m, tail_us=0.0), lambda k: Machine(k, latency="0us"), free,
                          node_devices=4, nodes=1, node_batch=8, micro_batches=(1,))
    assert {t.plan.replica_devices: t.step_us for t in search.trials} == {1: 80.0, 2: 80.0, 4: 80.0}
    assert search.chosen is not None and search.chosen.plan.replica_devices == 1
    assert search.why.startswith("k=1 M=1: as fast as") and "simpler" in search.why


def test_a_slow_network_makes_one_replica_per_node_win() -> None:
    """1 MB per layer across 2 nodes at 10 MB/s is 100 ms a gradient: data parallelism (4 replicas per node)
    averages inside the node too; one replica of 4 devices per node averages across nodes only, and the
    node's link is fast; both pay the network, so the fewer the buffers the better — the search must
    simply pick the shortest step, whatever it is."""
    slow = lambda r: Cluster(nodes=2, replicas_per_node=r, link_Bps=1e9, network_Bps=1e7, cycle_us=0)  # noqa: E731
    search = search_plans(layers, lambda k: Machine(k), slow, node_devices=4, nodes=2, node_batch=8,
                          micro_batches=(1,))
    fitting = [t for t in search.trials if t.fits]
    assert search.chosen is min(fitting, key=lambda t: (t.step_us, t.plan.replica_devices))


def test_nothing_fits_says_so() -> None:
    search = search_plans(layers, lambda k: Machine(k, memory="1KB", reserve=0),
                          lambda r: Cluster(nodes=1, replicas_per_node=r), node_devices=2, nodes=1, node_batch=2,
                          micro_batches=(1,))
    assert search.chosen is None and search.why == "no plan fits every device's memory"
    assert {t.status for t in search.trials} <= {"infeasible", "does_not_fit"}


@pytest.mark.slow
@settings(max_examples=25, deadline=None)
@given(st.sampled_from([2, 4]), st.integers(1, 3), st.sampled_from([4, 8]), st.sampled_from([1e7, 1e9, 1e11]),
       st.integers(1, 6))
def test_the_chosen_plan_is_never_slower_than_data_parallelism_or_one_replica(g: int, nodes: int, batch: int,
                                                                             network: float, width: int) -> None:
    cluster = lambda r: Cluster(nodes=nodes, replicas_per_node=r, network_Bps=network, cycle_us=100.0)  # noqa: E731
    search = search_plans(lambda b, m: layers(b, m, width), lambda k: Machine(k), cluster, node_devices=g,
                          nodes=nodes, node_batch=batch, micro_batches=(1, 2))
    assert search.chosen is not None
    for k in (1, g):
        for trial in search.trials:
            if trial.plan.replica_devices == k and trial.fits:
                assert search.chosen.step_us <= trial.step_us * (1 + 1e-9)
    assert search.chosen.samples_per_s == pytest.approx(nodes * batch / (search.chosen.step_us * 1e-6))
    assert np.isfinite(search.seconds)


def test_a_plan_whose_bound_is_longer_than_a_fitting_step_is_not_placed() -> None:
    """A node of 2 devices, batch 8, one node, a free network, 4 layers (gradient and update 1 µs each).
    Tried by M, then k: k = 1 (2 replicas of 4 samples) runs 4 × (40 + 2) = 168 µs on its device; k = 2
    (one replica of 8) two layers a device, 2 × (80 + 2) = 164 µs. Then M = 2: k = 1's work is still 168 µs
    on one device, a bound longer than 164 µs: pruned, not placed. k = 2 at M = 2 has the bound 164 µs,
    not longer: placed, and the tie goes to M = 1."""
    free = lambda r: Cluster(nodes=1, replicas_per_node=r, link_Bps=float("inf"), link_latency_us=0, cycle_us=0)  # noqa: E731
    placed: list[tuple[int, int]] = []

    def graph_for(batch: int, micro: int) -> CostGraph:
        return layers(batch, micro)

    def machine_for(k: int) -> Machine:
        placed.append(k)
        return Machine(k, latency="0us")

    tried: list[str] = []
    search = search_plans(graph_for, machine_for, free, node_devices=2, nodes=1, node_batch=8, micro_batches=(1, 2),
                          on_trial=lambda t: tried.append(t.plan.label))
    assert tried == ["k=1 M=1", "k=2 M=1", "k=1 M=2", "k=2 M=2"]
    by_plan = {(t.plan.replica_devices, t.plan.micro_batches): t for t in search.trials}
    assert [t.plan.label for t in search.trials] == ["k=1 M=1", "k=1 M=2", "k=2 M=1", "k=2 M=2"]  # the table's order
    assert (by_plan[1, 1].step_us, by_plan[2, 1].step_us, by_plan[2, 2].step_us) == (168.0, 164.0, 164.0)
    pruned = by_plan[1, 2]
    assert (pruned.status, pruned.bound_us, pruned.step_us, pruned.samples_per_s) == ("pruned", 168.0, None, None)
    assert pruned.reason == ("its step is at least 0.17 ms (compute / k or the critical path), longer than 0.16 ms "
                             "that fits")
    assert search.chosen is by_plan[2, 1]
    assert placed == [1, 2, 2]  # a machine for each plan placed; none for the pruned one
    everything = search_plans(graph_for, lambda k: Machine(k, latency="0us"), free, node_devices=2, nodes=1,
                              node_batch=8, micro_batches=(1, 2), prune=False)
    assert {t.status for t in everything.trials} == {"fits"}
    assert [t.step_us for t in everything.trials] == [168.0, 168.0, 164.0, 164.0]


def test_a_plan_bounded_from_its_plain_step_is_not_built() -> None:
    """As above, with a bound before the graph: k = 1 at M = 2 (4 samples, 2 micro-batches) has the bound
    168 µs (its compute on one device) against 164 µs that fits, so its graph is never asked for, and
    the builder hears before each trial which plans may still be placed, with their bounds."""
    free = lambda r: Cluster(nodes=1, replicas_per_node=r, link_Bps=float("inf"), link_latency_us=0, cycle_us=0)  # noqa: E731
    asked: list[tuple[int, int]] = []
    told: list[list[tuple[int, int, float | None]]] = []

    def graph_for(batch: int, micro: int) -> CostGraph:
        asked.append((batch, micro))
        return layers(batch, micro)

    def bound_for(batch: int, micro: int, k: int, ready_only: bool = False) -> MicroBound:
        return MicroBound(layers(batch, micro).total_work_us / k, "its compute over k")

    search = search_plans(graph_for, lambda k: Machine(k, latency="0us"), free, node_devices=2, nodes=1, node_batch=8,
                          micro_batches=(1, 2), bound_for=bound_for, ahead=told.append)
    assert asked == [(4, 1), (8, 1), (8, 2)]
    assert told == [[(4, 1, None), (8, 1, None), (4, 2, 168.0), (8, 2, 164.0)],  # nothing fits yet: all left
                    [(8, 1, None), (4, 2, 168.0), (8, 2, 164.0)], [(8, 2, 164.0)], [(8, 2, 164.0)]]
    pruned = next(t for t in search.trials if t.status == "pruned")
    assert (pruned.plan.label, pruned.bound_us, pruned.ops) == ("k=1 M=2", 168.0, 0)
    assert pruned.reason == ("its step is at least 0.17 ms (its compute over k; not built), longer than 0.16 ms "
                             "that fits")
    assert search.chosen.plan.label == "k=2 M=1"


@pytest.mark.slow
@most_reach
@settings(max_examples=12, deadline=None)
@given(st.sampled_from([2, 4]), st.integers(1, 3), st.sampled_from([4, 8]), st.sampled_from([1e12, 1e11]),
       st.integers(2, 6), st.floats(0.0, 2.0), st.floats(20.0, 80.0))
def test_pruning_never_changes_the_choice(g: int, nodes: int, batch: int, network: float, width: int,
                                          tail: float, overhead: float) -> None:
    """The search with pruning chooses the very trial the search placing every plan chooses, with or
    without the bounds from the plain step (which prune no plan the graph's own bound keeps), and with
    the bound from the launches of a plain step at another batch tried first; a pruned plan's bound is
    at most the step it has when placed, and longer than the chosen step. Reached: some plan was
    pruned, and one by the launches alone (a launch overhead per op makes more micro-batches more work,
    and a fast network keeps the allreduce, which the bound leaves out, short)."""
    cluster = lambda r: Cluster(nodes=nodes, replicas_per_node=r, network_Bps=network, cycle_us=1.0)  # noqa: E731
    first = [f"l{layer}/fwd0" for layer in range(width)]  # a copy's work: its forward op

    def bound_for(b: int, m: int, k: int, ready_only: bool = False) -> MicroBound:  # from the plain step of b / m
        plain = layers(b // m, 1, width, tail, overhead)
        return MicroBound(micro_bound_us(PlainTerms.of(plain, repeated_ops(plain, first, first)), m, k), "")

    def launches(b: int, m: int, k: int, ready_only: bool = False) -> MicroBound:  # from the plain step of 2b / m
        if not ready_only:
            return bound_for(b, m, k)
        plain = layers(2 * b // m, 1, width, tail, overhead)  # its forward ops launch a kernel of `overhead`
        kernel = np.array([name.endswith("/fwd0") for name in plain.names])
        terms = PlainTerms.of(plain, repeated_ops(plain, first, first), kernel)
        return MicroBound(launch_bound_us(terms, m, k, overhead), "launches")

    searches = [search_plans(lambda b, m: layers(b, m, width, tail, overhead), lambda k: Machine(k), cluster,
                             node_devices=g, nodes=nodes, node_batch=batch, micro_batches=(1, 2), prune=prune,
                             bound_for=bounds)
                for prune, bounds in ((True, None), (False, None), (True, bound_for), (True, launches))]
    pruned, full, bounded, launched = searches
    for search in (bounded, launched):
        assert (search.chosen.plan, search.chosen.step_us) == (full.chosen.plan, full.chosen.step_us)
        assert {t.plan for t in search.trials if t.status == "pruned"} <= {t.plan for t in pruned.trials
                                                                          if t.status == "pruned"}
    assert pruned.chosen is not None and full.chosen is not None
    assert (pruned.chosen.plan, pruned.chosen.step_us) == (full.chosen.plan, full.chosen.step_us)
    placed = {t.plan: t for t in full.trials}
    cut = [t for t in pruned.trials if t.status == "pruned"]
    if not cut:
        assert pruned.why == full.why
    elif "at least" in pruned.why:  # never more than the true margin over the next best
        claimed = float(pruned.why.split("at least ")[1].split("x")[0])
        others = [t.step_us for t in full.trials if t.fits and t.plan != full.chosen.plan]
        assert claimed <= min(others) / full.chosen.step_us + 0.005
    for trial in cut + [t for search in (bounded, launched) for t in search.trials if t.status == "pruned"]:
        assert trial.bound_us <= placed[trial.plan].step_us * (1 + 1e-9)
        assert trial.bound_us > pruned.chosen.step_us
    by_launches = [t for t in launched.trials if t.status == "pruned" and "(launches;" in t.reason]
    reached(bool(cut) and bool(by_launches), "a plan was pruned, and one by the launches of another batch's step")


# ------------------------------------------------------- one k, several M (what --micro-batches auto asks)
def one_op(steps_us: dict[int, float], peaks: dict[int, int] | None = None):
    """``graph_for`` giving M one op of ``steps_us[M]`` µs writing ``peaks[M]`` bytes (1 KB by default),
    and the Ms it was asked for, in order."""
    asked: list[int] = []

    def graph_for(batch: int, micro: int) -> CostGraph:
        asked.append(micro)
        return CostGraph(["x"], [steps_us[micro]], [(peaks or {}).get(micro, 1000)], [], [])

    return graph_for, asked


def one_device(graph_for, node_batch: int, *, memory: str | None = None, place=None, ms=(1, 2, 4, 8, 16)):
    planner = Planner(graph_for, lambda k: Machine(k, memory=memory, reserve=0, latency="0us"),
                      lambda r: Cluster(), node_devices=1, nodes=1, node_batch=node_batch, place=place)
    return planner.search([1], ms)


def test_the_shortest_step_that_fits_is_chosen_and_a_longer_bound_is_not_placed() -> None:
    """One device, batch 16: M = 8 is the fastest (200 µs) but writes 2 MB on a 1 MB device: it does not
    fit; M = 4 (300 µs) is chosen; M = 16 (400 µs) is built, its bound (its one op: 400 µs) is longer
    than 300 µs that fits, so it is not placed."""
    graph_for, asked = one_op({1: 800.0, 2: 500.0, 4: 300.0, 8: 200.0, 16: 400.0}, peaks={8: 2_000_000})
    search = one_device(graph_for, 16, memory="1MB")
    assert asked == [1, 2, 4, 8, 16]
    status = {t.plan.micro_batches: t.status for t in search.trials}
    assert status == {1: "fits", 2: "fits", 4: "fits", 8: "infeasible", 16: "pruned"}
    assert search.chosen.plan.micro_batches == 4 and search.chosen.step_us == 300.0
    assert search.chosen.samples_per_s == pytest.approx(16 / 300e-6)
    assert search.why == "k=1 M=4: at least 1.33x the samples/s of every other plan (1 not placed: their lower " \
                         "bounds are longer than its step)"


def test_a_tie_keeps_the_smaller_m_and_an_m_not_dividing_the_batch_is_skipped() -> None:
    graph_for, asked = one_op({1: 500.0, 2: 500.0, 4: 500.0 * (1 - 1e-12)})
    search = one_device(graph_for, 12)
    assert asked == [1, 2, 4] and search.chosen.plan.micro_batches == 1
    skipped = {t.plan.micro_batches: t.reason for t in search.trials if t.status == "skipped"}
    assert skipped == {8: "the replica's batch 12 does not split into 8 micro-batches",
                       16: "the replica's batch 12 does not split into 16 micro-batches"}


def test_a_placer_without_a_placement_and_a_placement_over_the_limit_are_said_apart() -> None:
    """M = 2: the placer finds nothing that fits (infeasible); M = 4: it gives no placement for another
    reason (no_placement); M = 8: a placement over the limit (critical path ignores memory): does_not_fit,
    with its peak and the limit."""
    from pardnn.errors import InfeasibleError
    from pardnn.plan.search import Unplaced
    from pardnn.registry import get_placer

    graph_for, _ = one_op({1: 100.0, 2: 50.0, 4: 40.0, 8: 30.0}, peaks={8: 3 * 2**20})

    def place(graph: CostGraph, machine: Machine):
        micro = {50.0: 2, 40.0: 4}.get(float(graph.comp_us[0]))
        if micro == 2:
            raise InfeasibleError("pardnn: no placement found: device 0 needs 3 GiB. Options: more devices")
        if micro == 4:
            raise Unplaced("exact: the graph has 900 ops")
        return get_placer("critical_path")(graph, machine)

    search = one_device(graph_for, 8, memory="2MiB", place=place, ms=(1, 2, 4, 8))
    assert search.chosen.plan.micro_batches == 1
    assert [(t.status, t.reason) for t in search.trials[1:]] == [
        ("infeasible", "pardnn: no placement found: device 0 needs 3 GiB"),
        ("no_placement", "exact: the graph has 900 ops"),
        ("does_not_fit", "peak 3.00 MiB over the limit of 2.00 MiB")]
