"""The paper's algorithm, step by step: Step 1 (slicing, LFLAM mapping) and Step 2 (the memory heuristics).

``slicing``, ``mapping`` (with ``fenwick``), ``colocation``, ``overflow`` (heuristic I), ``balance``
(heuristic II), ``units`` and ``feasibility``; :func:`pardnn.partition` chains them.

May import: :mod:`pardnn.costs`, :mod:`pardnn.emulation`, :mod:`pardnn.errors`.
"""
