"""The gradient allreduce in the emulated step (pardnn.emulation.allreduce): the ring formula, the
fused channel and the held updates, worked by hand; and invariants over random DAGs."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pardnn import CostGraph, Kind, Machine
from pardnn.costs.presets import preset
from pardnn.emulation.allreduce import (
    CYCLE_US,
    FUSION_BYTES,
    Cluster,
    cluster_for,
    emulate_with_allreduce,
    fused_channel,
    gradients,
)
from pardnn.emulation.emulator import emulate
from tests.conftest import most_reach, random_dags, reached

MB = 1_000_000
# 1 µs per kB across 2 nodes (2 · 1/2 · b / 1 GB/s), nothing else: the hand-worked cases below.
SIMPLE = Cluster(nodes=2, network_Bps=1e9, network_latency_us=0.0, cycle_us=0.0, fusion_bytes=10 * MB)


def test_horovods_defaults() -> None:
    """Horovod 0.21 and later: 1 ms cycles, a 128 MiB fusion buffer (its 0.21 release notes)."""
    assert (CYCLE_US, FUSION_BYTES) == (1000.0, 128 * 2**20)


@pytest.mark.parametrize("cluster, nbytes, expected_us", [
    (Cluster(nodes=1, replicas_per_node=1), 10**9, 0.0),  # one replica: nothing to average
    # 4 nodes at 100 GB/s, 10 µs a step: 2·3/4 · 100 MB / 100 GB/s = 1500 µs, + 2·3 · 10 µs.
    (Cluster(nodes=4, network_Bps=100e9, network_latency_us=10.0), 100 * MB, 1560.0),
    # 8 replicas in one node over a 150 GB/s link, 5 µs a step: 2·7/8 · 150 MB / 150 GB/s = 1750 µs, + 70 µs.
    (Cluster(nodes=1, replicas_per_node=8, link_Bps=150e9, link_latency_us=5.0), 150 * MB, 1820.0),
    # Both: 2 nodes × 2 replicas: inside 2·1/2 · 100 MB / 100 GB/s + 2·5 = 1010; across 2·1/2 · 100 MB / 50 GB/s
    # + 2·10 = 2020.
    (Cluster(nodes=2, replicas_per_node=2, link_Bps=100e9, link_latency_us=5.0, network_Bps=50e9,
             network_latency_us=10.0), 100 * MB, 3030.0),
])
def test_one_allreduce_by_hand(cluster: Cluster, nbytes: int, expected_us: float) -> None:
    assert cluster.allreduce_us(nbytes) == pytest.approx(expected_us)


def test_the_dgx_presets_carry_their_network() -> None:
    assert [preset(name).network_Bps for name in ("dgx-2", "dgx-a100", "dgx-h100")] == [100e9, 200e9, 400e9]
    assert [preset(name).gpus_per_node for name in ("dgx-2", "dgx-a100", "dgx-h100")] == [16, 8, 8]
    cluster = cluster_for("dgx-2", 4, 2, network_Bps=25e9)
    assert (cluster.replicas, cluster.network_Bps, cluster.link_Bps) == (8, 25e9, 150e9)


@pytest.mark.parametrize("field, value", [("nodes", 0), ("replicas_per_node", 1.5), ("network_Bps", 0.0),
                                          ("cycle_us", -1.0), ("fusion_bytes", -1)])
def test_a_bad_cluster_is_refused_naming_the_field(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=field):
        Cluster(**{field: value})  # type: ignore[arg-type]


def test_ready_gradients_share_one_buffer_up_to_the_threshold() -> None:
    """6 + 4 MB ready at 0 fill one 10 MB buffer (10 µs); 3 MB ready at 0 too go next (3 µs)."""
    done, buffers, busy = fused_channel(np.zeros(3), np.array([6, 4, 3]) * MB, SIMPLE)
    assert done.tolist() == [10_000.0, 10_000.0, 13_000.0]
    assert (buffers, busy) == (2, 13_000.0)


def test_a_fused_buffer_is_copied_in_and_out() -> None:
    """Two gradients in one buffer also pass through it: 2 · 10 MB at 10 GB/s, 2000 µs more; one alone not."""
    copying = Cluster(nodes=2, network_Bps=1e9, network_latency_us=0.0, cycle_us=0.0, fusion_bytes=10 * MB,
                      copy_Bps=10e9)
    assert fused_channel(np.zeros(2), np.array([6, 4]) * MB, copying)[0].tolist() == [12_000.0, 12_000.0]
    assert fused_channel(np.zeros(1), np.array([10 * MB]), copying)[0].tolist() == [10_000.0]


def test_a_gradient_larger_than_the_buffer_goes_alone() -> None:
    done, buffers, _ = fused_channel(np.zeros(2), np.array([12, 1]) * MB, SIMPLE)
    assert done.tolist() == [12_000.0, 13_000.0] and buffers == 2


def test_the_channel_runs_one_allreduce_at_a_time() -> None:
    """The second gradient is ready at 100 µs but the channel is busy with the first until 1000."""
    done, _, _ = fused_channel(np.array([0.0, 100.0]), np.array([1, 1]) * MB, SIMPLE)
    assert done.tolist() == [1000.0, 2000.0]


def test_cycles_tick_every_cycle_and_wait_for_a_long_one() -> None:
    """1 kB takes 1 µs, cycles every 1000 µs from 0: ready at 0 → done 1; at 10 → the cycle of 1000 → 1001;
    at 5500 → the cycle of 6000 → 6001. 3 MB (3000 µs) ready at 0 make the cycle of 0 end at 3000: the
    next begins then, not at 1000."""
    cluster = Cluster(nodes=2, network_Bps=1e9, network_latency_us=0.0, cycle_us=1000.0)
    done, _, _ = fused_channel(np.array([0.0, 10.0, 5500.0]), np.array([1000, 1000, 1000]), cluster)
    assert done.tolist() == [1.0, 1001.0, 6001.0]
    done, _, _ = fused_channel(np.array([0.0, 10.0, 3500.0]), np.array([3 * MB, 1000, 1000]), cluster)
    assert done.tolist() == [3000.0, 3001.0, 4001.0]  # cycles at 0 (until 3000), 3000, then 4000


def test_gradients_are_what_reaches_an_update_from_ordinary_ops() -> None:
    """w (variable) and m (slot) are residual; g (1 MB) and lr (4 B) reach the update w/Apply."""
    g = CostGraph.from_named_edges(
        ["w", "m", "lr", "g", "w/Apply", "x"], [0, 0, 0, 50, 1, 5], [4096, 4096, 4, MB, 0, 8],
        [("w", "g", 0), ("w", "w/Apply", 0), ("m", "w/Apply", 0), ("lr", "w/Apply"), ("g", "w/Apply"), ("g", "x")],
        kind=[Kind.RESIDUAL, Kind.RESIDUAL, Kind.NORMAL, Kind.NORMAL, Kind.REFERENCE, Kind.NORMAL])
    update, nbytes, edge, edge_update = gradients(g)
    assert [g.names[u] for u in update] == ["w/Apply"] and nbytes.tolist() == [MB + 4]
    assert sorted((g.names[g.edge_src[e]], g.names[g.edge_dst[e]]) for e in edge) == [("g", "w/Apply"),
                                                                                     ("lr", "w/Apply")]
    assert edge_update.tolist() == [0, 0]


def two_layers() -> CostGraph:
    """The backward pass of two layers on one device: g1 (100 µs, 1 MB) then g2 (100 µs, 1 MB), each
    feeding its variable's update (1 µs)."""
    return CostGraph.from_named_edges(
        ["g1", "u1", "g2", "u2"], [100.0, 1.0, 100.0, 1.0], [MB, 0, MB, 0],
        [("g1", "u1"), ("g1", "g2", 8), ("g2", "u2")],
        kind=[Kind.NORMAL, Kind.REFERENCE, Kind.NORMAL, Kind.REFERENCE])


