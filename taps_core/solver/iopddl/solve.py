"""An IOPDDL problem answered: the exact path first, then the memory-first search, one report."""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from taps_core.solver.elimination import solve
from taps_core.solver.iopddl import feasible
from taps_core.solver.iopddl.format import IopddlProblem, evaluate
from taps_core.solver.memory import solve_with_memory
from taps_core.solver.problem import Solution

EXACT_SHARE = 0.5  # of the time limit for the exact path; the search gets the rest
SEARCH_NO_LIMIT_S = 60.0  # the search's time when no limit is given (the exact path ran out)


def solve_iopddl(p: IopddlProblem, *, time_limit_s: float | None) -> dict[str, Any]:
    """Solve and describe the answer as a JSON-ready dict (the contest's ``solution`` list
    plus cost, status, lower bound, gap, peak usage and time)."""
    start = time.perf_counter()
    graph = p.graph
    mem = p.memory
    # the exact path first, with half the time: it proves optimality where it can, and its
    # bound is the one reported; otherwise the memory-first search improves on its answer
    share = None if time_limit_s is None else EXACT_SHARE * time_limit_s
    if mem is None:
        sol = solve(graph, time_limit_s=share)
    else:
        sol = solve_with_memory(graph, mem, time_limit_s=share)
    solution = [int(sol.strategies[str(i)]) for i in range(len(p.costs))]
    cost, peak, fits = evaluate(p, solution)
    proven_infeasible = sol.status == "infeasible" and sol.lower_bound == math.inf
    if sol.status != "optimal" and not (proven_infeasible and not fits):
        left = None if time_limit_s is None else time_limit_s - (time.perf_counter() - start)
        found = feasible.search(
            p,
            time_limit_s=max(0.05, 0.9 * left) if left is not None else SEARCH_NO_LIMIT_S,
            starts=(np.array(solution, dtype=np.int64),),
        )
        alt = [int(x) for x in found.solution]
        alt_cost, alt_peak, alt_fits = evaluate(p, alt)
        if alt_fits and (not fits or not math.isfinite(cost) or alt_cost < cost):
            solution, cost, peak, fits = alt, alt_cost, alt_peak, alt_fits
            stats = {**sol.stats, "method": "memory-first search", "time_s": None}
            sol = Solution(sol.strategies, float(cost), stats, "feasible", sol.lower_bound)
    status = sol.status
    if status == "infeasible" and fits and math.isfinite(cost):
        status = "feasible"
    if not fits or not math.isfinite(cost):
        status = "infeasible"
    bound = sol.lower_bound
    integral = all(c.dtype.kind in "iu" for c in p.costs) and all(
        f.dtype.kind in "iu" for _, _, f in p.edges
    )
    if bound is not None and math.isfinite(bound) and integral:
        bound = math.ceil(bound - 1e-9 * max(1.0, abs(bound)))  # integer costs: round up
    if status == "feasible" and bound is not None and math.isfinite(cost) and bound >= cost:
        status = "optimal"
    out: dict[str, Any] = {
        "format": "iopddl",
        "name": p.name,
        "solution": solution,
        "cost": cost if status != "infeasible" else None,
        "status": status,
        "lower_bound": bound,
        "gap": None,
        "time_s": time.perf_counter() - start,
        "peak_usage": peak,
        "usage_limit": p.usage_limit,
        "nodes": len(p.costs),
        "edges": len(p.edges),
        "method": sol.stats.get("method"),
    }
    if status == "optimal":
        out["gap"] = 0.0
    elif status == "feasible" and bound is not None and math.isfinite(bound) and cost:
        out["gap"] = max(0.0, (cost - bound) / abs(cost))
    if status == "infeasible":
        out["reason"] = sol.stats.get("reason") or (
            "every assignment found has a forbidden (10**18) cost"
            if fits
            else f"peak usage {peak} exceeds usage_limit {p.usage_limit}"
        )
    return out
