"""The cost model: what one training step costs, and the machine it runs on.

:class:`~pardnn.costs.graph.CostGraph` (``graph``, with ``csr``, ``copies``, ``validation``),
:class:`~pardnn.costs.machine.Machine` and the device ``presets``; ``levels``, ``info`` and ``synthetic``.

May import: :mod:`pardnn.errors` only. Everything else in pardnn builds on this package.
"""
