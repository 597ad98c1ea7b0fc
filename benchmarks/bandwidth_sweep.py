"""Bandwidth sweep: the four plans as the inter-node NIC bandwidth goes from 1 to 400 GB/s.

Each point is a 4-node cluster built like the dgx-a100 preset (NVSwitch 300 GB/s per direction,
8 NICs per node, PCIe Gen4 32 GB/s from each GPU to its NIC) with every NIC at the point's
bandwidth. Training is used when the model fits, inference otherwise. Where TAPS's plan differs
between two neighbouring points, TAPS alone narrows down the switch bandwidth: first two searches
just beside where the two plans' re-costed steps cross (enough when the change is that crossover),
then bisection; the ops whose strategy changed are listed in words. A change where one end's
plan, re-costed at the other end, beats the unproven search's plan there is reported and not
narrowed down (:func:`search_missed`), and so is a *rearrangement*: both ends share their
structure in Megatron terms (TP / PP / DP sizes, ZeRO stage, micro-batches, which kinds of
recomputation) and only move some ops between equal-shaped splits (:func:`structure`), as
memory-bound plans do from point to point; bisecting those spent most of the sweep's time.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from benchmarks.config import BenchConfig, workload
from benchmarks.plan_quality import op_group
from taps_core.cluster.links import LinkModel
from taps_core.cluster.topology import A100_80GB, Topology, build_cluster
from taps_core.errors import TapsError
from taps_core.ir.graph import OpGraph
from taps_core.models import build_graph
from taps_core.plan.evaluate import evaluate
from taps_core.plan.records import NotFitting, Plan, SearchInfo
from taps_core.plan.report import describe, strategy_words
from taps_core.search.baselines import BASELINES, share_candidates
from taps_core.search.planner import search
from taps_core.studies.shape import plan_shape
from taps_core.studies.sweep_jobs import EVERY_PLANNER, Jobs, default_workers

PRESET_NIC_Bps = 25e9  # dgx-a100: 8 x HDR 200 Gb/s


def cluster(nodes: int, nic_Bps: float) -> Topology:
    """The dgx-a100 preset's cluster with every NIC at ``nic_Bps`` (bytes/s per direction)."""
    return build_cluster(
        nodes,
        8,
        name=f"dgx-a100-like:{nodes} @ NIC {nic_Bps / 1e9:.3g} GB/s",
        gpu=A100_80GB,
        intra_bandwidth_Bps=300e9,
        nics_per_node=8,
        nic_bandwidth_Bps=nic_Bps,
        pcie_bandwidth_Bps=32e9,
    )


@dataclass
class SweepPoint:
    nic_Bps: float
    comm_s: dict[str, float | None]
    total_s: dict[str, float | None]
    taps_summary: str
    compare_s: float  # seconds waited for the point's plans (points run side by side)
    taps_status: str = ""  # optimal, or feasible when the memory limit binds
    taps_bound_gap_s: float | None = None  # step time above the Lagrangian lower bound
    taps_inter_bytes: float | None = None  # bytes TAPS's plan sends across nodes per step


@dataclass
class Change:
    """TAPS's plan changes between ``low_Bps`` (old plan) and ``high_Bps`` (new plan).

    ``gap_s`` is how much slower (step time) the old plan would be at ``high_Bps``; a change
    with a gap within rounding (``tie``) is a flip between equal-cost plans, not a real switch.
    A negative gap means the new plan is *worse* than the old one (which still fits): the
    memory-limited search missed a better plan there.
    """

    low_Bps: float
    high_Bps: float
    before: str
    after: str
    ops: list[dict[str, object]]  # op group, count, old words, new words
    changed_ops: int
    gap_s: float
    tie: bool
    after_status: str = ""  # search status of the new plan (optimal / feasible)
    missed_s: float = 0.0  # > 0: not narrowed down, the search missed this much at one end
    rearranged: bool = False  # same structure at both ends (:func:`structure`); seen at the
    # grid's two points it is not narrowed, found by a bisection it keeps its bracket
    budget_out: bool = False  # the sweep's locating searches ran out before it was narrowed


