"""Batch sizing: a job's costed graph at any batch or micro-batch count, the largest batch, the best plan.

``batchscale``, ``replicate``, ``microbound``, ``plan`` and ``maxbatch``.

May import: everything in pardnn below :mod:`pardnn.cli` and :mod:`pardnn.tf` (``maxbatch`` places with
:func:`pardnn.partition`).
"""
