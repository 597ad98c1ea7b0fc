"""Inter-node bandwidth sweep: step time (compute + communication) of TAPS and each baseline as
the network between hosts gets faster or slower, and where, and why, TAPS changes its plan.

Every point rescales the cluster's network links (NIC to switch) so that one host's NICs add
up to the requested bandwidth, keeping their relative speeds (a degraded NIC stays degraded).

:class:`SweepRun` does the work incrementally so a dashboard can draw while it runs:

- TAPS is searched at every grid point with the Plan page's own search
  (:func:`taps_core.search.planner.search` with its defaults: the framework-seeded search,
  pipeline stages included), and the baselines with :func:`taps_core.search.baselines.compare`
  (the Compare page's), so the sweep at the cluster's own bandwidth (always a point, see
  :func:`sweep_grid`) is the Plan page's plan, unless ``warm_taps`` asks to warm-start it
  like the baselines (slow searches).
- Baselines are *warm-started*: searched at the two ends of the range, and inside it only
  where the plans searched on either side differ. Where they agree, that plan is re-costed at
  the new bandwidth instead (an evaluation, ~20x cheaper than a search). This is exact when
  each plan's time is affine in 1/bandwidth, and it is exact for the volume-based plan, whose
  choice never depends on bandwidth. A pipelined plan is re-costed with its stages, split and
  micro-batches kept (:func:`~taps_core.search.pipeline.recost_pipeline`); its 1F1B step is a
  maximum over stages, so there the warm start approximates a search.
- Between two grid points where TAPS's plan differs, the change is located by bisection in
  log space to a tight interval, and explained in words: first the structure in Megatron-LM's
  terms (:class:`Shape`: TP/PP/DP sizes, ZeRO, recomputation, hosts repeating work), then the
  planner's per-op view (:func:`taps_core.studies.explain.change_words`). Not bisected: a
  tie (the two plans cost the same at one end: the switch is there) and a near tie (one
  structure, within :data:`NEAR_TIE_REL` at both ends). Plans taking the same step at both
  ends are equal-cost twins (e.g. a stage that does not pace the pipeline planned another
  way): :attr:`Sweep.plan_changes` leaves them out, :attr:`Sweep.twin_changes` lists them.

Results are kept per (label, bandwidth), so a later grid reuses every plan already found.
"""

from __future__ import annotations

import itertools
import math
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from taps_core.cluster.topology import Topology, node_inter_bandwidth, scale_inter_bandwidth
from taps_core.errors import InvalidInputError, TapsError, check_positive
from taps_core.ir.graph import OpGraph
from taps_core.plan.records import NotFitting, Plan
from taps_core.plan.report import describe
from taps_core.search.baselines import BASELINES, share_candidates
from taps_core.studies.explain import change_words, op_choice_label, plan_key, replicated_share
from taps_core.studies.shape import Shape, plan_shape, shape_change_words
from taps_core.studies.sweep_jobs import EVERY_PLANNER, TAPS_ONLY, Jobs
from taps_core.units import fmt_seconds

MAX_POINTS = 40
BISECT_RATIO = 1.1  # a change is located once its interval's high/low bandwidth ratio is below
MAX_BISECTIONS = 16  # searches spent locating changes, over the whole sweep
TIE_REL = 1e-9  # plans whose step times agree this closely are equal-cost twins
NEAR_TIE_REL = 1e-3  # same-shape plans this close at both ends of an interval: not bisected


def log_bandwidths(low_Bps: float, high_Bps: float, points: int) -> tuple[float, ...]:
    """``points`` bandwidths evenly spaced in log between ``low_Bps`` and ``high_Bps``."""
    check_positive("low_Bps", low_Bps)
    check_positive("high_Bps", high_Bps)
    if high_Bps < low_Bps:
        raise InvalidInputError("high_Bps", high_Bps, f">= low_Bps ({low_Bps:g})")
    if isinstance(points, bool) or not isinstance(points, int) or not 1 <= points <= MAX_POINTS:
        raise InvalidInputError("points", points, f"an integer between 1 and {MAX_POINTS}")
    if points == 1:
        return (float(low_Bps),)
    return tuple(float(x) for x in np.geomspace(low_Bps, high_Bps, points))