@dataclass
class SweepResult:
    """One sweep; ``changes`` includes ties (see :class:`Change`)."""

    model: str
    mode: str
    nodes: int
    batch: int
    points: list[SweepPoint]
    changes: list[Change]
    volume_plan_constant: bool
    reasons: dict[str, str] = field(default_factory=dict)
    wall_s: float = 0.0


TIE_REL = 1e-9


def step_time_at(graph: OpGraph, plan: Plan, nodes: int, nic_Bps: float) -> float:
    """Step time of ``plan``'s strategies on the cluster with NICs at ``nic_Bps``."""
    links = LinkModel(cluster(nodes, nic_Bps))
    micro = plan.workload.get("micro_batch_size")
    cfg = graph.meta["config"]
    if micro is not None and micro != cfg.batch_size:
        graph = build_graph(cfg.with_workload(batch_size=int(micro)))
    again = evaluate(
        graph,
        links,
        plan.mode,
        plan.choices,
        label=plan.label,
        cost_model="topology",
        search=SearchInfo("manual", 0.0, 0),
        memory_limit_bytes=plan.memory_limit_bytes,
        microbatches=plan.microbatches,
    )
    return again.total_time_s


def _search_state(plan: Plan) -> tuple[str, float | None, float]:
    bound = plan.search.lower_bound_s
    gap = None if bound is None else plan.total_time_s - bound
    return plan.search.status, gap, plan.inter_node_bytes


def _signature(plan: Plan) -> tuple[str, ...]:
    return tuple(op.strategy.label() for op in plan.ops)


def diff(old: Plan, new: Plan) -> list[dict[str, object]]:
    """Ops whose strategy differs, grouped by layer-relative name and by the change itself."""
    changes: Counter[tuple[str, str, str]] = Counter()
    for a, b in zip(old.ops, new.ops):
        if a.strategy != b.strategy:
            changes[
                (op_group(a.name, a.layer), strategy_words(a.strategy), strategy_words(b.strategy))
            ] += 1
    return [
        {"op": op, "count": n, "before": before, "after": after}
        for (op, before, after), n in sorted(changes.items(), key=lambda kv: (-kv[1], kv[0]))
    ]


def _taps(graph: OpGraph, nodes: int, mode: str, nic_Bps: float) -> Plan | None:
    try:
        return search(graph, cluster(nodes, nic_Bps), mode=mode, pipeline=False)
    except TapsError:
        return None


def pick_mode(graph: OpGraph, nodes: int) -> tuple[str, str]:
    """("train", "") when TAPS finds a training plan that fits at the preset NIC speed, else
    ("infer", why training does not fit). Memory does not depend on bandwidth."""
    try:
        search(graph, cluster(nodes, PRESET_NIC_Bps), mode="train", pipeline=False)
    except TapsError as err:
        return "infer", str(err)
    return "train", ""


