"""How a variant ends on its own terms: trained (:func:`finish`), or not before training (:func:`end_untrained`).

:func:`finish` runs after the last iteration: rank 0 writes the model (``--save-model``), the
replicas compare their weights (a mismatch fails the run), rank 0 gathers every replica's figures
and writes ``summary.json``, ``status.json`` and a row of ``results.csv``. :func:`end_untrained`
ends a variant whose step does not fit a device's memory (``does_not_fit``) or that its placer
could not place (``no_placement``): every rank finds it at once, rank 0 writes the summary and the
row, then every rank raises the error (exit code 3 for ``does_not_fit``). Both are collective.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any, NoReturn

from launcher.errors import AgreedError, LaunchError
from launcher.rank.agreement import check_variables, variables_digest
from launcher.rank.checkpoint import FOLDER, NAME, save
from launcher.rank.failure import one_line
from launcher.rank.state import SUMMARY_FILE, RunState
from launcher.reporting.timeline import step_ms

__all__ = ["end_untrained", "finish", "save_model"]

logger = logging.getLogger("launcher")


def finish(state: RunState, digests: dict[str, str]) -> dict[str, Any]:
    """After the last iteration: compare the replicas, gather the figures, write the run's files (collective)."""
    topology, settings = state.topology, state.settings
    state.end_watch("finishing", final=False)
    saved, unsaved = save_model(state) if topology.is_root and state.trained is not None else (None, None)
    figures = state.node_figures()
    figures["variables_sha256"] = variables_digest(sorted(digests.items()))
    every = topology.allgather(digests)
    nodes = topology.gather(figures)
    try:
        check_variables(topology.nodes, every)
        status, problem = "complete", None
    except AgreedError as error:
        status, problem = error.status, error
    state.write_figures(status, figures)
    summary = figures
    if topology.is_root:
        assert nodes is not None
        consistency = {
            "placement_sha256_equal": len({n["placement_sha256"] for n in nodes}) == 1,
            "variables_sha256_equal": len({n["variables_sha256"] for n in nodes}) == 1,
            "variables_compared": len(digests),
        }
        makespan = state.placement.get("emulated_makespan_us")
        medians = [n["throughput"]["step_ms_median"] for n in nodes]
        summary = state.write_summary(status, nodes,
                                      {"consistency": consistency,
                                       "step_ms": step_ms(makespan, medians, state.placement.get("allreduce")),
                                       **({"validation": state.collector.validations}
                                          if state.collector.validations else {}),
                                       **({} if saved is None else {"saved_model": saved})})
        if problem is None:
            state.write_status(status, None, 0)
            throughput = summary["throughput"]
            waited = figures.get("input")
            if waited:
                logger.info("input (%s): a step waited %.2f ms for its batch (median; %.1f %% of the time)%s",
                            "tf.data in the graph" if waited["source"] == "dataset" else "a Python function, fed",
                            waited["wait_ms_median"], 100 * waited["wait_share"],
                            "; the input pipeline slows training: prefetch more, or read with tf.data (parallel map)"
                            if waited["wait_share"] > 0.1 and waited["wait_ms_median"] >= 1.0
                            and (getattr(state.job, "data_entry", None) or getattr(state.job, "dataset", None))
                            else "")  # the zoo's data is made for the step: no pipeline of the user's to tune
            logger.info("throughput over iterations %d-%d: %.1f samples/s%s (%s)", *settings.window,
                        throughput["samples_per_s"],
                        "" if throughput["tokens_per_s"] is None else f", {throughput['tokens_per_s']:.1f} tokens/s",
                        state.directory / SUMMARY_FILE)
    if problem is not None:
        raise problem
    if unsaved is not None:
        raise unsaved
    state.collector.flush(status)
    state.end_watch(status)
    return summary


def save_model(state: RunState) -> tuple[dict[str, Any], LaunchError | None]:
    """``--save-model``: write the trained model (:func:`jobs.export.save_model`); what the summary says of it
    and, when Keras could not write it, the error to raise once the summary is written. The values are then
    kept as a checkpoint, for ``pardnn export`` once the cause is fixed."""
    from jobs.config import JobError
    from jobs.export import save_model as write_model

    model, values = state.trained or (None, {})
    path = state.settings.save_model
    assert path is not None
    started = time.perf_counter()
    try:
        if model is None:
            raise JobError(f"{path}: this run's step does not say which variables are the model's")
        write_model(state.job, model, values, path)
    except (JobError, OSError) as error:
        message = one_line(error)
        kept = _keep_values(state, values)
        logger.error("--save-model %s: %s", path, message)
        where = f"; the trained values are kept in {kept}: pardnn export {kept} -o {path} once fixed" if kept else ""
        return {"path": None, "error": message, "kept": None if kept is None else str(kept)}, LaunchError(
            f"--save-model {path}: {message}{where}")
    seconds = time.perf_counter() - started
    logger.info("saved the trained model to %s (%.1f s)", path, seconds)
    return {"path": str(Path(path).resolve()), "format": Path(path).name.split(".", 1)[-1], "seconds": seconds}, None


def _keep_values(state: RunState, values: dict[str, Any]) -> Path | None:
    """The checkpoint holding ``values`` at the last iteration: the run's own, else one written now."""
    checkpointer = state.checkpointer
    if checkpointer is None or not values:
        return None
    final = NAME.format(iteration=state.settings.iterations)
    if checkpointer.saved and checkpointer.saved[-1].stem == final:
        return checkpointer.saved[-1]
    folder = checkpointer.folder or state.directory / FOLDER
    try:
        return save(folder, state.settings.iterations, checkpointer.names,
                    [values[name] for name in checkpointer.names], checkpointer.info, checkpointer.placement_text)
    except OSError as error:
        logger.error("could not keep the trained values in %s either (%s)", folder, error)
        return None


def end_untrained(state: RunState, error: AgreedError) -> NoReturn:
    """Write the summary and row of a variant that ends untrained (status ``error.status``), then raise
    ``error`` (collective: every rank comes here with the same error)."""
    figures = state.node_figures()
    nodes = state.topology.gather(figures)
    if state.topology.is_root:
        assert nodes is not None
        makespan = state.placement.get("emulated_makespan_us")
        emulated = step_ms(makespan, [], state.placement.get("allreduce"))
        state.write_summary(error.status, nodes, {"message": one_line(error), "step_ms": emulated})
    raise error