def sweep_grid(
    low_Bps: float, high_Bps: float, points: int, own_Bps: float
) -> tuple[float, ...]:
    """:func:`log_bandwidths` plus the cluster's own bandwidth ``own_Bps`` (always a point,
    even outside the range), ascending, without duplicates (by :func:`bandwidth_key`).

    >>> [round(b / 1e9) for b in sweep_grid(1e9, 400e9, 3, 200e9)]
    [1, 20, 200, 400]
    """
    check_positive("own_Bps", own_Bps)
    found = {bandwidth_key(b): b for b in log_bandwidths(low_Bps, high_Bps, points)}
    found[bandwidth_key(own_Bps)] = float(own_Bps)
    return tuple(found[k] for k in sorted(found))


def coarse_to_fine(n: int) -> list[int]:
    """Indices 0..n-1 with both ends first, then midpoints of ever smaller gaps.

    Drawing points in this order shows the curve's overall shape after a few searches.

    >>> coarse_to_fine(5)
    [0, 4, 2, 1, 3]
    """
    if n <= 0:
        return []
    order = [0] if n == 1 else [0, n - 1]
    gaps = [(0, n - 1)]
    while gaps:
        nxt = []
        for a, b in gaps:
            if b - a > 1:
                m = (a + b) // 2
                order.append(m)
                nxt += [(a, m), (m, b)]
        gaps = nxt
    return order


def reprice(plan: Plan, graph: OpGraph, topology: Topology) -> Plan | None:
    """``plan``'s strategies costed on another ``topology`` of the same shape (a pipeline with
    its stages, split and micro-batches kept, :func:`~taps_core.search.pipeline.recost_pipeline`),
    or None when that is not possible (another cluster shape, or an engine API this code does
    not know)."""
    from taps_core.cluster.links import LinkModel
    from taps_core.plan.evaluate import evaluate
    from taps_core.search.pipeline import recost_pipeline

    if (plan.nodes, plan.gpus_per_node) != (topology.nodes, topology.gpus_per_node):
        return None
    if getattr(plan, "pipeline", None) is not None:
        try:
            return recost_pipeline(plan, graph, LinkModel(topology))
        except (TypeError, AttributeError, KeyError, TapsError):
            return None
    # per-op choices (strategy plus ZeRO stage and recomputation) where the engine has them
    choice = getattr(plan, "choices", None) or plan.strategies
    extra = {"microbatches": plan.microbatches} if hasattr(plan, "microbatches") else {}
    try:
        return evaluate(
            graph,
            LinkModel(topology),
            plan.mode,
            choice,
            label=plan.label,
            cost_model=plan.cost_model,
            search=plan.search,
            memory_limit_bytes=plan.memory_limit_bytes,
            **extra,
        )
    except (TypeError, AttributeError, KeyError, TapsError):
        return None


# ---- results ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Priced:
    """One plan at one bandwidth. Times are seconds per step (None: the plan does not fit).

    ``searched`` is False when a neighbour's plan was re-costed here (see the module notes).
    ``replicated_across`` is the share of compute that every host repeats (no split across
    hosts); ``strategies`` is the strategy label per op, in graph order (with its pipeline stage
    and the micro-batch count: what tells two plans apart); ``shape`` the plan in Megatron-LM
    terms; ``plan`` the plan itself (what ``plan --json`` prints of it). ``bubble_time_s`` is
    a pipelined plan's idle time (0 without stages): total = compute + communication + bubble.
    """

    label: str
    node_bandwidth_Bps: float
    total_time_s: float | None
    compute_time_s: float | None
    comm_time_s: float | None
    inter_node_bytes: float | None
    strategies: tuple[str, ...]
    summary: str
    replicated_across: float = 0.0
    reason: str = ""
    searched: bool = True
    shape: Shape | None = None  # None when it does not fit
    plan: Plan | None = field(default=None, compare=False, repr=False)  # None: does not fit
    bubble_time_s: float | None = None  # s per step; None when it does not fit

    @property
    def fits(self) -> bool:
        return self.total_time_s is not None


