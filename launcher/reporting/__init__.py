"""What a run tells its user: each rank's console and log (``console``), the progress bar (``progress``),
what a rank measured (``collector``), the run's ``summary.json`` and ``results.csv`` row (``summary``),
one step seen measured and emulated (``timeline``), and what ``pardnn-report`` compares and draws
(``comparisons``, ``plotting``; the command itself is :mod:`launcher.report`).

May import: :mod:`launcher.errors`, :mod:`launcher.env`, :mod:`launcher.files`, :mod:`pardnn`.
"""