def locate(
    graph: OpGraph,
    nodes: int,
    mode: str,
    lo: tuple[float, Plan],
    hi: tuple[float, Plan],
    steps: int,
    budget: list[int] | None = None,
) -> list[Change]:
    """Every plan change between two sweep points, each narrowed by ``steps`` bisections;
    ``budget``: searches left for locating (shared by the sweep's intervals, decremented; a
    change met when it is spent keeps the bracket reached, marked ``budget_out``)."""
    out: list[Change] = []
    (lo_bw, lo_plan), (hi_bw, hi_plan) = lo, hi
    left_searches = budget if budget is not None else [1 << 30]
    refused: list[bool] = []  # a search the budget refused while narrowing this change

    def probe(bw: float) -> Plan | None:
        """TAPS's plan at ``bw``, or None when none fits or the budget is spent."""
        if left_searches[0] <= 0:
            refused.append(True)
            return None
        left_searches[0] -= 1
        return _taps(graph, nodes, mode, bw)

    while _signature(lo_plan) != _signature(hi_plan) and len(out) < 4:
        refused.clear()
        a_bw, b_bw, b_plan = lo_bw, hi_bw, hi_plan
        # equal-cost twins at the low end: the switch is there, no bisection can place it better
        at_lo = step_time_at(graph, hi_plan, nodes, lo_bw)
        twins = abs(at_lo - lo_plan.total_time_s) <= TIE_REL * lo_plan.total_time_s
        at_hi = step_time_at(graph, lo_plan, nodes, hi_bw)
        if not twins and abs(at_hi - hi_plan.total_time_s) <= TIE_REL * hi_plan.total_time_s:
            # twins at the high end: the plan below is as fast there, the flip is at hi_bw
            out.append(Change(hi_bw, hi_bw, describe(lo_plan), describe(hi_plan),
                              diff(lo_plan, hi_plan), _changed(lo_plan, hi_plan),
                              at_hi - hi_plan.total_time_s, True, hi_plan.search.status))
            break
        missed = search_missed(lo_plan, at_lo, hi_plan, at_hi)
        moved = not twins and not missed and structure(lo_plan) == structure(hi_plan)
        if not twins and (missed > 0 or moved):  # reported between the points, not narrowed
            gap = at_hi - hi_plan.total_time_s
            out.append(Change(lo_bw, hi_bw, describe(lo_plan), describe(hi_plan),
                              diff(lo_plan, hi_plan), _changed(lo_plan, hi_plan), gap,
                              moved and abs(gap) <= TIE_REL * hi_plan.total_time_s,
                              hi_plan.search.status, missed, rearranged=moved))
            break
        left = 0 if twins else steps
        if not twins:  # two searches beside where the two plans' costs cross, when they do
            a_bw, b_bw, b_plan, left = _around_crossover(
                graph, nodes, lo_plan, (a_bw, b_bw, b_plan), steps, probe
            )
        for _ in range(left):
            mid = float(np.sqrt(a_bw * b_bw))
            plan = probe(mid)
            if plan is None:
                break
            if _signature(plan) == _signature(lo_plan):
                a_bw = mid
            else:
                b_bw, b_plan = mid, plan
        changed = _changed(lo_plan, b_plan)
        gap = (lo_plan.total_time_s - at_lo if twins
               else step_time_at(graph, lo_plan, nodes, b_bw) - b_plan.total_time_s)
        tie = twins or abs(gap) <= TIE_REL * b_plan.total_time_s
        out.append(
            Change(
                a_bw,
                b_bw,
                describe(lo_plan),
                describe(b_plan),
                diff(lo_plan, b_plan),
                changed,
                gap,
                tie,
                b_plan.search.status,
                # the bracket found may hold a plan of the old structure: then a rearrangement
                rearranged=not tie and structure(lo_plan) == structure(b_plan),
                budget_out=bool(refused),
            )
        )
        lo_bw, lo_plan = b_bw, b_plan  # a further change may lie between here and hi
    return out


def structure(plan: Plan) -> tuple[object, ...]:
    """A plan's structure in Megatron terms: TP / PP / DP sizes (and how many of each cross
    hosts), ZeRO stage, micro-batches, and whether it recomputes whole layers or attention
    cores. Two plans alike here differ only in which equal-shaped split some ops take."""
    s = plan_shape(plan)
    return (s.tp, s.tp_across, s.pp, s.dp, s.dp_across, s.zero, s.microbatches,
            s.recompute > 0, s.selective > 0)


