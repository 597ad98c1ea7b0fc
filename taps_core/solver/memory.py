"""A memory limit over live ranges (the IOPDDL constraint): ILP when it fits, else Lagrangian.

Each node ``v`` is live over the time steps ``[lo_v, hi_v)`` and its strategy ``s`` uses
``usage_v(s)`` there; at every time step the usage of the live nodes must stay within
``limit``. Times are compressed into *segments* between consecutive interval ends (the live
set is constant inside one). A segment is *tight* when the largest possible usage there
exceeds the limit; only nodes live in a tight segment whose usage depends on the strategy are
*relevant*. Everything else is eliminated exactly first (:mod:`~taps_core.solver.reduction`).

On what is left:
1. the ILP with one row per tight segment, when it is small enough (exact, or HiGHS's best
   with its dual bound at the time limit);
2. otherwise (and to improve an unfinished ILP), Lagrangian relaxation: multipliers on the
   tight segments move into the node costs, the unconstrained problem is solved, its
   minimum minus ``sum lambda * capacity`` is a lower bound, and each answer is repaired to
   fit (cheapest cost per byte saved first) and improved by feasible one-node moves.
"""

from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import dataclass

import numpy as np

from taps_core.solver.elimination import solve
from taps_core.solver.factors import Budget, FactorProblem, plan, run
from taps_core.solver.kernel import (
    RangeRows,
    _incidence,
    _local,
    ilp_size,
    solve_ilp,
    solve_kernel,
)
from taps_core.solver.problem import CostGraph, Solution
from taps_core.solver.reduction import Reduced, reduce_problem

ILP_MAX_NONZEROS = 4_000_000  # memory-limited ILPs larger than this go to the Lagrangian
MAX_ROUNDS = 200  # Lagrangian iterations (the time limit usually stops it first)


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
    search = _Search(red, rows_of(red), deadline, budget)
    if found is not None:
        search.offer(search.assignment(found[0]), "ilp (time limit)")
        search.bound = max(search.bound, found[1])
    if time.perf_counter() < deadline:
        search.seed(problem, time_limit_s, deadline)
    if not search.optimal and time.perf_counter() < deadline:
        search.lagrangian()
    return search.solution(problem, mem, start)


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


