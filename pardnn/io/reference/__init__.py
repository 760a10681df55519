"""The file set of the reference ParDNN implementation (ParCoreLab/pardnn), read and written.

Modules: :mod:`~pardnn.io.reference.dot` (the DOT edge-list dialect), :mod:`~pardnn.io.reference.read`
(the set into a graph) and :mod:`~pardnn.io.reference.write` (a graph into the set). Their loggers
are children of ``pardnn.io.reference``.

The set, one op name per entry, names exactly as in the graph:

- graph (``.dot``): a DOT edge list, ``"a" -> "b"`` or ``"a"->"b"`` per line (chains ``a -> b -> c``,
  a trailing ``;``, ``[attributes]`` and bare IDs too). A lone ``"x"`` line declares an op, so isolated ops
  can be listed. ``digraph NAME {`` and ``}`` lines, blank lines, ``//`` or ``#`` comment lines and
  attribute-only lines (``node [shape=box]``, ``rankdir=LR``) are skipped.
- timings: ``name::microseconds`` lines, the op's compute time (blank lines are skipped here and
  in the files below).
- tensor sizes: ``name::bytes`` lines, the size of the op's output: its ``out_bytes`` and the bytes
  of each of its out-edges.
- optional lists, one name per line: variables (kind residual), reference ops (kind reference, e.g.
  ``Assign``/``ApplyAdam``), no-ops (control only: ``out_bytes`` 0 and 0 bytes on their in- and
  out-edges, as the reference treats them).

Choices where the reference is silent or lenient (it skips whatever it cannot match):

- The ops are those of the DOT file, in order of first appearance; a timing, size or list entry
  naming an op not in it is an error (``strict=False`` skips such entries with one warning).
- An op without a timing costs 0 µs, and one without a size holds 0 bytes: profiles often miss ops
  that did not run in the profiled step. Each reader logs one warning with the count and the first
  names, so a name mismatch (say, lower-cased profile names) does not pass unnoticed.
- A repeated edge is one edge (the reference keeps one per pair); a self-loop is an error.
- Colocation follows the reference's ``collocate()``: a reference op joins the group of every
  variable that feeds it directly, transitively (``ApplyAdam`` pulls its variable and both slots
  into one group). A group is labelled with the name of its first variable in graph order.
- The graph's name is ``name=`` if given, else the DOT graph ID (``digraph "trn-2" {``), else the DOT
  file's name without suffix.

Op types, parameter bytes and a memory limit have no place in the set: they read as ``""``, 0 and
None, and :func:`write_reference` warns when it drops them. Round trips are exact for graphs the set
can express: every edge carries its producer's ``out_bytes``, colocation is as derived above.

May import: :mod:`pardnn.costs`, :mod:`pardnn.io`, :mod:`pardnn.errors`.
"""

from pardnn.io.reference.read import read_reference, reference_colocation
from pardnn.io.reference.write import write_reference

__all__ = ["read_reference", "reference_colocation", "write_reference"]