def search_missed(lo_plan: Plan, at_lo_s: float, hi_plan: Plan, at_hi_s: float) -> float:
    """Seconds per step the search missed at one end of an interval: the other end's plan
    re-costed there (``at_lo_s``: ``hi_plan`` at the low end; ``at_hi_s``: ``lo_plan`` at
    the high end) is faster than the plan the search returned, which is not proven optimal
    (memory binds and its gap stands). 0 when each plan is the faster at its own end. Such a
    change is not a switch of the best plan, only of where the unproven search stops, so it is
    reported, not narrowed down (bisecting it spent most of the sweep's time)."""
    missed = 0.0
    for plan, other_s in ((lo_plan, at_lo_s), (hi_plan, at_hi_s)):
        if plan.search.status != "optimal" and other_s < plan.total_time_s * (1 - TIE_REL):
            missed = max(missed, plan.total_time_s - other_s)
    return missed


def crossover(
    graph: OpGraph, nodes: int, below: Plan, above: Plan, lo_Bps: float, hi_Bps: float
) -> float | None:
    """The NIC bandwidth (bytes/s) in ``[lo_Bps, hi_Bps]`` where the two fixed plans cost the
    same, ``below`` no slower at ``lo_Bps`` and ``above`` no slower at ``hi_Bps``; None when
    their costs do not cross there. Re-costing only, no search: a step is close to affine in
    1 / bandwidth, so regula falsi in that variable (Illinois) lands in a few evaluations."""

    def gap(u: float) -> float:  # below's step minus above's at bandwidth 1 / u
        return step_time_at(graph, below, nodes, 1 / u) - step_time_at(graph, above, nodes, 1 / u)

    u_lo, u_hi = 1 / hi_Bps, 1 / lo_Bps  # u ascending: hi_Bps first
    g_lo, g_hi = gap(u_lo), gap(u_hi)
    if not (g_lo >= 0 >= g_hi) or g_lo == g_hi:
        return None
    side, scale = 0, g_lo - g_hi
    for _ in range(CROSSOVER_STEPS):
        u = (u_lo * g_hi - u_hi * g_lo) / (g_hi - g_lo)
        g = gap(u)
        if abs(g) <= 1e-9 * scale or u_hi / u_lo < 1 + 1e-6:
            return 1 / u
        if g > 0:
            u_lo, g_lo = u, g
            g_hi = g_hi / 2 if side == 1 else g_hi
            side = 1
        else:
            u_hi, g_hi = u, g
            g_lo = g_lo / 2 if side == -1 else g_lo
            side = -1
    return 2 / (u_lo + u_hi)


CROSSOVER_STEPS = 8  # regula falsi steps of :func:`crossover` (two or three suffice when affine)


def _around_crossover(
    graph: OpGraph,
    nodes: int,
    lo_plan: Plan,
    bracket: tuple[float, float, Plan],
    steps: int,
    probe: Callable[[float], Plan | None],
) -> tuple[float, float, Plan, int]:
    """Narrow ``bracket`` (low bandwidth with ``lo_plan``, high bandwidth and its plan) with
    two searches just beside the crossover of the two plans' costs, at the resolution
    ``steps`` bisections would reach (``probe(bw)``: TAPS's plan there, or None). Returns the
    new bracket and the bisection steps still to run: none when the two searches straddle the
    change (so 2 searches instead of ``steps``); the bracket stays correct whatever the
    searches return."""
    a_bw, b_bw, b_plan = bracket
    x = crossover(graph, nodes, lo_plan, b_plan, a_bw, b_bw)
    if x is None or steps < 2:
        return a_bw, b_bw, b_plan, steps
    half = (b_bw / a_bw) ** (0.5 ** (steps + 1))  # half the ratio ``steps`` bisections leave
    below_x, above_x = max(a_bw, x / half), min(b_bw, x * half)
    first = probe(below_x)
    if first is None:
        return a_bw, b_bw, b_plan, steps - 1
    if _signature(first) != _signature(lo_plan):
        return a_bw, below_x, first, steps - 1  # the change lies below the crossover
    second = probe(above_x)
    if second is None:
        return below_x, b_bw, b_plan, steps - 2
    if _signature(second) != _signature(lo_plan):
        return below_x, above_x, second, 0  # located
    return above_x, b_bw, b_plan, steps - 2


