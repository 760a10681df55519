"""Data parallelism across nodes: the allreduce backends that average gradients, and the initial broadcast.

:func:`pick_backend` resolves ``--allreduce auto|horovod|mpi4py`` to one :class:`Backend`:
:class:`HorovodBackend`, whose :class:`GradientAverager` allreduces each gradient on its variable's device,
or :class:`Mpi4pyBackend`, whose :class:`FusedAverager` averages every gradient of the step in one host op.
Either is the ``gradient_hook`` of ``jobs.build``; its ops live under ``pardnn_allreduce/`` and
:func:`local_costs` costs them. docs/install.md (Allreduce backends) compares the two; why each is built
as it is: docs/notes-launcher.md.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from launcher.errors import LaunchError
from launcher.settings import ALLREDUCE_CHOICES

__all__ = ["HOOK_SCOPE", "Backend", "FusedAverager", "GradientAverager", "HorovodBackend",
           "Mpi4pyBackend", "broadcast_op", "find_horovod", "init_horovod", "local_costs", "pick_backend"]

HOOK_SCOPE = "pardnn_allreduce"
FUSED_SCOPE = f"{HOOK_SCOPE}/fused"
BROADCAST_SCOPE = "pardnn_broadcast"
INSTALL_HINT = ("build it against the installed TensorFlow with MPI: bash scripts/install-horovod.sh "
                "(on GPU clusters with NCCL: HOROVOD_GPU_OPERATIONS=NCCL bash scripts/install-horovod.sh --force)")
_CHUNK = 1 << 28  # elements per MPI call at most: counts are C ints in MPI before 4.0


def _horovod() -> tuple[Any, str | None]:
    """``horovod.tensorflow`` and ``None``, or ``None`` and why it cannot be used."""
    try:
        from pardnn.tfstack import import_tensorflow

        import_tensorflow()  # Horovod's module imports it: without the collector's passes (pardnn.tfstack)
        import horovod.tensorflow as hvd
    except Exception as error:
        text = str(error).splitlines()[0] if str(error) else type(error).__name__
        return None, f"horovod.tensorflow cannot be imported ({text})"
    if not hvd.mpi_built():
        return None, "this Horovod was built without MPI"
    return hvd, None


def find_horovod(nodes: int) -> Any:
    """``horovod.tensorflow`` for ``nodes`` > 1 (not initialised); ``None`` for one node.

    Raises
    ------
    LaunchError
        Horovod missing, or built without MPI, while several nodes run.
    """
    if nodes == 1:
        return None
    hvd, problem = _horovod()
    if hvd is None:
        raise LaunchError(f"--allreduce horovod: {problem}; {INSTALL_HINT}; or average through mpi4py: "
                          "--allreduce mpi4py")
    return hvd


def pick_backend(choice: str, ranks: int) -> str | None:
    """The backend ``choice`` names for ``ranks`` ranks: ``None`` for one rank, ``auto`` resolved.

    Raises
    ------
    LaunchError
        An unknown choice; ``horovod`` asked for where it cannot run; ``mpi4py`` not installed.
    """
    if choice not in ALLREDUCE_CHOICES:
        raise LaunchError(f"--allreduce {choice!r}: expected one of {', '.join(ALLREDUCE_CHOICES)}")
    if ranks == 1:
        return None
    if choice == "horovod":
        find_horovod(ranks)
        return "horovod"
    if choice == "auto" and _horovod()[0] is not None:
        return "horovod"
    if importlib.util.find_spec("mpi4py") is None:  # found, not imported: importing initialises MPI
        raise LaunchError(f"{ranks} ranks average gradients through mpi4py where Horovod cannot run, but mpi4py "
                          "is not installed; pip install mpi4py (or pip install -e '.[dist]')")
    return "mpi4py"


def init_horovod(hvd: Any, ranks: int, groups: Sequence[Sequence[int]] = ()) -> list[Any]:
    """``hvd.init()`` (collective), checking that Horovod sees every rank; a process set is made for each
    of ``groups`` (world ranks; each a proper subset, none twice) and returned in their order."""
    sets = [hvd.ProcessSet(list(group)) for group in groups]
    hvd.init(process_sets=sets or None)
    if hvd.size() != ranks:
        raise LaunchError(f"Horovod sees {hvd.size()} processes but the job has {ranks} ranks")
    return sets


class Backend(Protocol):
    """How the ranks average gradients and start from the same weights."""

    name: str

    def start(self, topology: Any, groups: Sequence[Sequence[int]]) -> list[Any]:
        """Initialise (collective); a handle per group of ``groups`` (world ranks that train while others
        wait), in order (``None`` where this rank is not in it, for some backends)."""

    def averager(self, among: Any = None) -> Any:
        """A ``gradient_hook`` for ``jobs.build`` averaging over ``among`` (``None``: every rank)."""

    def broadcast(self, graph: Any, variables: Sequence[Any], among: Any = None) -> Any:
        """The op that sets every variable to the first rank's value (run once after initialisation)."""