def test_the_allreduce_overlaps_the_backward_pass_and_holds_the_updates() -> None:
    """Alone: 100 + 100 + 1 + 1 = 202 µs. Averaged across 2 nodes (1 ms per MB): g1's average runs
    100-1100 while g2 computes (overlapped); g2's is ready at 200 but waits for the channel, 1100-2100;
    u2 runs 2100-2101. Exposed: 2101 - 202 = 1899 µs, of 2000 µs of allreduce."""
    step = emulate_with_allreduce(two_layers(), Machine(1), np.zeros(4, np.int64), SIMPLE)
    assert step.compute_us == 202.0 and step.step_us == 2101.0 and step.exposed_us == 1899.0
    assert (step.busy_us, step.buffers, step.gradient_bytes, step.replicas) == (2000.0, 2, 2 * MB, 2)
    start = step.schedule.start_us
    assert (start[1], start[3]) == (1100.0, 2100.0)  # u1, u2: held until their averages are done


def test_one_replica_is_the_step_alone() -> None:
    graph = two_layers()
    step = emulate_with_allreduce(graph, Machine(1), np.zeros(4, np.int64), Cluster())
    assert (step.step_us, step.exposed_us, step.buffers) == (202.0, 0.0, 0)


@st.composite
def dags_with_updates(draw: st.DrawFn) -> tuple[CostGraph, np.ndarray, Cluster]:
    drawn = draw(random_dags(max_ops=25, groups=False))
    # A last gradient (ordinary, 1 kB) and its variable's update, so that most examples average something.
    n = drawn.n
    graph = CostGraph([*drawn.names, "last/grad", "last/update"], [*drawn.comp_us, 10.0, 1.0],
                      [*drawn.out_bytes, 1000, 0], [*drawn.edge_src, n - 1, n], [*drawn.edge_dst, n, n + 1],
                      [*drawn.edge_bytes, 8, 1000], kind=[*drawn.kind, Kind.NORMAL, Kind.REFERENCE])
    devices = draw(st.integers(1, 3))
    placement = np.array(draw(st.lists(st.integers(0, devices - 1), min_size=graph.n, max_size=graph.n)), np.int64)
    cluster = Cluster(nodes=draw(st.integers(2, 4)), replicas_per_node=draw(st.integers(1, 3)),
                      network_Bps=draw(st.sampled_from([1e6, 1e8, 1e10])), network_latency_us=5.0,
                      cycle_us=draw(st.sampled_from([0.0, 10.0, 1000.0])),
                      fusion_bytes=draw(st.sampled_from([0, 4000, FUSION_BYTES])))
    return graph, placement, cluster


