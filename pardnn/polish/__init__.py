"""The polishing stages that run after the paper's Step 2, and the shape they share (``stages``).

``guard`` never returns a placement slower than a cheap one that also fits (its ``candidates`` are the
cheap placements), ``refine`` searches locally on the emulated schedule, and ``order`` chooses and
enforces a run order on each device.

May import: :mod:`pardnn.costs`, :mod:`pardnn.emulation`, :mod:`pardnn.steps`, :mod:`pardnn.placement`,
:mod:`pardnn.baselines`, :mod:`pardnn.errors`.
"""
