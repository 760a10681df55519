"""pardnn-launch: the hybrid-parallel launcher (one rank per node, ParDNN inside, Horovod across).

::

    import launcher
    summary = launcher.run("jobs/trn-tiny.toml", devices_per_node=4, iterations=160)

``launcher.run`` is the core the ``pardnn-launch`` command calls (:mod:`launcher.cli`); keyword
arguments override the job file as the command-line options do.
"""

from pardnn.tfstack import prepare as _prepare

_prepare()  # before anything imports TensorFlow (pardnn.tfstack)

from launcher.core import run
from launcher.errors import Inconsistent, Interrupted, LaunchError, Stalled, Stopped, Terminated
from launcher.settings import Settings, resolve

__all__ = ["Inconsistent", "Interrupted", "LaunchError", "Settings", "Stalled", "Stopped", "Terminated", "resolve",
           "run"]