def _changed(a: Plan, b: Plan) -> int:
    """How many ops two plans of the same graph run differently."""
    return sum(x.strategy != y.strategy for x, y in zip(a.ops, b.ops))


def run(cfg: BenchConfig, log: Callable[[str], None] = print) -> list[SweepResult]:
    """Every sweep of ``cfg``."""
    return [sweep(model, nodes, cfg, log) for model, nodes in cfg.sweeps]


def sweep(
    model: str, nodes: int, cfg: BenchConfig, log: Callable[[str], None] = print
) -> SweepResult:
    """One model on ``nodes`` nodes over the NIC bandwidth grid of ``cfg``."""
    start = time.perf_counter()
    graph, batch, _ = workload(model, nodes)
    grid = [float(x) for x in np.geomspace(cfg.sweep_low_Bps, cfg.sweep_high_Bps, cfg.sweep_points)]
    mode, why = pick_mode(graph, nodes)
    reasons = {"train": why} if why else {}
    points: list[SweepPoint] = []
    taps_plans: list[Plan | None] = []
    volume_sigs: set[tuple[str, ...]] = set()
    # every point's plans are a pure function of its cluster: all computed ahead in worker
    # processes (the product's sweep jobs), the same plans as compare() one by one
    jobs = Jobs(lambda bw, kind: (graph, cluster(nodes, bw), mode, None, False, kind),
                workers=default_workers())
    for bw in grid:
        jobs.start(EVERY_PLANNER, bw)
    waited: list[tuple[dict[str, Plan | NotFitting], float]] = []
    try:
        for bw in grid:  # seconds waited per point (the workers run side by side)
            t0 = time.perf_counter()
            waited.append((share_candidates(jobs.get(EVERY_PLANNER, bw)),
                           time.perf_counter() - t0))
    finally:
        jobs.close()
    for bw, (plans, elapsed) in zip(grid, waited):
        for label, p in plans.items():
            if isinstance(p, NotFitting):
                reasons.setdefault(label, p.reason)
        taps, volume = plans["taps"], plans["volume"]
        if isinstance(volume, Plan):
            volume_sigs.add(_signature(volume))
        points.append(
            SweepPoint(
                bw,
                {lb: p.comm_time_s if isinstance(p, Plan) else None for lb, p in plans.items()},
                {lb: p.total_time_s if isinstance(p, Plan) else None for lb, p in plans.items()},
                describe(taps) if isinstance(taps, Plan) else "does not fit",
                elapsed,
                *(_search_state(taps) if isinstance(taps, Plan) else ("", None, None)),
            )
        )
        taps_plans.append(taps if isinstance(taps, Plan) else None)
        shown = f"{taps.comm_time_s:.4g} s" if isinstance(taps, Plan) else "n/a"
        log(f"sweep {model} NIC {bw / 1e9:.3g} GB/s: TAPS comm {shown} ({elapsed:.1f} s)")
    changes: list[Change] = []
    budget = [cfg.sweep_locate_searches]
    for i in range(1, len(grid)):
        lo_plan, hi_plan = taps_plans[i - 1], taps_plans[i]
        if lo_plan is None or hi_plan is None:
            continue
        found = locate(
            graph,
            nodes,
            mode,
            (grid[i - 1], lo_plan),
            (grid[i], hi_plan),
            cfg.sweep_refine_steps,
            budget,
        )
        for ch in found:
            log(
                f"sweep {model}: TAPS changes plan{' (tie)' if ch.tie else ''} between "
                f"{ch.low_Bps / 1e9:.3g} and {ch.high_Bps / 1e9:.3g} GB/s ({ch.changed_ops} ops)"
                + (f"; not narrowed: the search missed {ch.missed_s:.3g} s at one end"
                   if ch.missed_s else "")
            )
        changes += found
    return SweepResult(
        model,
        mode,
        nodes,
        batch,
        points,
        changes,
        len(volume_sigs) <= 1,
        {k: v for k, v in reasons.items() if k in (*BASELINES, "train")},
        time.perf_counter() - start,
    )