class _Search:
    """Incumbent, bound and the moves of the Lagrangian search on a reduced problem."""

    def __init__(self, red: Reduced, rows: RangeRows, deadline: float, budget: Budget) -> None:
        self.red, self.rows, self.deadline, self.budget = red, rows, deadline, budget
        self.fp = red.factors
        self.vars = red.alive + red.keep
        self.inc = _incidence(self.fp, self.vars)
        self.nbrs = {v: sorted({u for s, _ in self.inc[v] for u in s if u != v}) for v in self.vars}
        self.kept = np.array(red.keep, dtype=np.int64)
        self.pos = {v: i for i, v in enumerate(red.keep)}  # variable -> index in ``kept``
        self.lo = np.array([rows.lo[v] for v in red.keep], dtype=np.int64)
        self.hi = np.array([rows.hi[v] for v in red.keep], dtype=np.int64)
        self.best: np.ndarray | None = None
        self.best_cost = math.inf
        self.bound = -math.inf
        self.optimal = False
        self.method = ""
        self.rounds = 0
        self.messages: dict = {}  # diffusion messages, carried from round to round

    # ---- memory bookkeeping over the tight rows ------------------------------------------
    def load(self, assign: np.ndarray) -> np.ndarray:
        w = np.array([self.rows.weight[v][assign[v]] for v in self.red.keep])
        diff = np.zeros(len(self.rows.limit) + 1)
        np.add.at(diff, self.lo, w)
        np.add.at(diff, self.hi, -w)
        return np.cumsum(diff)[: len(self.rows.limit)]

    def fits(self, assign: np.ndarray) -> bool:
        # no tolerance: integer usages add up exactly in float64 below 2**53
        return bool((self.load(assign) <= self.rows.limit).all())

    def offer(self, assign: np.ndarray, method: str) -> None:
        """Keep ``assign`` (repaired first if it does not fit) if it beats the incumbent."""
        if not self.fits(assign):
            fixed = self.repair(assign)
            if fixed is None:
                return
            assign = self.improve(fixed)
        cost = self.fp.value(assign)
        if cost < self.best_cost:
            self.best, self.best_cost, self.method = assign.copy(), cost, method

    def assignment(self, choice: dict[str, int]) -> np.ndarray:
        """The reduced problem's variables set as in a full ``choice``."""
        assign = np.zeros(len(self.fp.domains), dtype=np.int64)
        for i, n in enumerate(self.red.names):
            assign[i] = choice[n]
        return assign

    def seed(self, problem: CostGraph, time_limit_s: float | None, deadline: float) -> None:
        """Solve without the limit (a third of the time left): its lower bound holds here too,
        and its answer, repaired to fit, is a first incumbent."""
        share = None if time_limit_s is None else 0.35 * (deadline - time.perf_counter())
        free = solve(problem, time_limit_s=share, budget=self.budget)
        if free.lower_bound is not None:
            self.bound = max(self.bound, free.lower_bound)
        assign = self.assignment(free.strategies)
        if self.fits(assign) and free.status == "optimal":
            self.optimal = True  # the unconstrained optimum fits: nothing can beat it
        self.offer(assign, "unconstrained + repair")

    # ---- repair and improvement ----------------------------------------------------------
    def repair(self, assign: np.ndarray) -> np.ndarray | None:
        """Lower usage where it exceeds the limit, cheapest extra cost per unit saved first
        (each kept variable's best move is cached until it or a neighbour moves)."""
        assign = assign.copy()
        load = self.load(assign)
        limit = self.rows.limit
        ratio = np.full(len(self.kept), np.nan)  # best extra cost per unit saved (nan: stale)
        target = np.zeros(len(self.kept), dtype=np.int64)  # ... and the strategy achieving it
        for _ in range(20 * len(self.kept) + 10):
            over = load - limit
            r = int(np.argmax(over))
            if over[r] <= 0:
                return assign
            if time.perf_counter() > self.deadline:
                return None
            live = np.flatnonzero((self.lo <= r) & (self.hi > r))
            for i in live[np.isnan(ratio[live])]:
                v = int(self.kept[i])
                w = self.rows.weight[v]
                saved = w[assign[v]] - w
                local = self.fp.unary[v] + _local(v, self.inc[v], assign, None)
                per = np.where(
                    saved > 0, (local - local[assign[v]]) / np.maximum(saved, 1e-300), np.inf
                )
                target[i] = int(np.argmin(per))
                ratio[i] = per[target[i]]
            i = int(live[np.argmin(ratio[live])])
            if not np.isfinite(ratio[i]):
                return None  # nothing live here can use less
            v, s = int(self.kept[i]), int(target[i])
            w = self.rows.weight[v]
            load[self.lo[i] : self.hi[i]] += w[s] - w[assign[v]]
            assign[v] = s
            ratio[i] = np.nan
            for u in self.nbrs[v]:
                if u in self.pos:
                    ratio[self.pos[u]] = np.nan
        return None

    def improve(self, assign: np.ndarray) -> np.ndarray:
        """One-node moves that lower the cost and keep every tight row within its limit (a
        work list: a move re-queues the neighbours)."""
        assign = assign.copy()
        load = self.load(assign)
        limit = self.rows.limit
        queue = deque(self.vars)
        queued = set(self.vars)
        while queue:
            v = queue.popleft()
            queued.discard(v)
            local = self.fp.unary[v] + _local(v, self.inc[v], assign, None)
            cur = assign[v]
            i = self.pos.get(v)
            if i is not None:
                a, b = self.lo[i], self.hi[i]
                w = self.rows.weight[v]
                slack = float((limit[a:b] - load[a:b]).min(initial=math.inf))
                local = np.where(w - w[cur] <= slack, local, np.inf)
            s = int(np.argmin(local))
            if local[s] < local[cur] - 1e-12 * abs(local[cur]):
                if i is not None:
                    load[a:b] += w[s] - w[cur]
                assign[v] = s
                for u in self.nbrs[v]:
                    if u not in queued:
                        queue.append(u)
                        queued.add(u)
            if time.perf_counter() > self.deadline:
                break
        return assign

    # ---- Lagrangian relaxation -----------------------------------------------------------
    def _inner(self, lam: np.ndarray, order: list[int], complete: bool) -> tuple[np.ndarray, float]:
        """Solve with ``lam`` priced into the costs: (assignment, lower bound of that min)."""
        fp = self.fp
        acc = np.concatenate([[0.0], np.cumsum(lam)])
        unary = list(fp.unary)
        for v, a, b in zip(self.red.keep, self.lo, self.hi):
            unary[v] = unary[v] + (acc[b] - acc[a]) * self.rows.weight[v]
        pen = FactorProblem(list(fp.domains), unary, dict(fp.tables), fp.constant)
        done = run(pen, order)
        alive = [v for v in self.vars if len(pen.unary[v])]
        if not alive:  # the whole elimination fitted: exact
            return done.recover(np.zeros(len(fp.domains), dtype=np.int64)), pen.constant
        res = solve_kernel(
            pen,
            alive,
            deadline=self.deadline,
            ilp_max_nonzeros=0,
            exact=False,
            quick=True,
            messages=self.messages,
        )
        return done.recover(res.assign.copy()), res.lower_bound

    def lagrangian(self) -> None:
        """Subgradient ascent on the multipliers, with a Polyak step towards the incumbent."""
        probe = FactorProblem(list(self.fp.domains), list(self.fp.unary), dict(self.fp.tables))
        pl = plan(probe, set(), self.budget)
        if not pl.complete:
            pl = plan(probe, set(), self.budget, shrink_only=True)
        limit = self.rows.limit
        lam = np.zeros(len(limit))
        theta, stale = 1.0, 0
        for _ in range(MAX_ROUNDS):
            if time.perf_counter() > self.deadline:
                break
            self.rounds += 1
            assign, inner = self._inner(lam, pl.order, pl.complete)
            dual = inner - float(lam @ limit)
            if dual > self.bound + 1e-12 * abs(dual):
                self.bound, stale = dual, 0
            else:
                stale += 1
                if stale >= 3:
                    theta, stale = theta / 2, 0
            g = self.load(assign) - limit
            if (g <= 0).all():
                self.offer(self.improve(assign), "lagrangian")
                if pl.complete and abs(float(lam @ g)) <= 1e-9 * max(1.0, abs(dual)):
                    self.optimal = True  # complementary slackness: the relaxation is tight
                    break
            else:
                self.offer(assign, "lagrangian + repair")
            if self.best_cost <= self.bound + 1e-9 * abs(self.best_cost):
                self.optimal = True
                break
            target = self.best_cost if math.isfinite(self.best_cost) else dual + abs(dual) + 1.0
            norm = float(g @ g)
            if norm <= 0 or theta < 1e-6:
                break
            lam = np.maximum(0.0, lam + theta * (target - dual) / norm * g)

    def solution(self, problem: CostGraph, mem: LiveMemory, start: float) -> Solution:
        stats: dict[str, object] = {"rounds": self.rounds, "kernel_nodes": len(self.vars)}
        if self.best is None:
            choice = dict.fromkeys(problem.node_costs, 0)
            stats.update(
                time_s=time.perf_counter() - start,
                method=self.method or "none",
                reason="no assignment within the memory limit was found in the time limit",
            )
            return Solution(choice, math.inf, stats, status="infeasible", lower_bound=self.bound)
        choice = self.red.recover(self.best)
        cost = problem.total(choice)
        status = "optimal" if self.optimal else "feasible"
        stats.update(
            time_s=time.perf_counter() - start,
            method=self.method,
            peak_usage=memory_profile(problem, mem, choice),
        )
        bound = cost if status == "optimal" else min(self.bound, cost)
        return Solution(choice, cost, stats, status=status, lower_bound=bound)