@most_reach
@settings(max_examples=60, deadline=None)
@given(dags_with_updates())
def test_every_update_waits_for_its_gradients_average(case: tuple[CostGraph, np.ndarray, Cluster]) -> None:
    """Each update starts no earlier than its gradient is ready and averaged (what the channel says for
    the final ready times), every op after its inputs arrive, and one replica changes nothing."""
    graph, placement, cluster = case
    machine = Machine(int(placement.max()) + 1, bandwidth="1GB/s", latency="2us")
    step = emulate_with_allreduce(graph, machine, placement, cluster)
    update, nbytes, edge, edge_update = gradients(graph)
    if not reached(cluster.replicas > 1 and update.size > 0, "gradients averaged across replicas"):
        assert step.step_us == emulate(graph, machine, placement).makespan_us
        return
    schedule = step.schedule
    ready = np.zeros(update.size)
    np.maximum.at(ready, edge_update, schedule.edge_arrival_us[edge])
    done, _, _ = fused_channel(ready, nbytes, cluster)
    assert np.all(schedule.start_us[update] >= done - 1e-6)
    assert np.all(schedule.start_us[graph.edge_dst] >= schedule.edge_arrival_us - 1e-6)
    assert step.busy_us > 0 and step.step_us == schedule.makespan_us


def test_a_chain_of_gradients_reading_updates_is_emulated_until_it_settles() -> None:
    """g0 -> u0 -> g1 -> u1 -> ... -> g5 -> u5: each gradient reads the last variable's update, so each
    emulation with the updates held moves the next gradient (a random graph had 5 such; a training step
    has none). Every update must still wait for its own gradient's average, as the final ready times
    say: 6 passes and a seventh that finds nothing moved (4 were not enough)."""
    names = [name for i in range(6) for name in (f"g{i}", f"u{i}")]
    graph = CostGraph(names, [10.0, 1.0] * 6, [MB, 0] * 6, src=list(range(11)), dst=list(range(1, 12)),
                      edge_bytes=[MB if i % 2 == 0 else 8 for i in range(11)], kind=[Kind.NORMAL, Kind.REFERENCE] * 6)
    step = emulate_with_allreduce(graph, Machine(1), np.zeros(12, np.int64), SIMPLE)
    update, nbytes, edge, edge_update = gradients(graph)
    ready = np.zeros(update.size)
    np.maximum.at(ready, edge_update, step.schedule.edge_arrival_us[edge])
    done, _, _ = fused_channel(ready, nbytes, SIMPLE)
    assert np.all(step.schedule.start_us[update] >= done - 1e-6)
    assert step.step_us == 6 * (10.0 + 1000.0 + 1.0)  # each average (1 ms per MB) waits for the one before
