"""Topology: one rank per node, or an error that shows how to launch."""

from __future__ import annotations

import numpy as np
import pytest

from launcher.cluster.topology import check_one_rank_per_node, single_node
from launcher.env import emulate_nodes, share_cores
from launcher.errors import AgreedError, LaunchError


def test_distinct_nodes_pass():
    check_one_rank_per_node(["a", "b", "c"])


def test_shared_node_names_the_ranks_and_the_fix():
    with pytest.raises(AgreedError) as caught:
        check_one_rank_per_node(["dgx1", "dgx1", "dgx2"])
    message = str(caught.value)
    assert "node dgx1 runs ranks 0, 1" in message
    assert "--ntasks-per-node=1" in message
    assert "mpirun --map-by ppr:1:node" in message
    assert "PARDNN_EMULATE_NODES=1" in message


def test_single_node_collectives_are_identities():
    topology = single_node()
    assert (topology.rank, topology.size, topology.is_root) == (0, 1, True)
    assert topology.allgather("x") == ["x"]
    assert topology.gather("x") == ["x"]
    assert topology.bcast(7) == 7
    values = np.array([1.5, 2.0])
    assert topology.allreduce(values).tolist() == [1.5, 2.0]
    topology.abort(1)  # no MPI: nothing to abort, returns


@pytest.mark.parametrize(("value", "expected"), [("1", True), (" 1\n", True), ("0", False), ("", False)])
def test_emulate_nodes_knob(value, expected):
    assert emulate_nodes({"PARDNN_EMULATE_NODES": value}) is expected
    assert emulate_nodes({}) is False


@pytest.mark.parametrize("value", ["2", "yes", "true", "-1"])
def test_emulate_nodes_is_0_or_1_and_anything_else_names_the_value(value):
    with pytest.raises(LaunchError, match=rf"^PARDNN_EMULATE_NODES='{value}': expected 0 or 1 \(1: every rank"):
        emulate_nodes({"PARDNN_EMULATE_NODES": value})


def test_emulated_nodes_share_the_cores_unless_told_otherwise():
    environ = {"PARDNN_EMULATE_NODES": "1", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}
    share_cores(environ, cores=8)
    assert environ["OMPI_MCA_mpi_yield_when_idle"] == "1"
    assert environ["TF_NUM_INTEROP_THREADS"] == environ["TF_NUM_INTRAOP_THREADS"] == "4"  # 8 cores, 2 local ranks
    by_size = {"PARDNN_EMULATE_NODES": "1", "PMI_SIZE": "3"}  # no local size: every rank is on this machine
    share_cores(by_size, cores=2)
    assert by_size["TF_NUM_INTRAOP_THREADS"] == "1"  # never 0
    kept = {"PARDNN_EMULATE_NODES": "1", "OMPI_MCA_mpi_yield_when_idle": "0", "TF_NUM_INTRAOP_THREADS": "6"}
    share_cores(kept, cores=2)
    assert kept["OMPI_MCA_mpi_yield_when_idle"] == "0" and kept["TF_NUM_INTRAOP_THREADS"] == "6"
    driver = {"PARDNN_EMULATE_NODES": "1"}  # pardnn-launch --hosts before its mpirun: the ranks divide the cores
    share_cores(driver, cores=8)
    assert driver == {"PARDNN_EMULATE_NODES": "1", "OMPI_MCA_mpi_yield_when_idle": "1"}
    for cluster in ({}, {"PARDNN_EMULATE_NODES": "0"}):  # one rank per node: Open MPI's and TensorFlow's choice
        share_cores(cluster, cores=8)
        assert cluster == ({} if "PARDNN_EMULATE_NODES" not in cluster else {"PARDNN_EMULATE_NODES": "0"})


def test_too_few_ranks_for_replicas_names_the_replicas_not_data_parallelism():
    from launcher.cluster.topology import Topology

    world = Topology(0, 1, ("dgx1",), ranks_per_node=2)
    with pytest.raises(AgreedError) as caught:
        world.check("--replica-devices 2 runs one rank per replica of 2 devices, 2 per node of 4 devices")
    assert str(caught.value) == (
        "--replica-devices 2 runs one rank per replica of 2 devices, 2 per node of 4 devices, but node dgx1 runs 1. "
        "Launch 2 tasks per node (sbatch/srun --ntasks-per-node=2, mpirun --map-by ppr:2:node), or pass "
        "--devices-per-node to match")
    with pytest.raises(AgreedError, match=r"^data parallelism runs one rank per device, 2 per node, but node dgx1"):
        world.check()


def test_every_kth_rank_of_each_node_trains_a_replica_of_k_devices():
    from launcher.cluster.topology import Topology

    # 2 nodes of 4 ranks, interleaved in rank order as a launcher may place them.
    world = Topology(0, 8, ("a", "b", "a", "b", "a", "b", "a", "b"), ranks_per_node=4)
    assert world.replica_ranks(1) == list(range(8))
    assert world.replica_ranks(2) == [0, 1, 4, 5]  # local ranks 0 and 2 of each node
    assert world.replica_ranks(4) == [0, 1] == world.leader_ranks()
    assert world.replicas(1) is world
    one = single_node()
    assert one.replicas(1) is one and one.leaders() is one
