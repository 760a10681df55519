"""The file set of the reference ParDNN implementation (ParCoreLab/pardnn), read and written.

:mod:`~pardnn.io.reference.dot` (the DOT edge list), :mod:`~pardnn.io.reference.read` (the set into a
graph) and :mod:`~pardnn.io.reference.write` (a graph into the set): a DOT file, ``name::µs`` timings,
``name::bytes`` sizes and optional lists of variables, reference ops and no-ops. Formats:
docs/formats.md; choices: docs/notes-partitioner.md.

May import: :mod:`pardnn.costs`, :mod:`pardnn.io`, :mod:`pardnn.errors`.
"""

from pardnn.io.reference.read import read_reference, reference_colocation
from pardnn.io.reference.write import write_reference

__all__ = ["read_reference", "reference_colocation", "write_reference"]