@dataclass(frozen=True)
class SweepPoint:
    """Every requested plan at one bandwidth (bytes/s per host, summed over its NICs)."""

    node_bandwidth_Bps: float
    plans: dict[str, Priced]

    @property
    def total_time_s(self) -> dict[str, float | None]:
        return {lb: p.total_time_s for lb, p in self.plans.items()}

    @property
    def comm_time_s(self) -> dict[str, float | None]:
        return {lb: p.comm_time_s for lb, p in self.plans.items()}

    @property
    def reasons(self) -> dict[str, str]:
        return {lb: p.reason for lb, p in self.plans.items() if not p.fits}


@dataclass(frozen=True)
class Change:
    """TAPS's plan changes between ``low_Bps`` and ``high_Bps`` (located by bisection)."""

    low_Bps: float
    high_Bps: float
    words: str
    changed_ops: int
    located: bool  # True once the interval is tight (ratio <= BISECT_RATIO) or out of budget
    structure: str = ""  # the change in Megatron-LM terms (:func:`shape_change_words`)
    twins: bool = False  # the two plans take the same step at both ends: no change of step


@dataclass(frozen=True)
class Regime:
    """Consecutive grid points where TAPS keeps one plan."""

    first: int
    last: int
    low_Bps: float
    high_Bps: float
    summary: str
    replicated_across: float
    shape: Shape | None = None


@dataclass(frozen=True)
class Sweep:
    """A sweep so far: grid points (ascending; None where not computed yet), regimes, changes.

    ``own_Bps`` is the cluster's own bandwidth per host (bytes/s; a grid point when the grid
    came from :func:`sweep_grid`)."""

    labels: tuple[str, ...]
    bandwidths_Bps: tuple[float, ...]
    points: tuple[SweepPoint | None, ...]
    changes: tuple[Change, ...] = ()
    complete: bool = False
    own_Bps: float | None = None

    def is_own(self, bw: float) -> bool:
        """Whether ``bw`` (bytes/s per host) is the cluster's own bandwidth."""
        return self.own_Bps is not None and bandwidth_key(bw) == bandwidth_key(self.own_Bps)

    @property
    def done(self) -> tuple[SweepPoint, ...]:
        return tuple(p for p in self.points if p is not None)

    @property
    def plan_changes(self) -> tuple[Change, ...]:
        """The changes that change the step: all but equal-cost twins (:attr:`Change.twins`:
        plans of one structure taking the same step at both ends, which the search returns
        either of, e.g. a batch split for a sequence split of the same ops)."""
        return tuple(c for c in self.changes if not c.twins)

    @property
    def twin_changes(self) -> tuple[Change, ...]:
        """The intervals where TAPS returns another of equal-cost twins (see
        :attr:`plan_changes`)."""
        return tuple(c for c in self.changes if c.twins)

    @property
    def regimes(self) -> tuple[Regime, ...]:
        """Runs of computed grid points where TAPS keeps one plan, or switches only between
        equal-cost twins (:attr:`twin_changes`: the step does not change there)."""
        out: list[Regime] = []
        for i, p in enumerate(self.points):
            if p is None:
                continue
            taps = p.plans["taps"]
            prev = self.points[out[-1].last] if out else None
            if prev is not None and (
                prev.plans["taps"].strategies == taps.strategies
                or self._twins_between(prev.node_bandwidth_Bps, p.node_bandwidth_Bps)
            ):
                out[-1] = replace(out[-1], last=i, high_Bps=p.node_bandwidth_Bps)
            else:
                out.append(
                    Regime(
                        i,
                        i,
                        p.node_bandwidth_Bps,
                        p.node_bandwidth_Bps,
                        taps.summary,
                        taps.replicated_across,
                        taps.shape,
                    )
                )
        return tuple(out)

    def _twins_between(self, low_Bps: float, high_Bps: float) -> bool:
        """Whether TAPS's plan changes between two bandwidths, and only between twins."""
        inside = [c for c in self.changes if low_Bps <= c.low_Bps and c.high_Bps <= high_Bps]
        return bool(inside) and all(c.twins for c in inside)


# ---- the run -----------------------------------------------------------------------------------


