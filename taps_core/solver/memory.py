"""A memory limit over live ranges (the IOPDDL constraint): ILP when it fits, else Lagrangian.

Each node ``v`` is live over the time steps ``[lo_v, hi_v)`` and its strategy ``s`` uses
``usage_v(s)`` there; at every time step the usage of the live nodes must stay within
``limit``. Times are compressed into *segments* between consecutive interval ends (the live
set is constant inside one). A segment is *tight* when the largest possible usage there
exceeds the limit; only nodes live in a tight segment whose usage depends on the strategy are
*relevant*. Everything else is eliminated exactly first (:mod:`~taps_core.solver.reduction`).

Then:
1. the ILP with one row per tight segment, on the problem with only its leaves folded in,
   when it is small enough (exact, or HiGHS's best with its dual bound at the time limit);
2. otherwise (and to improve an unfinished ILP), the unconstrained optimum (a lower bound and,
   repaired, a first answer), then Lagrangian relaxation
   (:class:`~taps_core.solver.lagrangian.LagrangianSearch`).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from taps_core.solver.elimination import solve
from taps_core.solver.factors import Budget
from taps_core.solver.kernel import (
    RangeRows,
    ilp_size,
    solve_ilp,
)
from taps_core.solver.lagrangian import LagrangianSearch
from taps_core.solver.problem import CostGraph, Solution
from taps_core.solver.reduction import Reduced, reduce_problem

ILP_MAX_NONZEROS = 4_000_000  # memory-limited ILPs larger than this go to the Lagrangian


@dataclass(frozen=True)
class LiveMemory:
    """Per-strategy usage (any unit, e.g. bytes) of each node over its live range, and the
    limit that the live nodes' usage must respect at every time step."""

    usage: dict[str, np.ndarray]
    interval: dict[str, tuple[int, int]]  # live at time steps lo..hi-1 (empty when lo >= hi)
    limit: float


@dataclass
class _Segments:
    """Compressed time: node i is live over segments ``[first[i], last[i])``."""

    first: np.ndarray
    last: np.ndarray
    count: int

    def profile(self, per_node: np.ndarray) -> np.ndarray:
        """Sum of ``per_node`` over the live nodes of every segment."""
        diff = np.zeros(self.count + 1)
        np.add.at(diff, self.first, per_node)
        np.add.at(diff, self.last, -per_node)
        return np.cumsum(diff)[: self.count]


def segments(lo: np.ndarray, hi: np.ndarray) -> _Segments:
    """Compress time steps into segments between consecutive interval ends (``lo``/``hi``:
    each node's live range ``[lo, hi)``; empty ranges live nowhere)."""
    live = hi > lo
    cuts = np.unique(np.concatenate([lo[live], hi[live]]))
    first = np.where(live, np.searchsorted(cuts, lo), 0)
    last = np.where(live, np.searchsorted(cuts, hi), 0)
    return _Segments(first, last, max(len(cuts) - 1, 0))


def memory_profile(problem: CostGraph, mem: LiveMemory, choice: dict[str, int]) -> float:
    """Peak usage over time of an assignment (compare with ``mem.limit``)."""
    names = list(problem.node_costs)
    lo = np.array([mem.interval[n][0] for n in names], dtype=np.int64)
    hi = np.array([mem.interval[n][1] for n in names], dtype=np.int64)
    seg = segments(lo, hi)
    use = np.array([float(mem.usage[n][choice[n]]) for n in names])
    return float(seg.profile(use).max(initial=0.0))


