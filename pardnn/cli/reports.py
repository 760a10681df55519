"""The human-readable reports of ``pardnn simulate`` and ``pardnn place``: what a placement costs, what
each stage of the partitioner did (the guard's and the run order's lines among them)."""

from __future__ import annotations

from typing import Any

from pardnn.costs.machine import format_bytes
from pardnn.polish.guard import GuardDetails
from pardnn.polish.order import OrderDetails
from pardnn.polish.refine import RefineDetails
from pardnn.settings import PLACEMENT

from .options import ratio_text, table, us

__all__ = ["PARDNN", "format_allreduce", "format_evaluation", "format_guard", "format_order", "format_report"]

PARDNN = PLACEMENT["algorithm"].default  # the paper's placer: the only one with memory heuristics


def format_evaluation(evaluation: Any) -> str:
    lines = [
        f"makespan        {us(evaluation.makespan_us)}   lower bound {us(evaluation.lower_bound_us)}"
        f"   ratio {ratio_text(evaluation.ratio, '.3f')}",
        f"communication   {evaluation.cut_edges:,} cut edges, {format_bytes(evaluation.cut_bytes)}, "
        f"{us(evaluation.comm_us)} of transfers",
        f"memory          {'fits' if evaluation.memory_fits else 'DOES NOT FIT'}"
        + ("" if evaluation.limit_bytes is not None else " (no limit given)"),
    ]
    if evaluation.colocation_violations:
        lines.append(f"colocation      {evaluation.colocation_violations} group(s) SPLIT across devices")
    rows = []
    for d, load in enumerate(evaluation.load_us):
        limit = evaluation.limit_bytes[d] if evaluation.limit_bytes is not None else None
        rows.append([str(d), f"{evaluation.ops_per_device[d]:,}", us(load),
                     format_bytes(evaluation.peak_memory_bytes[d]), format_bytes(evaluation.residual_bytes[d]),
                     "-" if limit is None else format_bytes(limit),
                     "-" if limit is None else ("ok" if evaluation.peak_memory_bytes[d] <= limit else "OVER")])
    lines.append(table(rows, ["device", "ops", "load", "peak memory", "residual", "limit", "fits"]))
    return "\n".join(lines)


def format_report(report: Any) -> str:
    stages = ", ".join(f"{name} {seconds:.3f} s" for name, seconds in report.stage_seconds.items())
    details = report.details
    lines = [f"{report.algorithm}: {report.ops:,} ops, {report.edges:,} edges on {report.devices} devices; "
             f"CCR {ratio_text(report.ccr)}",
             f"stages          {stages} (total {report.total_seconds:.3f} s)"]
    if details.get("memory_heuristic"):
        before = details["peak_before_bytes"]
        if "peak_after_bytes" in details:
            lines.append(f"memory          heuristic {details['memory_heuristic']}: moved {details['moved_ops']:,} ops "
                         f"({details['moved_share']:.1%} of all), makespan {us(details['makespan_before_us'])} -> "
                         f"{us(details['makespan_after_us'])}, max peak {format_bytes(max(before))} -> "
                         f"{format_bytes(max(details['peak_after_bytes']))}, "
                         f"{report.stage_seconds.get('memory', 0.0):.3f} s")
        else:
            lines.append(f"memory          heuristic {details['memory_heuristic']} gave up: "
                         f"{details.get('memory_heuristic_failed', '')}")
    if "guard" in details:
        lines.append(f"guard           {format_guard(details['guard'])}")
    if "refine" in details:
        refined: RefineDetails = details["refine"]
        lines.append(f"refine          {refined.moves} moves accepted of {refined.evaluations} tried: makespan "
                     f"{us(refined.makespan_before_us)} -> {us(refined.makespan_after_us)}")
    if "order" in details:
        lines.append(f"order           {format_order(details['order'])}")
    if "primary_ops" in details:
        lines.append(f"clusters        {len(details['primary_ops'])} primaries of "
                     f"{', '.join(str(x) for x in details['primary_ops'])} ops; "
                     f"{details['secondary_clusters']:,} secondaries: {details['mapped_by_locality']:,} mapped for "
                     f"locality ({details['lookahead_passes']} passes), {details['mapped_by_balance']:,} by "
                     f"level-aware balancing; {details['colocation_moved']:,} ops moved to keep colocation groups")
    lines.append(format_evaluation(report.evaluation))
    return "\n".join(lines)


def format_guard(guard: GuardDetails) -> str:
    """One line: which placement the guard kept, and by how much it beat ParDNN's own."""
    others = [name for name in guard.candidates if name != PARDNN]
    emulated = [name for name in others if guard.candidates[name] is not None]
    if guard.winner == PARDNN:
        return (f"kept ParDNN's placement: none of {len(others)} cheap placements that fit is faster "
                f"({len(emulated)} emulated, {len(others) - len(emulated)} ruled out by a lower bound or unavailable)")
    own, speedup = guard.pardnn_makespan_us, guard.speedup_over_pardnn
    if guard.winner is None:  # no memory heuristic to make one fit
        return f"no placement tried fits the memory limits (no memory heuristic); kept ParDNN's ({us(own)})"
    by = "" if speedup is None else f"{speedup:.2f}x "  # None: ParDNN's did not fit, or the winner takes 0 us
    return (f"{guard.winner} is {by}faster than ParDNN's own placement "
            f"({us(guard.makespan_us)} vs {'none that fits' if own == float('inf') else us(own)}); using it"
            + (", in its own run order" if guard.ordered else ""))


def format_order(order: OrderDetails) -> str:
    """One line: whether the ordering stage kept a run order, and what it buys."""
    if order.kept and order.ordered_us is not None:  # kept only when strictly shorter: unordered > 0
        before, after = order.unordered_us, order.ordered_us
        return (f"each device runs in upward-rank order (written as positions, enforced by pardnn.tf.apply): "
                f"makespan {us(before)} -> {us(after)}" + (f" ({before / after:.2f}x)" if after > 0 else ""))
    tried = f", {us(order.ordered_us)} in upward-rank order" if order.ordered_us is not None else ""
    runs = "keeps the run order it came with" if order.came_ordered else "runs in order of readiness"
    return f"none kept ({order.why_not}{tried}): each device {runs}"


def format_allreduce(step: Any, cluster: Any) -> str:
    """The step with the gradient allreduce (:class:`pardnn.emulation.allreduce.AllreduceStep`)."""
    hidden = 1.0 - step.exposed_us / step.busy_us if step.busy_us > 0 else 1.0
    return "\n".join([
        f"replicas        {cluster.nodes} node(s) x {cluster.replicas_per_node} = {step.replicas}; each step averages "
        f"{format_bytes(step.gradient_bytes)} of gradients in {step.buffers} fused allreduce(s)",
        f"step            compute {us(step.compute_us)} + exposed allreduce {us(step.exposed_us)} = "
        f"{us(step.step_us)}   (allreduce busy {us(step.busy_us)}, {max(hidden, 0.0):.0%} of it hidden)",
    ])
