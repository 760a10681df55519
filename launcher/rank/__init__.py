"""One rank's run: what it knows (``state``), how it agrees with the other ranks (``agreement``), how it
saves and resumes (``checkpoint``, ``resume``), and every way it ends: on its own terms (``outcome``),
on a stop signal (``signals``), on a stalled peer (``heartbeat``), early with its files complete
(``ending``), or on an error every rank reports in one line (``failure``).

May import: :mod:`launcher.cluster`, :mod:`launcher.reporting`, the launcher's base modules
(``errors``, ``env``, ``files``, ``settings``, ``variants``), :mod:`jobs`, :mod:`pardnn`.
"""
