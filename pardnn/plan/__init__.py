"""Planning a node: replicas of k devices × M micro-batches, judged with the cluster's allreduce.

``search`` (:class:`~pardnn.plan.search.Planner`, the one plan search) and ``microbound`` (a lower
bound on a plan's step from the plain step of its micro-batch). May import: everything in pardnn
below :mod:`pardnn.cli` and :mod:`pardnn.tf` (a plan is placed with :func:`pardnn.partition`).
"""

from pardnn.plan.search import MICRO_BATCHES, Plan, Planner, PlanSearch, Trial, choose, replica_options

__all__ = ["MICRO_BATCHES", "Plan", "PlanSearch", "Planner", "Trial", "choose", "replica_options"]
