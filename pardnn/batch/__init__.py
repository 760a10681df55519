"""Batch sizing: a job's costed graph at any batch size or micro-batch count, and the largest batch that
trains.

``batchscale`` (a graph at any batch from graphs at two sizes), ``replicate`` (a micro-batched step at any
M from the graph at M = 2) and ``maxbatch`` (the largest trainable batch on K devices, ParDNN against data
parallelism).

May import: everything in pardnn below :mod:`pardnn.cli` and :mod:`pardnn.tf` (``maxbatch`` places with
:func:`pardnn.partition`).
"""
