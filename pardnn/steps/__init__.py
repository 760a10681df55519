"""The paper's algorithm, step by step: Step 1 (graph slicing, then LFLAM mapping) and Step 2 (the two
memory heuristics).

``slicing`` (Algorithm 1), ``mapping`` (Algorithm 2 and Eq. 2, with the Fenwick trees of ``fenwick``),
``colocation`` (groups kept whole), ``overflow`` (memory heuristic I, Eqs. 4-5), ``balance`` (memory
heuristic II, Eq. 6 and chunk splitting), the movable ``units`` both heuristics share, and
``feasibility`` (proofs that no placement fits). :func:`pardnn.partition` chains them
(:mod:`pardnn.partitioner`).

May import: :mod:`pardnn.costs`, :mod:`pardnn.emulation`, :mod:`pardnn.errors`.
"""
