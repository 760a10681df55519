"""The allreduce backends: choosing one, the mpi4py path's packing (under a real mpirun), its one host op
per step in the graph, and what the placement's costs make of it."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
import textwrap
from types import SimpleNamespace

import numpy as np
import pytest

from launcher.errors import LaunchError
from launcher.training import dataparallel
from launcher.training.dataparallel import FUSED_SCOPE, HOOK_SCOPE, pick_backend

# ------------------------------------------------------------------ choosing


def test_one_rank_needs_no_backend_and_an_unknown_one_is_refused():
    assert pick_backend("auto", 1) is None and pick_backend("horovod", 1) is None
    with pytest.raises(LaunchError, match=r"--allreduce 'nccl': expected one of auto, horovod, mpi4py"):
        pick_backend("nccl", 2)


def test_auto_takes_horovod_where_it_runs_else_mpi4py(monkeypatch):
    if importlib.util.find_spec("mpi4py") is None:
        pytest.skip("mpi4py not installed")
    monkeypatch.setattr(dataparallel, "_horovod", lambda: (object(), None))
    assert pick_backend("auto", 2) == "horovod" and pick_backend("mpi4py", 2) == "mpi4py"
    monkeypatch.setattr(dataparallel, "_horovod", lambda: (None, "horovod.tensorflow cannot be imported (no)"))
    assert pick_backend("auto", 2) == "mpi4py"


def test_horovod_asked_for_where_it_cannot_run_names_both_fixes(monkeypatch):
    monkeypatch.setattr(dataparallel, "_horovod", lambda: (None, "horovod.tensorflow cannot be imported (undefined "
                                                                  "symbol)"))
    with pytest.raises(LaunchError) as caught:
        pick_backend("horovod", 4)
    text = str(caught.value)
    assert "undefined symbol" in text and "scripts/install-horovod.sh" in text and "--allreduce mpi4py" in text
    assert "\n" not in text


def test_the_setting_is_checked_with_its_origin():
    from launcher.settings import resolve

    job = SimpleNamespace(batch_size=8)
    assert resolve(job, {"allreduce": "mpi4py"}).allreduce == "mpi4py"
    assert resolve(job).allreduce == "auto"
    with pytest.raises(LaunchError, match=r"allreduce \(command line\): 'gloo': expected one of auto, horovod, mpi4py"):
        resolve(job, {"allreduce": "gloo"})


# ------------------------------------------------------------------ packing, under mpirun

PACKING = textwrap.dedent(
    """
    import sys
    import numpy as np
    from mpi4py import MPI
    from launcher.training import dataparallel

    dataparallel._CHUNK = 7  # several MPI calls per buffer
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()

    def arrays(r):
        rng = np.random.default_rng(r)
        return [rng.standard_normal((3, 4)).astype(np.float32), np.float32(rng.standard_normal()),
                rng.standard_normal(5), rng.standard_normal((2, 2)).astype(np.float16),
                rng.integers(0, 100, (6,)).astype(np.int32), rng.standard_normal((1, 9)).astype(np.float32)]

    class Counting:
        def __init__(self, comm):
            self.comm, self.calls = comm, []
        def Get_size(self):
            return self.comm.Get_size()
        def Allreduce(self, send, recv, op):
            self.calls.append(len(recv))
            self.comm.Allreduce(send, recv, op=op)
        def Bcast(self, buffer, root):
            self.calls.append(len(buffer[0]))
            self.comm.Bcast(buffer, root=root)

    counting = Counting(comm)
    mine = arrays(rank)
    got = dataparallel.average_arrays(counting, mine)
    everyone = [arrays(r) for r in range(size)]
    for index, value in enumerate(got):
        assert value.shape == np.shape(mine[index]) and value.dtype == np.asarray(mine[index]).dtype, index
        parts = np.array([np.asarray(a[index], dtype=np.float64) for a in everyone])
        want = parts.sum(axis=0) // size if value.dtype.kind == "i" else parts.mean(axis=0)
        tolerance = 1e-3 if value.dtype == np.float16 else 1e-6
        assert np.allclose(value, want, rtol=tolerance, atol=tolerance), (index, value, want)
    # float32 (12 + 1 + 2·2 half + 9 = 26 elements: 4 chunks), float64 (5: 1), int64 (6: 1), in one order
    assert counting.calls == [7, 7, 7, 5, 5, 6], counting.calls

    counting.calls.clear()
    sent = arrays(rank) + [np.array(rank == 0), np.zeros((0, 3), np.float32)]
    received = dataparallel.broadcast_arrays(counting, sent)
    for value, want in zip(received, arrays(0) + [np.array(True), np.zeros((0, 3), np.float32)]):
        want = np.asarray(want)
        assert value.shape == want.shape and value.dtype == want.dtype and value.tobytes() == want.tobytes()
    nbytes = sum(np.asarray(a).nbytes for a in sent)
    assert counting.calls == [7] * (nbytes // 7) + ([nbytes % 7] if nbytes % 7 else []), counting.calls
    print(f"rank {rank} ok")
    """
)


@pytest.mark.mpi
def test_packed_average_and_broadcast_across_three_ranks(tmp_path):
    # Not imported here: MPI initialised in the test process would confuse the mpirun it starts.
    if importlib.util.find_spec("mpi4py") is None:
        pytest.skip("mpi4py not installed")
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        pytest.skip("mpirun not on PATH (scripts/setup.sh installs openmpi-bin)")
    script = tmp_path / "packing.py"
    script.write_text(PACKING)
    from tests.helpers.mpi import MPIRUN_FLAGS, ROOT, mpi_environment

    env, _ = mpi_environment(emulate=False)
    proc = subprocess.run([mpirun, *MPIRUN_FLAGS, "-np", "3", sys.executable, str(script)], capture_output=True,
                          text=True, timeout=120, cwd=ROOT, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(re.findall(r"rank \d ok", proc.stdout)) == ["rank 0 ok", "rank 1 ok", "rank 2 ok"], proc.stdout


# ------------------------------------------------------------------ in the graph


class _OtherRankAddsOnes:
    """A two-rank communicator whose other rank contributes ones; counts the calls."""

    def __init__(self) -> None:
        self.calls = 0

    def Get_size(self) -> int:
        return 2

    def Allreduce(self, send, recv, op) -> None:
        self.calls += 1
        recv += 1

    def Bcast(self, buffer, root) -> None:  # rank 0's values are zeros
        self.calls += 1
        buffer[0][...] = 0


@pytest.mark.tf
def test_the_fused_hook_averages_every_gradient_in_one_host_op_per_step():
    tf = pytest.importorskip("tensorflow")
    from pardnn.tf import apply, capture, device_names

    comm = _OtherRankAddsOnes()
    hook = dataparallel.FusedAverager(comm)
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, (4, 3), name="x")
        w = tf.compat.v1.get_variable("w", (3, 2), initializer=tf.compat.v1.ones_initializer())
        b = tf.compat.v1.get_variable("b", (2,), initializer=tf.compat.v1.zeros_initializer())
        loss = tf.reduce_sum(tf.matmul(x, w) + b)
        optimizer = tf.compat.v1.train.GradientDescentOptimizer(1.0)
        raw = optimizer.compute_gradients(loss, [w, b])
        averaged = hook(raw)
        # clip_by_global_norm colocates each clipped gradient with its input, as jobs.build's clipping does
        clipped, _ = tf.clip_by_global_norm([g for g, _ in averaged], 100.0)
        train = optimizer.apply_gradients(list(zip(clipped, [w, b])))
        init = tf.compat.v1.global_variables_initializer()
    fused = [op for op in graph.get_operations() if op.name.startswith(FUSED_SCOPE + "/")]
    assert [op.type for op in fused] == ["PyFunc"]
    assert [g.shape.as_list() for g, _ in averaged] == [[3, 2], [2]]  # static shapes, as capture needs

    names = capture(graph, [train, loss]).names
    assert fused[0].name in names
    # Everything on device 1: the host op on 0, each gradient's way out (and the clipping colocated with it)
    # on its variable's device. A group holding the host op and the clipping would be split here.
    placed = {name: 1 for name in names}
    hooked = hook.placement(graph, placed)
    assert hooked[fused[0].name] == 0
    assert hooked[f"{HOOK_SCOPE}/0/averaged"] == hooked[f"{HOOK_SCOPE}/1/averaged"] == 1
    clipping = {name: device for name, device in hooked.items() if name.startswith("clip_by_global_norm")}
    assert clipping and set(clipping.values()) == {1}
    apply(graph, {**placed, **hooked}, device_names(2))
    feed = np.ones((4, 3), np.float32)
    with tf.compat.v1.Session(graph=graph, config=tf.compat.v1.ConfigProto(device_count={"CPU": 2})) as session:
        session.run(init)
        grads = session.run([g for g, _ in raw], {x: feed})
        got = session.run([g for g, _ in averaged], {x: feed})
        assert comm.calls == 1
        for raw_grad, value in zip(grads, got, strict=True):
            np.testing.assert_allclose(value, (raw_grad + 1) / 2)
        session.run(train, {x: feed})
        assert comm.calls == 2  # one call per step, whatever the number of gradients


@pytest.mark.tf
def test_the_host_broadcast_sets_every_variable_to_the_first_ranks_bytes():
    tf = pytest.importorskip("tensorflow")
    comm = _OtherRankAddsOnes()
    graph = tf.Graph()
    with graph.as_default():
        variables = [tf.compat.v1.get_variable("a", (2, 3), initializer=tf.compat.v1.ones_initializer()),
                     tf.compat.v1.get_variable("n", (), dtype=tf.int64, initializer=tf.compat.v1.ones_initializer(),
                                               trainable=False)]
        init = tf.compat.v1.global_variables_initializer()
    op = dataparallel.host_broadcast_op(comm, graph, variables)
    with tf.compat.v1.Session(graph=graph) as session:
        session.run(init)
        session.run(op)
        values = session.run(variables)
    assert comm.calls == 1 and values[0].tolist() == [[0.0] * 3] * 2 and values[1] == 0


def test_the_fused_ops_time_and_device_memory_leave_the_placements_costs():
    from pardnn.costs.graph import CostGraph

    names = ["grad", f"{FUSED_SCOPE}/allreduce", f"{HOOK_SCOPE}/3/HorovodAllreduce", "apply"]
    graph = CostGraph(names, [5.0, 900.0, 40.0, 2.0], [64, 64, 64, 0], [0, 1], [1, 3], [64, 64])
    local = dataparallel.local_costs(graph)
    assert local.comp_us.tolist() == [5.0, 0.0, 0.0, 2.0]
    assert local.out_bytes.tolist() == [64, 0, 64, 0]  # the fused op's outputs live on the host
    assert local.edge_bytes.tolist() == [64, 64]  # the copies to and from the host still cost their time


class _OneRank:
    def Get_size(self) -> int:
        return 1

    def Allreduce(self, send, recv, op) -> None:
        pass


def test_a_kept_workspace_is_reused_from_step_to_step_and_the_averages_are_its_views():
    workspace: dict = {}
    arrays = [np.arange(6, dtype=np.float32).reshape(2, 3), np.ones(4, np.float32), np.zeros(3)]
    first = dataparallel.average_arrays(_OneRank(), arrays, workspace)
    buffers = {key: id(buffer) for key, buffer in workspace.items()}
    assert sorted(workspace) == ["<f4", "<f8"] and workspace["<f4"].size == 10 and workspace["<f8"].size == 3
    assert np.shares_memory(first[0], workspace["<f4"]) and np.shares_memory(first[2], workspace["<f8"])
    second = dataparallel.average_arrays(_OneRank(), [a + 1 for a in arrays], workspace)
    assert {key: id(buffer) for key, buffer in workspace.items()} == buffers  # the same pages again
    for array, value in zip(arrays, second, strict=True):
        np.testing.assert_array_equal(value, array + 1)
    third = dataparallel.average_arrays(_OneRank(), [np.ones(7, np.float32)], workspace)  # another size: a new one
    assert workspace["<f4"].size == 7 and third[0].tolist() == [1.0] * 7
