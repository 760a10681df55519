"""Batch sizing: a job's costed graph at any batch or micro-batch count, and the largest batch that fits.

``batchscale``, ``replicate`` and ``maxbatch``. May import: everything in pardnn below :mod:`pardnn.cli`
and :mod:`pardnn.tf` (``maxbatch`` places with :func:`pardnn.partition`).
"""