class HorovodBackend:
    """``hvd.allreduce`` per gradient on its variable's device (module docstring)."""

    name = "horovod"

    def __init__(self, hvd: Any = None) -> None:
        self.hvd = hvd

    def start(self, topology: Any, groups: Sequence[Sequence[int]]) -> list[Any]:
        if self.hvd is None:
            self.hvd = find_horovod(topology.size)
        return init_horovod(self.hvd, topology.size, groups)

    def averager(self, among: Any = None) -> GradientAverager:
        return GradientAverager(self.hvd, process_set=among)

    def broadcast(self, graph: Any, variables: Sequence[Any], among: Any = None) -> Any:
        return broadcast_op(self.hvd, graph, variables, among)


class Mpi4pyBackend:
    """One fused host-side ``MPI_Allreduce`` per step (module docstring)."""

    name = "mpi4py"

    def __init__(self, comm: Any = None) -> None:
        self.comm = comm

    def start(self, topology: Any, groups: Sequence[Sequence[int]]) -> list[Any]:
        from mpi4py import MPI

        world = topology.comm if topology.comm is not None else MPI.COMM_WORLD
        self.comm = world.Dup()  # the gradients' own communicator (collective)
        if world.Get_size() != topology.size:
            raise LaunchError(f"MPI sees {world.Get_size()} processes but the job has {topology.size} ranks")
        splits = [self.comm.Split(0 if topology.rank in group else MPI.UNDEFINED, topology.rank)  # collective
                  for group in groups]
        return [None if split == MPI.COMM_NULL else split for split in splits]

    def averager(self, among: Any = None) -> FusedAverager:
        return FusedAverager(self.comm if among is None else among)

    def broadcast(self, graph: Any, variables: Sequence[Any], among: Any = None) -> Any:
        return host_broadcast_op(self.comm if among is None else among, graph, variables)


