"""What a placer is and what it returns, as every part of pardnn sees them.

``placer``: :class:`~pardnn.placement.placer.Placer`, one record per placer with its public signature;
``result``: :class:`~pardnn.placement.result.Result` (a placement and its
:class:`~pardnn.placement.result.PartitionReport`). The placers themselves are in :mod:`pardnn.baselines`
and :mod:`pardnn.partitioner`; :mod:`pardnn.registry` names them all.

May import: :mod:`pardnn.costs`, :mod:`pardnn.emulation`, :mod:`pardnn.errors`.
"""
