"""Placing a replica across a node's devices: the model-parallel run (``model``: build and cost the
replica's graph, place it, apply the placement, train) and the plans chosen at launch (``planning``:
``--replica-devices auto``, ``--micro-batches auto``).

May import: :mod:`launcher.training` and everything below it, :mod:`jobs`, :mod:`pardnn`.
"""
