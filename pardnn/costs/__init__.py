"""The cost model: what one training step costs, and the machine it runs on.

Owns :class:`~pardnn.costs.graph.CostGraph` (the step's ops, their times and memory, the tensors between
them; ``graph``, with its array algorithms in ``csr``, micro-batch copies in ``copies`` and its rules in
``validation``), :class:`~pardnn.costs.machine.Machine` (devices, memory, links; ``machine``) and the
published device presets (``presets``); the graph's levels (``levels``), statistics (``info``) and
synthetic graphs for tests and benchmarks (``synthetic``).

May import: :mod:`pardnn.errors` only. Everything else in pardnn builds on this package.
"""
