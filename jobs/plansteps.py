"""The replica's costed steps a plan search needs, by (batch, M): each built once, several at a time.

:class:`Steps` is the :class:`pardnn.plan.search.Steps` of ``pardnn plan``: M = 1 and M = 2 built in
TensorFlow and costed with the preset, M >= 4 written down from the M = 2 step
(:func:`pardnn.batch.replicate.replicate`), a plan of M >= 2 bounded from the plain step of its
micro-batch (:mod:`pardnn.plan.microbound`) before its step is built. The steps are built in worker
processes beside the search (``spawn``, no GPU visible) when the first build says that pays;
:func:`needed_steps` is the queue. How and why: docs/internals.md, "The plan search's time".
"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import math
import multiprocessing
import os
import pickle
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures.process import BrokenProcessPool
from typing import Any

import numpy as np

from pardnn.errors import ScalingError

__all__ = ["PARALLEL_AFTER_S", "WORKER_BYTES", "Steps", "needed_steps", "worker_count"]

PARALLEL_AFTER_S = 30.0  # the rest's serial build time (at the first step's pace) that pays for workers
WORKER_BYTES = 4 << 30  # memory set aside per worker (a paper model's M = 2 build peaks near 2.5 GiB)


def needed_steps(node_batch: int, node_devices: int, replica_devices: Sequence[int],
                 micro_batches: Sequence[int]) -> list[tuple[int, int]]:
    """The (batch, M) steps a search over ``replica_devices`` × ``micro_batches`` may build: the plain
    steps (M = 1) first, those of the M = 1 plans, then, when several M are tried, the plain step of
    each M >= 2 plan's micro-batch (its bound: :mod:`pardnn.plan.microbound`), then the M = 2 steps
    (M >= 4 needs the M = 2 step of its micro-batch: :func:`step_of`); each group in
    :meth:`pardnn.plan.search.Planner.search`'s order (by M, then k). A plan whose batch does not split
    needs none."""
    plain: list[tuple[int, int]] = []
    paired: list[tuple[int, int]] = []
    for micro in micro_batches:
        for k in replica_devices:
            replicas = node_devices // k
            if node_batch % replicas or (node_batch // replicas) % micro:
                continue
            batch = node_batch // replicas
            wanted = [step_of(batch, micro)]
            if micro > 1 and len(micro_batches) > 1:  # the plain step of one micro-batch bounds the plan
                wanted.append((batch // micro, 1))
            for step in wanted:
                into = plain if step[1] == 1 else paired
                if step not in into:
                    into.append(step)
    return plain + paired


def step_of(batch: int, micro: int) -> tuple[int, int]:
    """The (batch, M) step built for a plan of ``micro`` micro-batches of ``batch`` samples (M >= 4: the
    M = 2 step of the same micro-batch, its template)."""
    return (batch, micro) if micro <= 2 else (2 * batch // micro, 2)


def worker_count(steps_left: int, *, cpus: int | None = None, available_bytes: int | None = None) -> int:
    """Workers for ``steps_left`` builds: the CPUs this process may use less the one it runs on, no more
    than the steps, and no more than the available memory holds (module docstring)."""
    cpus = len(os.sched_getaffinity(0)) if cpus is None else cpus
    if available_bytes is None:
        try:
            available_bytes = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError):
            available_bytes = WORKER_BYTES
    return max(0, min(cpus - 1, steps_left, available_bytes // WORKER_BYTES))


def build_step(job: Any, preset_name: str, batch: int, micro: int, build: Callable[..., Any]) -> tuple[Any, float]:
    """The step at ``batch`` and ``micro`` built and costed on ``preset_name``, and the seconds it took
    (here or in a worker)."""
    from pardnn.costs.presets import preset
    from pardnn.tf.estimate import estimate_parts

    began = time.perf_counter()
    trained = build(job, batch_size=batch, micro_batches=micro)
    parts = estimate_parts(trained.graph, trained.fetches, preset(preset_name), name=f"{job.name}-b{batch}-m{micro}")
    gradients = getattr(trained, "gradients", ())
    if micro == 1 and gradients:  # what each micro-batch of a step at this micro-batch size repeats
        from pardnn.plan.microbound import repeated_ops

        inputs = [tensor.op.name for tensor in trained.inputs.values()]
        parts = dataclasses.replace(parts, repeated=repeated_ops(parts.graph, inputs, gradients))
    return parts, time.perf_counter() - began


def _start_worker() -> None:
    os.environ["CUDA_VISIBLE_DEVICES"] = ""  # before TensorFlow loads: a build needs no GPU
    from jobs.tfimport import quiet

    quiet()


class Steps:
    """The replica's costed steps on one device preset, built once each (module docstring).

    ``parts`` is shared by the presets of one job: a step built and costed for one preset is costed for
    another without building it again when its time is all kernels' (the roofline of each op's FLOPs and
    bytes moved, :func:`pardnn.tf.estimate.estimate_parts`'s formula); a step with functional ops, whose
    bodies' times depend on the preset too, is built again. ``seconds``: every build's own time, wherever
    it ran; ``builds``: how many; ``workers``: the processes that built beside this one.
    """

    def __init__(self, job: Any, spec: Any, build: Callable[..., Any], parts: dict[Any, Any]) -> None:
        self.job, self.spec, self.build, self.parts = job, spec, build, parts
        self.grown: dict[tuple[int, int], Any] = {}
        self.pending: dict[tuple[int, int], cf.Future[Any]] = {}  # handed to a worker
        self.queue: list[tuple[int, int]] = []  # for the next free worker, or for this process to take
        self.pool: cf.ProcessPoolExecutor | None = None
        self.deferred: list[tuple[int, int]] = []  # M = 2 steps for the workers once :meth:`ahead` wants them
        self.bounding: set[tuple[int, int]] = set()  # the plain steps this search builds (bounds to wait for)
        self.lock = threading.RLock()  # the queue and ``pending``: a finished build hands out the next step
        self.terms: dict[tuple[int, int], Any] = {}  # each plain step's PlainTerms, on this preset
        self.counts: dict[int, Any] = {}  # each plain step's PlainTerms by batch, on any preset (its counts)
        self.note: Callable[[str], None] = lambda message: None
        self.seconds, self.builds, self.workers = 0.0, 0, 0

    def reset(self, note: Callable[[str], None]) -> None:
        """Count the next search's builds from zero, noting progress to ``note``."""
        self.note, self.seconds, self.builds, self.workers = note, 0.0, 0, 0

    def start(self, steps: Sequence[tuple[int, int]], workers: int | None = None,
              certain: Sequence[tuple[int, int]] | None = None) -> None:
        """Begin building ``steps`` (those not built or costed yet) in workers (module docstring).
        ``certain``: the steps the search asks for whatever its bounds (default: all); when none of
        them is left to build (a search for another number of nodes, say) and ``workers`` is ``None``,
        nothing is built ahead: the search builds what its bounds do not prune, when it needs it."""
        todo = [s for s in steps if not self._ready(s)]
        self.bounding = {step for step in steps if step[1] == 1}
        if not todo or workers == 0 or not (_picklable(self.build) and _picklable(self.job)):
            return
        if workers is None and certain is not None and not set(todo) & set(certain):
            return
        if workers is not None:
            self._open(workers, todo)
            return
        rest, count = todo[1:], worker_count(len(todo) - 1)
        timer = None
        if rest and count >= 1:  # once the first build has taken PARALLEL_AFTER_S / steps left, the rest go
            timer = threading.Timer(PARALLEL_AFTER_S / len(rest), self._open, (count, rest))
            timer.daemon = True
            timer.start()
        try:
            self.built(*todo[0])  # here, measuring the pace
        finally:
            if timer is not None:
                timer.cancel()
                timer.join()

    def _open(self, workers: int, todo: Sequence[tuple[int, int]]) -> None:
        """Start ``workers`` processes and queue ``todo`` for them: the plain steps now, the M = 2 steps
        once a plan needs them (:meth:`ahead`)."""
        with self.lock:
            self.workers = workers
            self.pool = cf.ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"),
                                               initializer=_start_worker)
            self.queue = [step for step in todo if step[1] == 1]
            self.deferred = [step for step in todo if step[1] != 1]
        self.note(f"building {len(todo)} steps in {workers} worker process(es) beside this one")
        self._pump()

    def _pump(self, _done: Any = None) -> None:
        """Hand the queue's first steps to the workers that are free (also called, from the pool's
        thread, whenever a build ends). A step goes to a worker only when one is free, so the rest of
        the queue stays this process's to take or to drop (:meth:`_collect`, :meth:`ahead`)."""
        with self.lock:
            while self.pool is not None and self.queue and \
                    sum(not future.done() for future in self.pending.values()) < self.workers:
                step = self.queue.pop(0)
                try:
                    future = self.pool.submit(build_step, self.job, self.spec.name, *step, self.build)
                except (RuntimeError, BrokenProcessPool):  # shut down, or a worker died: this process builds
                    self.queue.insert(0, step)
                    return
                self.pending[step] = future
                future.add_done_callback(self._pump)

    def ahead(self, plans: Sequence[tuple[int, int, float | None]]) -> None:
        """The (batch, M, lower bound or ``None``) of the plans the search may still place (those its
        bounds do not prune yet): the steps no such plan needs are dropped from the queue, and a deferred
        M = 2 step joins it once a plan that needs it is bounded already (its plain step built) and not
        pruned, so the workers never build an M = 2 step on the chance that its bound keeps it. The
        M = 2 steps queue by their plans' lowest bound: the likeliest to be placed first."""
        wanted = {step for batch, micro, _ in plans for step in (step_of(batch, micro), (batch // micro, 1))}
        promise: dict[tuple[int, int], float] = {}  # an M = 2 step's plans' lowest bound, once one is bounded
        for batch, micro, bound in plans:
            if micro > 1 and ((batch // micro, 1) not in self.bounding or self._ready((batch // micro, 1))):
                step = step_of(batch, micro)
                promise[step] = min(promise.get(step, math.inf), math.inf if bound is None else bound)
        with self.lock:
            for step in [step for step in self.pending if step not in wanted]:
                if self.pending[step].cancel():
                    del self.pending[step]
            self.queue = [step for step in self.queue if step in wanted]
            for step in [step for step in self.deferred if step not in wanted or step in promise]:
                self.deferred.remove(step)
                if step in promise and not self._ready(step):
                    self.queue.append(step)
            plain = [step for step in self.queue if step[1] == 1]
            self.queue = plain + sorted((step for step in self.queue if step[1] != 1),
                                        key=lambda step: promise.get(step, math.inf))
        self._pump()

    def bound_for(self, batch: int, micro: int, devices: int, ready_only: bool = False) -> Any:
        """A lower bound on the step of ``micro`` >= 2 micro-batches of ``batch`` on ``devices`` devices
        without building it (a :class:`pardnn.plan.microbound.MicroBound`, ``None`` without one): from
        the plain step of one micro-batch, built here if need be; with ``ready_only``, when that step is
        not built yet, from the launches of the plain steps built at other batches (when they have the
        same ops: :func:`pardnn.plan.microbound.launch_bound_us`), else ``None``."""
        from pardnn.plan.microbound import MicroBound, launch_bound_us, micro_bound_us

        plain = (batch // micro, 1)
        if micro < 2:
            return None
        if ready_only and not self._ready(plain):
            same = self._same_ops()
            if same is None:
                return None
            batches, terms = same
            launches = terms.kernels + (micro - 1) * terms.repeated_kernels
            return MicroBound(launch_bound_us(terms, micro, devices, self.spec.launch_us),
                              f"{self.spec.launch_us:g} us for each launch of its {launches:,} kernels, over k, or "
                              f"of the {terms.path_kernels:,} on one path; counted in the plain steps at batches "
                              f"{', '.join(map(str, batches))}, which have the same ops")
        terms = self._terms(plain)
        if terms is None:
            return None
        return MicroBound(micro_bound_us(terms, micro, devices),
                          f"from the plain step at batch {plain[0]}: its compute and {micro - 1} x more of each "
                          "micro-batch's, over k, or its critical path")

    def _terms(self, plain: tuple[int, int]) -> Any:
        """The :class:`pardnn.plan.microbound.PlainTerms` of the plain step ``plain`` on this preset
        (built here if need be); ``None`` when its repeated ops are not known."""
        from pardnn.plan.microbound import PlainTerms

        parts = self.built(*plain)
        if parts.repeated is None:
            return None
        if plain not in self.terms:
            self.terms[plain] = PlainTerms.of(parts.graph, parts.repeated, parts.kernel)
        return self.terms[plain]

    def _same_ops(self) -> tuple[list[int], Any] | None:
        """The batches of the plain steps built (on any preset) and their terms, when there are at least
        two and they all have the same op, kernel and repeated-kernel counts; else ``None``."""
        from pardnn.plan.microbound import PlainTerms

        for (_, batch, micro), parts in list(self.parts.items()):
            if micro == 1 and parts.repeated is not None and batch not in self.counts:
                self.counts[batch] = PlainTerms.of(parts.graph, parts.repeated, parts.kernel)
        shapes = {terms.shape for terms in self.counts.values()}
        if len(self.counts) < 2 or len(shapes) != 1:
            return None
        batches = sorted(self.counts)
        return batches, self.counts[batches[0]]

    def stop(self, *, wait: bool = True, cancel: bool = True) -> None:
        """Cancel the builds not started (``cancel``; a broken pool's have failed already) and let the
        workers go (``wait``: until they have)."""
        with self.lock:
            pool, self.pool = self.pool, None
            self.queue.clear()
            self.deferred.clear()
        if pool is not None:
            pool.shutdown(wait=wait, cancel_futures=cancel)
        self.pending.clear()

    def built(self, batch: int, micro: int) -> Any:
        """The step at ``batch`` and ``micro``, built in TensorFlow and costed on this preset, with its parts."""
        if not self._ready((batch, micro)):
            with self.lock:
                handed = (batch, micro) in self.pending
                if (batch, micro) in self.queue:
                    self.queue.remove((batch, micro))
                elif (batch, micro) in self.deferred:
                    self.deferred.remove((batch, micro))
            if handed:
                self._collect(batch, micro)
            else:
                self._build_here(batch, micro)
        return self.parts[self.spec.name, batch, micro]

    def _ready(self, step: tuple[int, int]) -> bool:
        """Whether ``step`` is costed on this preset, or built for another and costed here without a
        build (:func:`recost`; not a step with functional ops, whose costs need a build per preset)."""
        key = (self.spec.name, *step)
        if key in self.parts:
            return True
        other = next((value for (_, b, m), value in self.parts.items() if (b, m) == step), None)
        recosted = None if other is None else recost(other, self.spec)
        if recosted is not None:
            self.parts[key] = recosted
        return recosted is not None

    def _collect(self, batch: int, micro: int) -> None:
        """The pending step, building steps no worker has started while a worker builds it."""
        with self.lock:
            future = self.pending.pop((batch, micro))
        while not future.done():
            with self.lock:
                mine = self.queue.pop(0) if self.queue else None
            if mine is None:
                break
            self._build_here(*mine)
        try:
            parts, seconds = future.result()
        except BrokenProcessPool:
            self.note("a build worker stopped (killed for memory, say, or it ran a script without an "
                      "`if __name__ == \"__main__\":` guard again, as a spawned process does); building the "
                      "remaining steps here")
            self.stop(wait=False, cancel=False)
            self._build_here(batch, micro)
            return
        self._keep(batch, micro, parts, seconds, where=" in a worker")

    def _build_here(self, batch: int, micro: int) -> None:
        self._keep(batch, micro, *build_step(self.job, self.spec.name, batch, micro, self.build), where="")

    def _keep(self, batch: int, micro: int, parts: Any, seconds: float, *, where: str) -> None:
        self.parts[self.spec.name, batch, micro] = parts
        self.seconds += seconds
        self.builds += 1
        self.note(f"built and costed {self.job.name} at batch {batch}, M = {micro}{where}: {parts.graph.n:,} ops, "
                  f"{seconds:.1f} s")

    def graph_for(self, batch: int, micro: int) -> Any:
        """The costed graph of the step at ``batch`` and ``micro`` (M >= 4 from the M = 2 step)."""
        if micro <= 2:
            return self.built(batch, micro).graph
        if (batch, micro) not in self.grown:  # M copies of the M = 2 step of the same micro-batch
            from pardnn.batch.replicate import replicate

            template = self.built(*step_of(batch, micro))
            try:
                self.grown[batch, micro] = replicate(template, micro, self.spec,
                                                     name=f"{self.job.name}-b{batch}-m{micro}")
            except ScalingError as error:  # a model the copies cannot be written down for: build it whole
                self.note(f"{self.job.name} at M = {micro} built whole: {error}")
                self.grown[batch, micro] = self.built(batch, micro).graph
        return self.grown[batch, micro]


def recost(parts: Any, spec: Any) -> Any:
    """``parts`` with every kernel's time on ``spec`` (the estimator's roofline); ``None`` when an op
    that launches no kernel has a time of its own (a functional op's body, which depends on the preset)."""
    graph = parts.graph
    comp_us = np.asarray(graph.comp_us, np.float64)
    if np.any(comp_us[~parts.kernel] > 0):
        return None
    times = np.where(parts.kernel, spec.kernel_us(parts.flops, parts.moved_bytes), 0.0)
    return dataclasses.replace(parts, graph=graph.replace(comp_us=times))


def _picklable(thing: Any) -> bool:
    """Whether a worker can be handed ``thing`` (a module's function can; a test's local stand-in cannot)."""
    try:
        pickle.dumps(thing)
    except (pickle.PicklingError, AttributeError, TypeError):
        return False
    return True
