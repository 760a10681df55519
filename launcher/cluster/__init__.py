"""The cluster: who runs where, on which hosts, with which GPUs.

``topology`` (ranks, nodes and each rank's devices), ``hosts`` (``--hosts`` / ``--hostfile``: an MPI job
without Slurm) and ``gpus`` (the GPUs a rank may use, their model and memory).

May import: :mod:`launcher.errors`, :mod:`launcher.env`, :mod:`launcher.files`, :mod:`pardnn`.
"""