def solve_with_memory(
    problem: CostGraph,
    mem: LiveMemory,
    *,
    time_limit_s: float | None = None,
    budget: Budget = Budget(),
) -> Solution:
    """Least-cost assignment whose live usage stays within ``mem.limit`` at every time step.

    Returns a :class:`Solution` with ``status`` "optimal", "feasible" (best found, with a lower
    bound) or "infeasible" (even the smallest strategies exceed the limit somewhere, or no
    fitting assignment was found); ``stats`` has ``peak_usage`` and the method used.
    """
    start = time.perf_counter()
    # 5% of the time is left for recovering and checking the answer after the search stops
    deadline = math.inf if time_limit_s is None else start + 0.95 * time_limit_s
    names = list(problem.node_costs)
    lo = np.array([mem.interval[n][0] for n in names], dtype=np.int64)
    hi = np.array([mem.interval[n][1] for n in names], dtype=np.int64)
    seg = segments(lo, hi)
    allowed = [np.isfinite(problem.node_costs[n]) for n in names]
    use = [np.asarray(mem.usage[n], dtype=float) for n in names]
    least = np.array([u[a].min() if a.any() else u.min() for u, a in zip(use, allowed)])
    most = np.array([u[a].max() if a.any() else u.max() for u, a in zip(use, allowed)])
    low, high = seg.profile(least), seg.profile(most)
    if (low > mem.limit).any():
        t = int(np.argmax(low))
        choice = {n: int(np.argmin(np.where(a, u, np.inf))) for n, u, a in zip(names, use, allowed)}
        return Solution(
            choice,
            problem.total(choice),
            {
                "time_s": time.perf_counter() - start,
                "peak_usage": float(low.max()),
                "reason": f"even the smallest strategies use {low[t]:.6g} > limit {mem.limit:.6g}"
                f" in time segment {t}",
            },
            status="infeasible",
            lower_bound=math.inf,
        )
    tight = high > mem.limit
    before = np.concatenate([[0], np.cumsum(tight)])  # tight segments before each segment
    row_lo, row_hi = before[seg.first], before[seg.last]
    relevant = [i for i in range(len(names)) if most[i] > least[i] and row_hi[i] > row_lo[i]]
    if not relevant:
        sol = solve(problem, time_limit_s=time_limit_s, budget=budget)
        return _finish(sol, problem, mem, start, "no time step can exceed the limit")
    keep = tuple(names[i] for i in relevant)
    cap = mem.limit - low[tight]

    def rows_of(red: Reduced) -> RangeRows:
        return RangeRows(
            {v: int(row_lo[i]) for v, i in zip(red.keep, relevant)},
            {v: int(row_hi[i]) for v, i in zip(red.keep, relevant)},
            {v: use[i] - least[i] for v, i in zip(red.keep, relevant)},
            cap,
        )

    # 1. the exact ILP, on the problem with only its leaves folded in (series and table
    #    eliminations weaken the relaxation), when it is small enough
    found: tuple[dict[str, int], float] | None = None
    entries = problem.num_strategies + sum(m.size for _, _, m in problem.edges)
    if entries * 3 <= ILP_MAX_NONZEROS:
        light = reduce_problem(problem, keep, budget, deadline, series=False)
        light_rows = rows_of(light)
        light_vars = light.alive + light.keep
        if ilp_size(light.factors, light_vars, light_rows) <= ILP_MAX_NONZEROS:
            left = None if time_limit_s is None else 0.6 * (deadline - time.perf_counter())
            res = solve_ilp(light.factors, light_vars, rows=light_rows, time_limit_s=left)
            if res is not None and res.status == "infeasible":
                return _infeasible(problem, start, "proven by the ILP")
            if res is not None:
                choice = light.recover(res.assign)
                fits = memory_profile(problem, mem, choice) <= mem.limit
                if res.status == "optimal" and fits:
                    cost = problem.total(choice)
                    sol = Solution(choice, cost, {"method": "ilp"}, lower_bound=cost)
                    return _finish(sol, problem, mem, start, "exact ILP with memory rows")
                found = (choice, res.lower_bound)
    # 2. Lagrangian relaxation on the fully reduced problem
    red = reduce_problem(problem, keep, budget, deadline)
    search = LagrangianSearch(red, rows_of(red), deadline, budget)
    if found is not None:
        search.offer(search.assignment(found[0]), "ilp (time limit)")
        search.bound = max(search.bound, found[1])
    if time.perf_counter() < deadline:
        search.seed(problem, time_limit_s, deadline)
    if not search.optimal and time.perf_counter() < deadline:
        search.lagrangian()
    return search.solution(problem, lambda choice: memory_profile(problem, mem, choice), start)


def _infeasible(problem: CostGraph, start: float, why: str) -> Solution:
    choice = dict.fromkeys(problem.node_costs, 0)
    stats = {
        "time_s": time.perf_counter() - start,
        "method": "ilp",
        "reason": f"no assignment within the memory limit: {why}",
    }
    return Solution(choice, math.inf, stats, status="infeasible", lower_bound=math.inf)


def _finish(
    sol: Solution, problem: CostGraph, mem: LiveMemory, start: float, note: str
) -> Solution:
    peak = memory_profile(problem, mem, sol.strategies)
    stats = {**sol.stats, "time_s": time.perf_counter() - start, "peak_usage": peak, "note": note}
    return Solution(sol.strategies, sol.cost, stats, status=sol.status, lower_bound=sol.lower_bound)
