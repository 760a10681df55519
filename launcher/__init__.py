"""pardnn-launch: the hybrid-parallel launcher (one rank per node, ParDNN inside, Horovod across)."""