class GradientAverager:
    """The ``gradient_hook``: averages each gradient across nodes on its variable's device.

    Parameters
    ----------
    hvd:
        ``horovod.tensorflow`` (initialised).
    device_of:
        Device index of each placed op (the placement, by op name).
    device_names:
        Device string of each index.
    process_set:
        The ranks to average over (default all; the node leaders' set when several ranks share a node).
    """

    def __init__(self, hvd: Any, device_of: Mapping[str, int] | None = None,
                 device_names: Sequence[str] = (), process_set: Any = None) -> None:
        self._hvd = hvd
        self._among = {} if process_set is None else {"process_set": process_set}
        self._device_of = device_of
        self._device_names = list(device_names)
        self._scopes: dict[str, str] = {}  # scope -> the averaged gradient's variable (op name)

    def __call__(self, grads_and_vars: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
        import tensorflow as tf

        averaged = []
        for index, (grad, var) in enumerate(grads_and_vars):
            if grad is None:
                averaged.append((grad, var))
                continue
            # No placement yet (the graph is built once, then costed and placed): no device; apply sets it.
            device = "" if self._device_of is None else self._device_names[self._device_of.get(var.op.name, 0)]
            scope = f"{HOOK_SCOPE}/{index}/"
            with tf.compat.v1.name_scope(scope):
                grad = self._hvd.allreduce(grad, op=self._hvd.Average, device_dense=device, device_sparse=device,
                                           **self._among)
            self._scopes[scope] = var.op.name
            averaged.append((grad, var))
        return averaged

    def placement(self, graph: Any, device_of: Mapping[str, int] | None = None) -> dict[str, int]:
        """Device index of every op the hook added to ``graph``, and of the ops colocated with them.

        ``device_of``: the placement by op name (default the one given at construction); a variable
        it does not name counts as on device 0.

        The hook's ops go to their variable's device. An op that ``build`` colocated with an
        averaged gradient (``tf.clip_by_global_norm`` does, per gradient) joins it there: in the
        hook-less graph it was colocated with the raw gradient, so its placed device may differ.
        """
        placed = device_of if device_of is not None else self._device_of or {}
        return _on_their_variables(graph, self._scopes, placed)


def _on_their_variables(graph: Any, scopes: Mapping[str, str], placed: Mapping[str, int]) -> dict[str, int]:
    """Every op under one of the hook's ``scopes`` (``pardnn_allreduce/<i>/``) on the device ``placed`` gives
    that scope's variable (0 where it gives none), and every op colocated with one of them there too."""
    from pardnn.tf import colocation_groups

    added: dict[str, int] = {}
    for op in graph.get_operations():
        if op.name.startswith(HOOK_SCOPE + "/") and not op.name.startswith(FUSED_SCOPE + "/"):
            scope = op.name[: op.name.index("/", len(HOOK_SCOPE) + 1) + 1]
            if scope in scopes:
                added[op.name] = placed.get(scopes[scope], 0)
    groups = colocation_groups(graph)
    members: dict[str, list[str]] = {}
    for name, label in groups.items():
        members.setdefault(label, []).append(name)
    for name, index in list(added.items()):
        for member in members.get(groups.get(name, ""), ()):
            added[member] = index
    return added


def broadcast_op(hvd: Any, graph: Any, variables: Sequence[Any], process_set: Any = None) -> Any:
    """The op that sets every variable to rank 0's value (run once after initialisation); among the
    ranks of ``process_set`` (default all)."""
    among = {} if process_set is None else {"process_set": process_set}
    with graph.as_default():
        return hvd.broadcast_variables(list(variables), root_rank=0, **among)


def _reduced_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype a gradient is summed in: its own for float32/float64, float32 for other floats
    (half precision has no MPI type), int64 for integers."""
    if dtype in (np.float32, np.float64):
        return dtype
    return np.dtype(np.int64) if np.issubdtype(dtype, np.integer) else np.dtype(np.float32)


def average_arrays(comm: Any, arrays: Sequence[np.ndarray],
                   workspace: dict[str, np.ndarray] | None = None) -> list[np.ndarray]:
    """Each array averaged across ``comm``'s ranks: one ``Allreduce`` (sum) per reduced dtype, in a fixed
    order, of the arrays packed into one buffer (in chunks of 2^28 elements), then divided by the ranks.
    The same shapes and dtypes in the same order on every rank (the same graph) make the same calls.

    ``workspace`` (``{dtype: buffer}``, kept by the caller across steps) lends the packing buffers, so a
    step reuses the pages of the last one instead of faulting fresh ones in; the arrays returned are
    views of it, valid until the next call with the same workspace."""
    from mpi4py import MPI

    size = comm.Get_size()
    out: list[np.ndarray | None] = [None] * len(arrays)
    groups: dict[str, list[int]] = {}
    for index, array in enumerate(arrays):
        groups.setdefault(_reduced_dtype(np.asarray(array).dtype).str, []).append(index)
    for key in sorted(groups):
        members = groups[key]
        parts = [np.asarray(arrays[i], dtype=key).ravel() for i in members]
        total = sum(part.size for part in parts)
        buffer = None if workspace is None else workspace.get(key)
        if buffer is None or buffer.size != total:
            buffer = np.empty(total, dtype=key)
            if workspace is not None:
                workspace[key] = buffer
        np.concatenate(parts, out=buffer)
        for begin in range(0, buffer.size, _CHUNK):
            comm.Allreduce(MPI.IN_PLACE, buffer[begin:begin + _CHUNK], op=MPI.SUM)
        if buffer.dtype.kind == "f":
            buffer /= size
        else:
            buffer //= size
        offset = 0
        for i in members:
            array = np.asarray(arrays[i])
            out[i] = buffer[offset:offset + array.size].reshape(array.shape).astype(array.dtype, copy=False)
            offset += array.size
    assert all(value is not None for value in out)
    return out  # type: ignore[return-value]


def broadcast_arrays(comm: Any, arrays: Sequence[np.ndarray], root: int = 0) -> list[np.ndarray]:
    """``root``'s arrays on every rank: their bytes packed into one buffer, one ``Bcast`` (chunked)."""
    from mpi4py import MPI

    shaped = [np.asarray(array) for array in arrays]
    flat = [array.reshape(-1).view(np.uint8) for array in shaped]  # a 0-d array keeps its shape in `shaped`
    buffer = np.concatenate(flat) if flat else np.zeros(0, np.uint8)
    for begin in range(0, buffer.size, _CHUNK):
        comm.Bcast([buffer[begin:begin + _CHUNK], MPI.BYTE], root=root)
    out, offset = [], 0
    for array in shaped:
        out.append(buffer[offset:offset + array.nbytes].view(array.dtype).reshape(array.shape).copy())
        offset += array.nbytes
    return out


class FusedAverager:
    """The mpi4py ``gradient_hook``: every gradient of the step averaged by one host op (module docstring).

    ``comm``: the ranks to average over (an mpi4py communicator)."""

    def __init__(self, comm: Any) -> None:
        self.comm = comm
        self._workspace: dict[str, np.ndarray] = {}
        self._scopes: dict[str, str] = {}  # scope -> the averaged gradient's variable (op name)

    def _average(self, *arrays: np.ndarray) -> list[np.ndarray]:
        # TensorFlow may hold the returned views as the step's tensors instead of copying them; they live
        # until the update ops of this step have read them, before the next step calls this op again.
        return average_arrays(self.comm, arrays, self._workspace)

    def __call__(self, grads_and_vars: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
        import tensorflow as tf

        present = [index for index, (grad, _) in enumerate(grads_and_vars) if grad is not None]
        if not present:
            return list(grads_and_vars)
        grads = [tf.convert_to_tensor(grads_and_vars[i][0]) for i in present]
        with tf.compat.v1.name_scope(FUSED_SCOPE + "/"):
            averaged = tf.numpy_function(self._average, grads, [grad.dtype for grad in grads], stateful=True,
                                         name="allreduce")
        out = list(grads_and_vars)
        for index, grad, value in zip(present, grads, averaged, strict=True):
            value.set_shape(grad.shape)
            # Each averaged gradient leaves the host op through an identity of its own, so that ops which
            # colocate with the gradient (tf.clip_by_global_norm does, per gradient) join the identity on the
            # variable's device rather than the host op: a group with the host op would put them all on one.
            var = grads_and_vars[index][1]
            scope = f"{HOOK_SCOPE}/{index}/"
            with tf.compat.v1.name_scope(scope):
                value = tf.identity(value, name="averaged")
            self._scopes[scope] = var.op.name
            out[index] = (value, var)
        return out

    def placement(self, graph: Any, device_of: Mapping[str, int] | None = None) -> dict[str, int]:
        """The fused op on device 0: on GPUs :func:`pardnn.tf.apply` sends it to the host, where its only
        kernel is (on logical CPU devices the host is device 0). Each averaged gradient's identity, and
        the ops colocated with it, on its variable's device (``device_of``; 0 where it names none)."""
        placed = dict(device_of or {})
        added = {op.name: 0 for op in graph.get_operations() if op.name.startswith(FUSED_SCOPE + "/")}
        return {**added, **_on_their_variables(graph, self._scopes, placed)}


def host_broadcast_op(comm: Any, graph: Any, variables: Sequence[Any]) -> Any:
    """The op that sets every variable to rank 0's value over ``comm``: one host ``Bcast`` of their bytes."""
    import tensorflow as tf

    variables = list(variables)
    with graph.as_default(), tf.compat.v1.name_scope(BROADCAST_SCOPE + "/"):
        values = [var.read_value() for var in variables]
        received = tf.numpy_function(lambda *arrays: broadcast_arrays(comm, arrays), values,
                                     [value.dtype for value in values], stateful=True, name="bcast")
        assigns = []
        for var, value, old in zip(variables, received, values, strict=True):
            value.set_shape(old.shape)
            assigns.append(tf.compat.v1.assign(var, value) if var.dtype._is_ref_dtype
                           else var.assign(value, read_value=False))
        return tf.group(*assigns, name="broadcast")


def local_costs(graph: Any) -> Any:
    """The cost graph with the hook's ops taking no time: a profiled allreduce's time is mostly waiting
    for the other nodes, which the node's placement cannot change (and which differs by node). The fused
    host op's outputs hold no device memory (module docstring)."""
    hooked = np.array([name.startswith(HOOK_SCOPE + "/") for name in graph.names], dtype=bool)
    if not hooked.any():
        return graph
    fused = np.array([name.startswith(FUSED_SCOPE + "/") for name in graph.names], dtype=bool)
    if not fused.any():
        return graph.replace(comp_us=np.where(hooked, 0.0, graph.comp_us))
    return graph.replace(comp_us=np.where(hooked, 0.0, graph.comp_us), out_bytes=np.where(fused, 0, graph.out_bytes))