def _priced(label: str, bw: float, plan: Plan | NotFitting, searched: bool) -> Priced:
    if isinstance(plan, NotFitting):
        return Priced(label, bw, None, None, None, None, (), "does not fit", reason=plan.reason)
    return Priced(
        label,
        bw,
        plan.total_time_s,
        plan.compute_time_s,
        plan.comm_time_s,
        plan.inter_node_bytes,
        plan_key(plan),
        describe(plan),
        replicated_share(plan),
        searched=searched,
        shape=plan_shape(plan),
        plan=plan,
        bubble_time_s=plan.bubble_time_s,
    )


def _midpoint(a: float, b: float) -> float:
    """Where an interval of bandwidths is bisected: its middle in log space."""
    return bandwidth_key(math.sqrt(a * b))


def bandwidth_key(bw: float) -> float:
    """The canonical form of a bandwidth (bytes/s): 12 significant digits, so a bandwidth
    computed two ways (a grid point, a bisection midpoint) names the same point."""
    return float(f"{float(bw):.12g}")


@dataclass(frozen=True)
class _Found:
    """The plan at one (label, bandwidth): searched, or a neighbour's re-costed there."""

    plan: Plan | NotFitting
    priced: Priced


class SweepRun:
    """Incremental sweep of one workload on one cluster (thread-safe; reusable across grids).

    Every (label, bandwidth) has one entry, :class:`_Found`, keyed by :func:`bandwidth_key`:
    the plan and its priced figures, searched or re-costed. A complete sweep's TAPS points are
    always searched, so its result does not depend on ``warm_taps`` (nor on the machine's speed,
    which the dashboard uses to choose it): warm-starting only changes what is drawn first.

    Parameters
    ----------
    graph, topology
        The model and the cluster (at least two hosts); only network links are rescaled.
    mode, memory_limit_bytes
        As for :func:`taps_core.search.planner.search`.
    labels
        Plans to cost, among :data:`~taps_core.search.baselines.BASELINES` (``"taps"`` always).
    warm_taps
        Preview TAPS like the baselines: at a grid point whose searched neighbours have the same
        TAPS plan, draw that plan re-costed first, and search the point before the sweep is
        complete (for models whose search takes seconds).
    pipeline
        As for :func:`taps_core.search.planner.search`; the default (None) is the Plan and Compare
        pages' own search, pipeline stages included. At the cluster's own bandwidth the
        cluster is planned as given (not rescaled by a factor of 1), so that point is exactly
        the Plan page's plan.
    workers
        Processes searching at once (:class:`~taps_core.studies.sweep_jobs.Jobs`): with more
        than one, :meth:`fill` starts the grid's searches, and the next bisections', ahead in
        a pool. Every result is the same for any count (each point's plans are a pure function
        of its inputs; only what is drawn first, and when, changes).
    """

    def __init__(
        self,
        graph: OpGraph,
        topology: Topology,
        *,
        mode: str = "train",
        memory_limit_bytes: float | None = None,
        labels: Sequence[str] = BASELINES,
        warm_taps: bool = False,
        pipeline: bool | None = None,
        workers: int = 1,
    ) -> None:
        unknown = [lb for lb in labels if lb not in BASELINES]
        if unknown:
            raise InvalidInputError("labels", unknown, f"a subset of {BASELINES}")
        self.own_Bps = node_inter_bandwidth(topology)  # raises on a single host
        self.graph, self.topology, self.pipeline = graph, topology, pipeline
        self.mode, self.memory_limit_bytes = mode, memory_limit_bytes
        self.labels = ("taps", *(lb for lb in BASELINES if lb in labels and lb != "taps"))
        self.warm_taps = warm_taps
        self._found: dict[tuple[str, float], _Found] = {}
        self._changes: dict[tuple[float, float], Change] = {}
        self._complete: dict[tuple[tuple[float, ...], bool], Sweep] = {}
        self._reprice_ok: dict[bool, bool] = {}  # re-costing checked faithful, by pipelined
        self._lock = threading.RLock()
        self._raw_taps: dict[float, Plan | NotFitting] = {}  # TAPS's own plan per bandwidth
        self._ties: dict[tuple[float, float, int, int], tuple[object, object, bool]] = {}
        # re-costed plans by (id of the plan, kept alive here, and bandwidth), for one fill
        self._repriced: dict[tuple[int, float], tuple[Plan, Plan | None]] = {}
        self._jobs = Jobs(self._job_args, workers)
        self.searches = 0

    # -- planning at one bandwidth --

    def _topology_at(self, bw: float) -> Topology:
        if bandwidth_key(bw) == bandwidth_key(self.own_Bps):
            return self.topology  # exactly the cluster the Plan page plans
        return scale_inter_bandwidth(self.topology, bw)

    def _searched(self, label: str, bw: float) -> bool:
        found = self._found.get((label, bw))
        return found is not None and found.priced.searched

    def _search(self, label: str, bw: float) -> None:
        """Search ``label`` at ``bw`` (baselines through :func:`compare`, which gives all four)."""
        if label == "taps":
            self.searches += 1
            found = self._jobs.get(TAPS_ONLY, bw)
        else:
            self.searches += 4 - (bw in self._raw_taps)
            found = self._jobs.get(EVERY_PLANNER, bw)
        self._raw_taps[bw] = found["taps"]
        if label != "taps":
            found = share_candidates(found)
        for lb, plan in found.items():
            if not self._searched(lb, bw):  # a searched plan is never replaced by a later one
                self._found[(lb, bw)] = _Found(plan, _priced(lb, bw, plan, True))
        self._best_taps(bw)

    def _job_args(self, bw: float, kind: str) -> tuple[object, ...]:
        """:func:`~taps_core.studies.sweep_jobs.plan_point`'s arguments at ``bw``."""
        known = {"taps": self._raw_taps[bw]} if bw in self._raw_taps else None
        return (self.graph, self._topology_at(bw), self.mode, self.memory_limit_bytes,
                self.pipeline, kind, known)

    def _reprice(self, plan: Plan, bw: float, found_at: float) -> Plan | None:
        """``plan`` (found at ``found_at``) costed at ``bw``; None if the engine cannot re-cost
        it faithfully (checked once for plans without stages and once for pipelines: re-costing
        a plan where it was found must agree)."""
        kind = plan.pipeline is not None
        if kind not in self._reprice_ok:
            same = reprice(plan, self.graph, self._topology_at(found_at))
            self._reprice_ok[kind] = same is not None and math.isclose(
                same.total_time_s, plan.total_time_s, rel_tol=1e-9, abs_tol=1e-15
            )
        if not self._reprice_ok[kind]:
            return None
        key = (id(plan), bandwidth_key(bw))  # ties and change records re-cost the same pairs
        if key not in self._repriced:
            self._repriced[key] = (plan, reprice(plan, self.graph, self._topology_at(bw)))
        return self._repriced[key][1]

    def at(self, label: str, bw: float, *, searched: bool = False) -> Priced:
        """``label``'s plan at ``bw``: searched, or (unless ``searched``) a neighbour's re-costed
        where the module notes allow it."""
        return self.found(label, bw, searched=searched).priced

    def found(self, label: str, bw: float, *, searched: bool = False) -> _Found:
        """The one entry for ``label`` at ``bw`` (see :meth:`at`)."""
        bw = bandwidth_key(bw)
        with self._lock:
            key = (label, bw)
            if key in self._found and (self._found[key].priced.searched or not searched):
                return self._found[key]
            if not searched and (label != "taps" or self.warm_taps):
                warm = self._warm(label, bw)
                if warm is not None:
                    self._found[key] = warm
                    return warm
            self._search(label, bw)
            return self._found[key]

    def _warm(self, label: str, bw: float) -> _Found | None:
        """A plan re-costed from the searched plans around ``bw``, when both agree."""
        searched = sorted(b for (lb, b) in self._found if lb == label and self._searched(lb, b))
        left = [b for b in searched if b < bw]
        right = [b for b in searched if b > bw]
        if not left or not right:
            return None
        a, b = self._found[(label, left[-1])].plan, self._found[(label, right[0])].plan
        if isinstance(a, NotFitting) and isinstance(b, NotFitting):
            return _Found(a, _priced(label, bw, a, False))
        if not (isinstance(a, Plan) and isinstance(b, Plan)) or plan_key(a) != plan_key(b):
            return None
        plan = self._reprice(a, bw, left[-1])
        return None if plan is None else _Found(plan, _priced(label, bw, plan, False))

    def _best_taps(self, bw: float) -> None:
        """When the memory limit binds TAPS is not proven optimal: a faster fitting baseline
        plan lies in TAPS's space, so it is TAPS's plan (as :func:`compare` does)."""
        taps = self._found.get(("taps", bw))
        if taps is None or not isinstance(taps.plan, Plan):
            return
        if taps.plan.search.status == "optimal" or not taps.priced.searched:
            return
        best = taps
        for lb in BASELINES[1:]:
            other = self._found.get((lb, bw))
            if (
                other is not None
                and isinstance(other.plan, Plan)
                and other.plan.total_time_s < best.plan.total_time_s - 1e-12
            ):
                plan = replace(other.plan, label="taps")
                priced = replace(
                    other.priced, label="taps", summary=f"{other.priced.summary} (the {lb} plan)"
                )
                best = _Found(plan, replace(priced, searched=True))
        self._found[("taps", bw)] = best

    # -- whole grids --

    def snapshot(self, bandwidths: Sequence[float], *, complete: bool = False) -> Sweep:
        """What is known so far on the grid ``bandwidths`` (ascending)."""
        with self._lock:
            points = []
            for bw in bandwidths:
                key = bandwidth_key(bw)
                plans = {
                    lb: self._found[(lb, key)].priced
                    for lb in self.labels
                    if (lb, key) in self._found
                }
                points.append(SweepPoint(bw, plans) if "taps" in plans else None)
            lo, hi = min(bandwidths, default=0.0), max(bandwidths, default=0.0)
            lo, hi = bandwidth_key(lo), bandwidth_key(hi)
            changes = tuple(c for (a, b), c in sorted(self._changes.items()) if lo <= a and b <= hi)
            return Sweep(
                self.labels, tuple(bandwidths), tuple(points), changes, complete, self.own_Bps
            )

    def fill(self, bandwidths: Sequence[float], *, locate: bool = True) -> Iterator[Sweep]:
        """Compute the grid coarse to fine, then locate TAPS's changes; yield after each step.

        The last snapshot yielded has ``complete=True``; in it every TAPS point is searched.
        """
        for bw in bandwidths:
            check_positive("bandwidths_Bps[]", bw)
        grid = tuple(sorted({bandwidth_key(b) for b in bandwidths}))
        if not grid:
            raise InvalidInputError("bandwidths_Bps", list(bandwidths), "at least one bandwidth")
        if (grid, locate) in self._complete:  # a finished grid: nothing left to plan
            yield self._complete[(grid, locate)]
            return
        try:
            yield from self._fill(grid, locate)
        finally:
            with self._lock:
                self._jobs.close()  # also when the caller stops early (a dashboard rerun)
                self._repriced.clear()  # a grid's worth of whole plans: not kept between grids

    def _fill(self, grid: tuple[float, ...], locate: bool) -> Iterator[Sweep]:
        order = coarse_to_fine(len(grid))
        kind = EVERY_PLANNER if len(self.labels) > 1 else TAPS_ONLY
        with self._lock:  # with a pool: every point's searches started ahead, in drawing order
            for i in order:
                if not all(self._searched(lb, grid[i]) for lb in self.labels):
                    self._jobs.start(kind, grid[i])
        for n, i in enumerate(order):
            bw = grid[i]
            if all((lb, bw) in self._found for lb in self.labels):
                continue
            if n == 0 and len(self.labels) > 1:  # TAPS alone first: something to draw sooner
                self.at("taps", bw)
                yield self.snapshot(grid)
            for lb in reversed(self.labels):  # baselines first: their compare also gives TAPS
                self.at(lb, bw)
            yield self.snapshot(grid)
            if self._jobs.workers > 1:
                self._bisections_ahead(grid)
        for bw in grid:  # previews become searches: the result never depends on warm_taps
            if not self._searched("taps", bw):
                self.at("taps", bw, searched=True)
                yield self.snapshot(grid)
        if locate:
            yield from self._locate(grid)
        final = self.snapshot(grid, complete=True)
        self._complete[(grid, locate)] = final
        yield final

    def _bisections_ahead(self, grid: tuple[float, ...]) -> None:
        """While the grid is planned: start the first bisection of each interval whose two ends
        are searched and will need one (:meth:`_locate` then finds it done or running)."""
        with self._lock:
            ready = [
                (a, b) for a, b in itertools.pairwise(grid)
                if self._searched("taps", a) and self._searched("taps", b)
                and self._strategies(a) != self._strategies(b)
            ]
            self._start_bisections(ready, len(ready))

    def _start_bisections(self, intervals: Sequence[tuple[float, float]], most: int) -> None:
        """Start the midpoint searches of the first ``most`` of ``intervals`` (whose plans
        differ) that :meth:`_locate` will bisect."""
        for a, b in intervals:
            if most <= 0:
                return
            if self._bisects(a, b):
                most -= 1
                m = _midpoint(a, b)
                if not self._searched("taps", m):
                    self._jobs.start(TAPS_ONLY, m)

    def _bisects(self, a: float, b: float) -> bool:
        """Whether an interval whose plans differ is worth bisecting: wider than BISECT_RATIO,
        not a tie (:meth:`_tie`) and not a near tie (:meth:`_near_tie`)."""
        return b / a > BISECT_RATIO and not self._tie(a, b) and self._near_tie(a, b) is None

    def _taps_plan(self, bw: float) -> Plan | NotFitting:
        """TAPS's searched plan at ``bw`` (what changes are located and explained from)."""
        return self.found("taps", bw, searched=True).plan

    def _strategies(self, bw: float) -> tuple[str, ...]:
        return self.at("taps", bw, searched=True).strategies

    def _locate(self, grid: tuple[float, ...]) -> Iterator[Sweep]:
        """Bisect every interval of the grid where TAPS's plan differs, in log space."""
        budget = MAX_BISECTIONS
        pending = [
            (a, b)
            for a, b in itertools.pairwise(grid)
            if self._strategies(a) != self._strategies(b)
        ]
        for a, b in pending:
            if (a, b) not in self._changes:
                self._record(a, b, located=False)
        while pending:
            if self._jobs.workers > 1:  # the next bisections' searches, as many as workers
                with self._lock:
                    self._start_bisections(pending, min(budget, self._jobs.workers))
            a, b = pending.pop(0)
            if budget <= 0 or not self._bisects(a, b):
                self._record(a, b, located=True)
                continue
            m = _midpoint(a, b)
            budget -= 1
            sa, sm, sb = (self._strategies(x) for x in (a, m, b))
            self._changes.pop((a, b), None)
            subs = [(x, y) for x, y, u, v in ((a, m, sa, sm), (m, b, sm, sb)) if u != v]
            for sub in subs:
                self._record(*sub, located=False)
            pending[:0] = subs
            yield self.snapshot(grid)

    def _tie(self, a: float, b: float) -> bool:
        """Whether the plans at ``a`` and ``b`` are equal-cost twins at one end: TAPS's plan at
        ``b`` costs at ``a`` what the plan found there does (the switch is at ``a``), or the
        plan at ``a`` costs at ``b`` what the plan found there does (at ``b``). No search can
        locate such a switch better (memory-bound plans flip between twins often)."""
        return self._tie_at(a, b) is not None

    def _tie_at(self, a: float, b: float) -> float | None:
        """The end of the interval (bandwidth, B/s) where the plans are twins (:meth:`_tie`),
        None when they are not."""
        below, above = self._taps_plan(a), self._taps_plan(b)
        key = (a, b, id(below), id(above))
        if key not in self._ties:  # the plans kept with the answer: their ids stay theirs
            self._ties[key] = (below, above, self._twins(a, b))
        return self._ties[key][2]

    def _twins(self, a: float, b: float) -> float | None:
        """:meth:`_tie_at`, computed."""
        for at, moved_s, there_s in self._crossed(a, b):
            if moved_s is not None and math.isclose(moved_s, there_s, rel_tol=TIE_REL,
                                                    abs_tol=0.0):
                return at
        return None

    def _crossed(self, a: float, b: float) -> tuple[tuple[float, float | None, float], ...]:
        """At each end of an interval (``a`` first): the bandwidth, the step of the plan
        found at the other end re-costed there (None if it cannot be) and the step of the
        plan found there, in seconds; empty unless both ends have a plan."""
        below, above = self._taps_plan(a), self._taps_plan(b)
        if not (isinstance(below, Plan) and isinstance(above, Plan)):
            return ()
        out = []
        for plan, found_at, at, there in ((above, b, a, below), (below, a, b, above)):
            moved = self._reprice(plan, at, found_at)
            out.append((at, None if moved is None else moved.total_time_s, there.total_time_s))
        return tuple(out)

    def _near_tie(self, a: float, b: float) -> float | None:
        """The largest relative step difference between TAPS's plans at ``a`` and ``b`` when
        they have the same Megatron-LM structure and each, re-costed at the other end, is
        within :data:`NEAR_TIE_REL` of the plan found there; else None. Where the switch
        between such plans lies changes the step by less than that at either end (and, step
        times being close to affine in 1/bandwidth, in between), so no search locates it."""
        crossed = self._crossed(a, b)
        if not crossed or any(moved_s is None for _, moved_s, _ in crossed):
            return None
        below, above = self._taps_plan(a), self._taps_plan(b)
        if shape_change_words(plan_shape(below), plan_shape(above)):
            return None
        worst = max(abs(moved_s - there_s) / there_s for _, moved_s, there_s in crossed)
        return worst if worst <= NEAR_TIE_REL else None

    def _record(self, a: float, b: float, *, located: bool) -> None:
        below, above = self._taps_plan(a), self._taps_plan(b)
        if isinstance(below, Plan) and isinstance(above, Plan):
            above_at_a = self._reprice(above, a, b)
            structure = shape_change_words(plan_shape(below), plan_shape(above))
            words = change_words(below, above, a, b, above_at_low=above_at_a)
            tie = self._tie_at(a, b)
            near = self._near_tie(a, b)
            lead = ""
            twins = near is not None and near <= TIE_REL
            if twins:
                lead = (
                    f"Equal-cost twins, no change of step: at {a / 1e9:.3g} and "
                    f"{b / 1e9:.3g} GB/s per host both plans take the same step, so TAPS "
                    "returns either."
                )
            elif tie is not None:
                lead = (
                    f"A tie: at {tie / 1e9:.3g} GB/s per host both plans take the same step "
                    f"({fmt_seconds(below.total_time_s if tie == a else above.total_time_s)}), "
                    "so TAPS may return either there (equal-cost twins)."
                )
            elif near is not None:
                lead = (
                    f"A near tie, not located: the two plans are within {near:.2%} of each "
                    "other at both ends, so where TAPS switches hardly changes the step."
                )
            located = located or near is not None  # as close as it matters (:meth:`_near_tie`)
            # the structure first: the page shows it as the change's headline
            words = " ".join(x for x in (structure, lead, words) if x)
            changed = sum(
                op_choice_label(x) != op_choice_label(y) for x, y in zip(below.ops, above.ops)
            )
        else:
            fits = "fits" if isinstance(below, Plan) else "does not fit"
            words = f"below {a / 1e9:.3g} GB/s per host TAPS {fits}; above {b / 1e9:.3g} it " + (
                "fits" if isinstance(above, Plan) else "does not fit"
            )
            changed, structure, twins = 0, "", False
        self._changes[(a, b)] = Change(a, b, words, changed, located, structure, twins)


def sweep_inter_bandwidth(
    graph: OpGraph,
    topology: Topology,
    bandwidths_Bps: Sequence[float],
    *,
    mode: str = "train",
    memory_limit_bytes: float | None = None,
    labels: Sequence[str] = BASELINES,
    locate: bool = True,
    pipeline: bool | None = None,
    workers: int = 1,
) -> Sweep:
    """The whole sweep at once (see :class:`SweepRun`); every point's plans are in
    ``Priced.plan``.

    Raises
    ------
    InvalidInputError
        On a single-host topology, an unknown label or no bandwidths.
    """
    run = SweepRun(
        graph, topology, mode=mode, memory_limit_bytes=memory_limit_bytes, labels=labels,
        pipeline=pipeline, workers=workers,
    )
    last = None
    for last in run.fill(bandwidths_Bps, locate=locate):  # noqa: B007 - the final snapshot
        pass
    assert last is not None
    return last
