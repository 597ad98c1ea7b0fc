"""The searches of a sweep as jobs: every grid point's plans are a pure function of its inputs,
so they can be computed ahead, in worker processes, without changing any result.

:func:`plan_point` is the unit of work: TAPS alone (:func:`taps_core.search.planner.search`) or
every planner (:func:`taps_core.search.baselines.compare` before candidate sharing; its TAPS
plan is the same search). :class:`Jobs` runs them inline (one worker) or in worker processes
(several; :mod:`taps_core.studies.sweep_worker`), keyed by (kind, bandwidth): in the pool a job
asked for twice runs once, and a TAPS plan is taken from an every-planner job at the same
bandwidth when one was started (the caller keeps what it was given: inline, nothing is kept).
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import threading
from collections.abc import Callable
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from pathlib import Path

from taps_core.cluster.topology import Topology
from taps_core.errors import InvalidInputError, TapsError
from taps_core.ir.graph import OpGraph
from taps_core.plan.records import NotFitting, Plan
from taps_core.search.baselines import compare
from taps_core.search.planner import search

TAPS_ONLY, EVERY_PLANNER = "taps", "every"
MAX_WORKERS = 32  # processes a sweep may start (each holds a search's tables)
Planned = dict[str, Plan | NotFitting]


def plan_point(
    graph: OpGraph,
    topology: Topology,
    mode: str,
    memory_limit_bytes: float | None,
    pipeline: bool | None,
    kind: str,
    known: Planned | None = None,
) -> Planned:
    """Each planner's own plan at one cluster: ``{"taps": ...}`` for :data:`TAPS_ONLY`, every
    planner for :data:`EVERY_PLANNER` (a TAPS search that fails is a NotFitting, as a
    baseline's is); ``known``: plans already found for these inputs, not searched again."""
    if kind == TAPS_ONLY:
        try:
            return {"taps": search(graph, topology, mode=mode,
                                   memory_limit_bytes=memory_limit_bytes, pipeline=pipeline)}
        except TapsError as err:
            return {"taps": NotFitting("taps", str(err))}
    return compare(graph, topology, mode=mode, memory_limit_bytes=memory_limit_bytes,
                   pipeline=pipeline, known=known, share=False)


def check_workers(field: str, workers: object) -> int:
    """``workers`` after checking it is an integer from 1 to :data:`MAX_WORKERS` (``field``:
    the name the caller knows it by, e.g. ``--workers``)."""
    if isinstance(workers, bool) or not isinstance(workers, int) or not (
        1 <= workers <= MAX_WORKERS
    ):
        raise InvalidInputError(field, workers, f"an integer from 1 to {MAX_WORKERS}")
    return workers


def default_workers() -> int:
    """Worker processes worth starting here: the cores this process may use, at most 4."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, min(4, cores))


class Jobs:
    """Plans per (kind, bandwidth in B/s), computed once each: inline with one worker, else in
    a pool of ``workers`` processes started on first use (:meth:`close` stops it; a later job
    starts a new one). ``job(bw, kind)`` gives the arguments of :func:`plan_point` for ``bw``.
    """

    def __init__(self, job: Callable[[float, str], tuple[object, ...]], workers: int = 1) -> None:
        self._job, self.workers = job, check_workers("workers", workers)
        self._pool: _ProcessPool | None = None
        self._futures: dict[tuple[str, float], Future[Planned]] = {}

    def start(self, kind: str, bw: float) -> None:
        """Start the job in the pool (no-op inline, or when it is started already)."""
        if self.workers > 1 and not self._has(kind, bw):
            self._submit(kind, bw)

    def get(self, kind: str, bw: float) -> Planned:
        """The job's plans (waits for a started one; runs it here when there is no pool)."""
        if kind == TAPS_ONLY and (EVERY_PLANNER, bw) in self._futures:
            try:
                every = self._result(EVERY_PLANNER, bw)
            except TapsError:  # the TAPS search alone reports its own failure, as a NotFitting
                every = None
            if every is not None:
                return {"taps": every["taps"]}
        if (kind, bw) not in self._futures and self.workers > 1:
            self._submit(kind, bw)
        found = self._result(kind, bw)
        if found is None:  # no pool, or it was stopped under the job: run it here
            found = plan_point(*self._job(bw, kind))  # type: ignore[arg-type]
        return found

    def _result(self, kind: str, bw: float) -> Planned | None:
        """A started job's plans; None when it was not started or its pool went away
        (another caller's :meth:`close` cancels queued jobs). Errors of the job are raised."""
        future = self._futures.get((kind, bw))
        if future is None:
            return None
        try:
            return future.result()
        except (CancelledError, WorkerGoneError):
            del self._futures[(kind, bw)]
            return None

    def close(self) -> None:
        """Stop the pool: queued jobs are dropped (asked again, they run again), running ones
        finish in their process; results already in are kept."""
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None
        self._futures = {k: f for k, f in self._futures.items() if f.done() and not f.cancelled()}

    def _has(self, kind: str, bw: float) -> bool:
        return (kind, bw) in self._futures or (kind == TAPS_ONLY and (EVERY_PLANNER, bw) in
                                               self._futures)

    def _submit(self, kind: str, bw: float) -> None:
        if self._pool is None:
            self._pool = _ProcessPool(self.workers)
        self._futures[(kind, bw)] = self._pool.submit(self._job(bw, kind))


class WorkerGoneError(Exception):
    """A worker process stopped under a job (its pool was closed, or it died)."""


class _ProcessPool:
    """``workers`` threads, each feeding one worker process
    (:mod:`taps_core.studies.sweep_worker`) a job at a time through pipes."""

    def __init__(self, workers: int) -> None:
        self._threads = ThreadPoolExecutor(workers, thread_name_prefix="sweep-worker")
        self._local = threading.local()
        self._procs: list[subprocess.Popen[bytes]] = []
        self._lock = threading.Lock()

    def submit(self, args: tuple[object, ...]) -> Future[Planned]:
        return self._threads.submit(self._run, args)

    def shutdown(self) -> None:
        """Queued jobs cancelled; each process exits once its running job is answered."""
        self._threads.shutdown(wait=False, cancel_futures=True)
        with self._lock:
            for proc in self._procs:
                if proc.stdin is not None and not proc.stdin.closed:
                    proc.stdin.close()
            self._procs = []

    def _run(self, args: tuple[object, ...]) -> Planned:
        proc = getattr(self._local, "proc", None)
        if proc is None or proc.poll() is not None:
            proc = self._local.proc = self._start()
        assert proc.stdin is not None and proc.stdout is not None
        try:
            pickle.dump(args, proc.stdin, protocol=pickle.HIGHEST_PROTOCOL)
            proc.stdin.flush()
            status, value = pickle.load(proc.stdout)
        except (OSError, EOFError, ValueError, TypeError, pickle.UnpicklingError) as err:
            raise WorkerGoneError(str(err)) from None
        if status == "error":
            raise value  # type: ignore[misc]
        return value  # type: ignore[no-any-return]

    def _start(self) -> subprocess.Popen[bytes]:
        root = str(Path(__file__).resolve().parents[2])  # the folder holding taps_core
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(x for x in (root, env.get("PYTHONPATH")) if x)
        # the workers share the cores already: one thread each (the min-plus product would
        # otherwise spread its rows over cores another worker is using: 1.6x slower, measured)
        env["NUMBA_NUM_THREADS"] = "1"
        proc = subprocess.Popen(
            [sys.executable, "-m", "taps_core.studies.sweep_worker"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
        )
        with self._lock:
            self._procs.append(proc)
        return proc
