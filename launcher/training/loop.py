"""The training loop of one node: initialise (or resume), broadcast, run the iterations, trace one.

Node ``r`` of ``N`` feeds batch ``i·N + r`` at iteration ``i``; a resumed run starts at the
checkpoint's iteration (:mod:`launcher.rank.checkpoint`), so the sequence goes on. Rank 0 saves
checkpoints at iteration boundaries; one iteration just outside the measured window runs with a
full trace (:mod:`launcher.reporting.timeline`), so tracing never slows a measured step.
"""

from __future__ import annotations

import functools
import logging
import time
from pathlib import Path
from typing import Any

from launcher.rank.agreement import agreed_variables, variable_digests
from launcher.rank.checkpoint import Checkpointer, restore
from launcher.rank.signals import StopGuard
from launcher.reporting.progress import progress
from launcher.reporting.timeline import TIMELINE_FILE, traced_iteration, write_measured

__all__ = ["train"]

logger = logging.getLogger("launcher")


def train(state: Any, trained: Any, broadcast: Any, devices: Any, guard: StopGuard, tf: Any, ptf: Any, *,
          checkpointer: Checkpointer, resume: tuple[int, dict[str, Any], Path] | None) -> dict[str, str]:
    """Initialise, resume, broadcast, run the iterations; the digests of the variables every replica
    must agree on. ``resume``: (first iteration, values by variable name, checkpoint path) or ``None``."""
    settings, topology, collector = state.settings, state.topology, state.collector
    config = ptf.session_config(devices.count, devices.kind)
    step = {"step": trained.fetches, "loss": trained.loss}
    for name in ("learning_rate", "loss_scale", "finite"):  # a Keras optimizer's rate; loss scaling's state
        if getattr(trained, name, None) is not None:
            step[name] = getattr(trained, name)
    stream = getattr(trained, "stream", None)  # a [data] dataset read in the graph: its wait is in the step
    if stream is not None:
        step["input_wait"] = stream.wait
    collector.input_source = "dataset" if stream is not None else "function"
    compared = agreed_variables(trained.graph, trained.variables)
    validation = getattr(trained, "evaluation", None)  # [eval]: validation every N iterations and after the last
    model_weights = set((getattr(trained, "model", None) or {}).get("weights", ()))
    agreed = {v.name for v in compared}
    # The model's state each rank updates from its own batches (batch norm's moving statistics): averaged over
    # the ranks before each validation, so that every rank validates, and --save-model writes, one model.
    local = [v for v in trained.variables if v.name in model_weights and v.name not in agreed]
    start = 0 if resume is None else resume[0]
    traced = traced_iteration(settings.window, settings.iterations)
    if traced is None:
        logger.info("no timeline: every iteration is in the measured window, and a traced step would slow it")
    with tf.compat.v1.Session(graph=trained.graph, config=config) as session:
        with collector.phase("initialize"):
            session.run(trained.init_op)
            if resume is not None:
                restore(session, trained.variables, resume[1], resume[2])
                if stream is not None:  # the dataset goes on after the batches the checkpoint's iterations read
                    session.run(stream.initializer, {stream.skip: start})
                logger.info("resumed from %s at iteration %d", resume[2], start)
            if broadcast is not None:
                session.run(broadcast)
        devices.reset_peaks()
        probe, source = devices.memory_probe()
        collector.watch_memory(probe, source, settings.window)
        collector.first_iteration = start
        state.training = True
        state.checkpointer = checkpointer
        state.flush_rank("running", None)

        def fetch() -> Any:
            return session.run(list(trained.variables))

        bar = progress(settings.iterations - start, str(state.job.name), settings.progress and topology.is_root)
        try:
            with collector.phase("train"):
                for index in range(start, settings.iterations):
                    checkpointer.boundary(index, start, fetch, stopping=guard.stopping)
                    guard.check()
                    fed = time.perf_counter()
                    feed = trained.feed_fn(index * topology.size + topology.rank)
                    fed = time.perf_counter() - fed  # a function's batch, made in Python before the step
                    collector.before_iteration(index)
                    options = metadata = None
                    if index == traced:
                        options = tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE)
                        metadata = tf.compat.v1.RunMetadata()
                    started = time.perf_counter()
                    out = session.run(step, feed_dict=feed, options=options, run_metadata=metadata)
                    seconds = time.perf_counter() - started
                    if metadata is not None:
                        write_measured(state.directory / TIMELINE_FILE.format(rank=topology.rank), metadata)
                    scaled = {} if "finite" not in out else {"loss_scale": float(out["loss_scale"]),
                                                             "skipped": not bool(out["finite"])}
                    scaled["input_wait"] = float(out["input_wait"]) if stream is not None else fed
                    if collector.iteration(index, seconds, float(out["loss"]), out.get("learning_rate"), **scaled):
                        state.write_figures("running")
                    if validation is not None and validation.due(index, settings.iterations):
                        _validate(state, session, validation, index + 1, local)
                    bar.update(1)
                last = functools.cache(fetch)  # the last checkpoint and --save-model read the values once
                checkpointer.boundary(settings.iterations, start, last, final=True)
                if settings.save_model is not None and topology.is_root:  # written by finish (launcher.rank.outcome)
                    state.trained = (trained.model, dict(zip((v.name for v in trained.variables), last())))
        finally:
            checkpointer.active = False
            bar.close()
        values = session.run(compared)
    return variable_digests([(v.name, value) for v, value in zip(compared, values, strict=True)])


def _validate(state: Any, session: Any, validation: Any, iteration: int, local: list[Any]) -> None:
    """Average the ``local`` state over the ranks, run ``validation`` (:class:`jobs.evaluation.Evaluation`)
    on this rank's batches, average the batch means over every rank (each rank has as many batches of
    one size) and record it (collective)."""
    topology = state.topology
    started = time.perf_counter()
    if local and topology.size > 1:
        values = topology.allgather(session.run(local))
        means = [sum(rank[i] for rank in values) / len(values) for i in range(len(local))]
        session.run([v.initializer for v in local],
                    feed_dict={v.initializer.inputs[1]: mean.astype(v.dtype.base_dtype.as_numpy_dtype)
                               for v, mean in zip(local, means, strict=True)})
    sums: dict[str, float] = {}
    for batch in range(validation.batches):
        out = session.run(validation.fetches, validation.feed(batch, topology.rank, topology.size))
        for name, value in out.items():
            sums[name] = sums.get(name, 0.0) + float(value)
    mine = {name: value / validation.batches for name, value in sums.items()}
    every = topology.allgather(mine)
    means = {name: sum(rank[name] for rank in every) / len(every) for name in mine}
    record = {"iteration": iteration, "loss": means.pop("loss"), "metrics": means,
              "samples": validation.batches * validation.batch_size * len(every),
              "seconds": time.perf_counter() - started}
    state.collector.validated(record)
    if topology.is_root:
        shown = "".join(f", {name} {value:.4f}" for name, value in record["metrics"].items())
        logger.info("validation after iteration %d: loss %.4f%s (%d samples on %d rank(s), %.1f s)", iteration,
                    record["loss"], shown, record["samples"], len(every), record["seconds"])
