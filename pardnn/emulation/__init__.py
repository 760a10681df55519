"""Emulation: what a placement does when it runs, without running it.

Owns the scheduler emulator of the paper (``emulator``), the memory tracker of its Eq. 3 (``memory``),
the rules every stage judges an emulated answer by (``emulated``), the checks of a placement's validity
(``checks``), the evaluation a user asks for with ``pardnn simulate`` (``simulate``) and the trace and
memory plot of an emulated step (``trace``).

May import: :mod:`pardnn.costs`, :mod:`pardnn.errors`.
"""
