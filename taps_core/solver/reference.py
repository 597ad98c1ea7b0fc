"""Reference solvers for tests and benchmarks: brute force and an ILP (scipy HiGHS milp)."""

from __future__ import annotations

import itertools
import math

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import coo_matrix

from taps_core.solver.problem import CostGraph, Solution

BRUTE_FORCE_LIMIT = 2_000_000


def brute_force(problem: CostGraph) -> Solution:
    """Try every assignment (only for tiny problems)."""
    names = list(problem.node_costs)
    sizes = [len(problem.node_costs[n]) for n in names]
    if math.prod(sizes) > BRUTE_FORCE_LIMIT:
        raise ValueError(f"brute force over {math.prod(sizes)} assignments is too many")
    best, best_choice = math.inf, None
    for combo in itertools.product(*(range(s) for s in sizes)):
        choice = dict(zip(names, combo))
        cost = problem.total(choice)
        if cost < best:
            best, best_choice = cost, choice
    return Solution(best_choice or dict.fromkeys(names, 0), best)


def ilp(
    problem: CostGraph,
    *,
    node_weights: dict[str, np.ndarray] | None = None,
    weight_limit: float | None = None,
    time_limit_s: float | None = None,
) -> Solution:
    """Alpa/XLA-style ILP: one-hot x per node, y per edge pair tied to both ends' x.

    With ``node_weights`` and ``weight_limit`` it adds ``sum_v w_v . x_v <= limit`` (memory).
    Infinite costs become forbidden variables.
    """
    names = list(problem.node_costs)
    offset: dict[str, int] = {}
    cost: list[float] = []
    upper: list[float] = []
    for n in names:
        offset[n] = len(cost)
        c = problem.node_costs[n]
        cost += [0.0 if not np.isfinite(x) else float(x) for x in c]
        upper += [1.0 if np.isfinite(x) else 0.0 for x in c]
    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    lo: list[float] = []
    hi: list[float] = []

    def constraint(entries: list[tuple[int, float]], low: float, high: float) -> None:
        r = len(lo)
        for col, v in entries:
            rows.append(r)
            cols.append(col)
            vals.append(v)
        lo.append(low)
        hi.append(high)

    for n in names:
        constraint([(offset[n] + i, 1.0) for i in range(len(problem.node_costs[n]))], 1, 1)
    for u, v, m in problem.edges:
        base = len(cost)
        su, sv = m.shape
        for i in range(su):
            for j in range(sv):
                ok = np.isfinite(m[i, j])
                cost.append(float(m[i, j]) if ok else 0.0)
                upper.append(1.0 if ok else 0.0)
        for i in range(su):  # sum_j y_ij = x_u,i
            constraint(
                [(base + i * sv + j, 1.0) for j in range(sv)] + [(offset[u] + i, -1.0)], 0, 0
            )
        for j in range(sv):  # sum_i y_ij = x_v,j
            constraint(
                [(base + i * sv + j, 1.0) for i in range(su)] + [(offset[v] + j, -1.0)], 0, 0
            )
    if node_weights is not None and weight_limit is not None:
        constraint(
            [(offset[n] + i, float(w)) for n in names for i, w in enumerate(node_weights[n])],
            -np.inf,
            weight_limit,
        )
    a = coo_matrix((vals, (rows, cols)), shape=(len(lo), len(cost))).tocsr()
    integrality = np.zeros(len(cost))
    integrality[: sum(len(problem.node_costs[n]) for n in names)] = 1
    # HiGHS stops within an absolute gap of 1e-6: costs in seconds are tiny, so rescale the
    # objective to ~1e6 and ask for a tight relative gap to get the true optimum
    c = np.array(cost)
    scale = 1e6 / max(float(np.abs(c).max(initial=0.0)), 1e-300)
    options: dict[str, float] = {"mip_rel_gap": 1e-12}
    if time_limit_s:
        options["time_limit"] = time_limit_s
    res = milp(
        c * scale,
        constraints=LinearConstraint(a, lo, hi),
        integrality=integrality,
        bounds=Bounds(0, np.array(upper)),
        options=options,
    )
    if res.x is None:
        raise ValueError(f"ILP found no solution: {res.message}")
    choice = {
        n: int(np.argmax(res.x[offset[n] : offset[n] + len(problem.node_costs[n])])) for n in names
    }
    return Solution(choice, problem.total(choice), {"status": res.message})
