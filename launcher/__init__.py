"""pardnn-launch: the hybrid-parallel launcher (one rank per node, ParDNN inside, an allreduce across).

``launcher.run(job, **overrides)`` is what the ``pardnn-launch`` command (:mod:`launcher.cli`) calls;
keyword arguments override the job file as the command-line options do::

    import launcher
    summary = launcher.run("jobs/trn-tiny.toml", devices_per_node=4, iterations=160)
"""

from pardnn.tfstack import prepare as _prepare

_prepare()  # before anything imports TensorFlow (pardnn.tfstack)

from launcher.core import run
from launcher.errors import Inconsistent, Interrupted, LaunchError, Stalled, Stopped, Terminated
from launcher.settings import Settings, resolve

__all__ = ["Inconsistent", "Interrupted", "LaunchError", "Settings", "Stalled", "Stopped", "Terminated", "resolve",
           "run"]
