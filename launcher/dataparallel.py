"""Data parallelism across nodes with Horovod over MPI: gradient averaging and the initial broadcast.

``hvd.DistributedOptimizer`` in graph mode puts every allreduce on the default device inside a
``tf.cond``, which defeats a placement. Instead :class:`GradientAverager` is the ``gradient_hook``
of ``jobs.build``: each gradient goes through ``hvd.allreduce(grad, op=Average)`` on the device
ParDNN gave its variable (``device_dense``, ``device_sparse``). The ops it adds live under the name
scope ``pardnn_allreduce/<i>/``; :meth:`GradientAverager.placement` maps them to their variable's
device index so :func:`pardnn.tf.apply` keeps them there.

One node needs no Horovod: :func:`find_horovod` returns ``None`` for one node and stops with the
install command when more nodes are asked for without it. It does not initialise Horovod
(:func:`init_horovod` does, on every rank), so ranks can agree on the outcome first: one rank
stuck in ``hvd.init()`` while another has failed would wait forever.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from launcher.errors import LaunchError

__all__ = ["HOOK_SCOPE", "GradientAverager", "broadcast_op", "find_horovod", "init_horovod", "local_costs"]

HOOK_SCOPE = "pardnn_allreduce"
INSTALL_HINT = ("build it against the installed TensorFlow with MPI: bash scripts/install-horovod.sh "
                "(on GPU clusters with NCCL: HOROVOD_GPU_OPERATIONS=NCCL bash scripts/install-horovod.sh --force)")


def find_horovod(nodes: int) -> Any:
    """``horovod.tensorflow`` for ``nodes`` > 1 (not initialised); ``None`` for one node.

    Raises
    ------
    LaunchError
        Horovod missing, or built without MPI, while several nodes run.
    """
    if nodes == 1:
        return None
    try:
        import horovod.tensorflow as hvd
    except ImportError as error:
        raise LaunchError(f"{nodes} nodes need Horovod for data parallelism, but it cannot be imported "
                          f"({error}); {INSTALL_HINT}") from None
    if not hvd.mpi_built():
        raise LaunchError(f"{nodes} nodes need Horovod with MPI, but this Horovod was built without it; "
                          f"{INSTALL_HINT}")
    return hvd


def init_horovod(hvd: Any, ranks: int, leaders: Sequence[int] | None = None) -> Any:
    """``hvd.init()`` (collective), checking that Horovod sees every rank; with ``leaders`` (world ranks)
    a process set of them is made too, and returned (else ``None``: the global set)."""
    process_set = None if leaders is None else hvd.ProcessSet(list(leaders))
    hvd.init(process_sets=None if process_set is None else [process_set])
    if hvd.size() != ranks:
        raise LaunchError(f"Horovod sees {hvd.size()} processes but the job has {ranks} ranks")
    return process_set


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
        from pardnn.tf import colocation_groups

        placed = device_of if device_of is not None else self._device_of or {}
        added: dict[str, int] = {}
        for op in graph.get_operations():
            if op.name.startswith(HOOK_SCOPE + "/"):
                scope = op.name[: op.name.index("/", len(HOOK_SCOPE) + 1) + 1]
                added[op.name] = placed.get(self._scopes[scope], 0)
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


def local_costs(graph: Any) -> Any:
    """The cost graph with the hook's ops taking no time: a profiled allreduce's time is mostly waiting
    for the other nodes, which the node's placement cannot change (and which differs by node)."""
    import numpy as np

    hooked = np.array([name.startswith(HOOK_SCOPE + "/") for name in graph.names], dtype=bool)
    if not hooked.any():
        return graph
    return graph.replace(comp_us=np.where(hooked, 0.0, graph.comp_us))
