"""Lagrangian relaxation of a memory limit, with repair and feasible local moves.

The search works on a reduced problem whose kept variables are the memory-relevant nodes and
on :class:`~taps_core.solver.kernel.RangeRows` (one row per tight time segment). Multipliers
``lambda`` on the rows move into the kept variables' costs; the unconstrained problem is solved
(elimination in a fixed order, then a quick kernel pass with warm-started diffusion); its lower
bound minus ``lambda . capacity`` bounds the constrained optimum; each answer is repaired to
fit (cheapest extra cost per unit of memory saved first) and improved by one-node moves that
keep every row within its limit. Polyak steps aim at the incumbent.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable

import numpy as np

from taps_core.solver.elimination import solve
from taps_core.solver.factors import Budget, FactorProblem, plan, run
from taps_core.solver.kernel import RangeRows, incidence, local_costs, solve_kernel
from taps_core.solver.problem import CostGraph, Solution
from taps_core.solver.reduction import Reduced

PeakFn = Callable[[dict[str, int]], float]  # a full assignment's peak memory usage
MAX_ROUNDS = 1000  # Lagrangian iterations (the time limit usually stops it first)
PATIENCE = 6  # rounds without a better bound before the step halves


class LagrangianSearch:
    """Incumbent, bound and the moves of the Lagrangian search on a reduced problem."""

    def __init__(self, red: Reduced, rows: RangeRows, deadline: float, budget: Budget) -> None:
        self.red, self.rows, self.deadline, self.budget = red, rows, deadline, budget
        self.fp = red.factors
        self.vars = red.alive + red.keep
        self.inc = incidence(self.fp, self.vars)
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
                local = self.fp.unary[v] + local_costs(v, self.inc[v], assign, None)
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
            local = self.fp.unary[v] + local_costs(v, self.inc[v], assign, None)
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
                if stale >= PATIENCE:
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

    def solution(self, problem: CostGraph, peak: PeakFn, start: float) -> Solution:
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
            peak_usage=peak(choice),
        )
        bound = cost if status == "optimal" else min(self.bound, cost)
        return Solution(choice, cost, stats, status=status, lower_bound=bound)
