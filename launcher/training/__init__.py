"""Training a replica: the loop (``loop``), the devices TensorFlow sees (``devices``), the allreduce
backends that average gradients across ranks (``dataparallel``), gradient checkpointing
(``recompute``) and plain data parallelism, one rank per device (``replicas``).

May import: :mod:`launcher.rank` and everything below it, :mod:`jobs`, :mod:`pardnn`.
"""
