"""Exact dynamic programming by graph elimination, for any graph, in bounded memory.

Three stages, each on what the previous one leaves:

1. :mod:`~taps_core.solver.series`: leaves and series nodes (degree <= 2) by min-plus
   products, cheapest first. Model graphs (series-parallel-ish) end here: fast and exact.
2. :mod:`~taps_core.solver.factors`: variable elimination of any degree into tables over the
   neighbours, in min-weight order, when the whole elimination fits the :class:`Budget`
   (exact); otherwise only the eliminations that do not grow the problem.
3. :mod:`~taps_core.solver.kernel`: the irreducible rest goes to the exact ILP (scipy HiGHS),
   or, past its size cap or the time limit, to greedy plus local search with a lower bound.

Everything is iterative (no recursion) and deterministic. ``solve`` without a time limit is
exact; with one, the :class:`Solution` says ``optimal`` or ``feasible`` with a lower bound.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable

import numpy as np

from taps_core.solver.factors import Budget, FactorProblem
from taps_core.solver.kernel import KernelResult, solve_kernel
from taps_core.solver.problem import CostGraph, Solution
from taps_core.solver.reduction import reduce_problem
from taps_core.solver.series import min_plus

__all__ = ["Budget", "greedy", "min_plus", "reduce_to", "solve"]

ILP_MAX_NONZEROS = 8_000_000  # larger kernels skip the ILP when a time limit is set (memory)


def solve(
    problem: CostGraph, *, time_limit_s: float | None = None, budget: Budget = Budget()
) -> Solution:
    """Minimum-cost assignment of ``problem`` (see module docstring).

    Parameters
    ----------
    problem : CostGraph
        Node cost vectors and edge cost matrices; any undirected cycles allowed.
    time_limit_s : float, optional
        Seconds for the whole solve. Without it the answer is always the exact optimum.
    budget : Budget
        Largest tables the elimination may build (memory) and total work (time).

    Returns
    -------
    Solution
        Strategies, cost, ``status`` ("optimal", "feasible" or "infeasible"), ``lower_bound``
        and ``stats`` (``time_s``, ``kernel_nodes``, ``method``).

    Examples
    --------
    >>> import numpy as np
    >>> p = CostGraph({"a": np.array([1.0, 2.0]), "b": np.array([0.0, 0.0])},
    ...               (("a", "b", np.array([[0.0, 3.0], [3.0, 0.0]])),))
    >>> solve(p).strategies, solve(p).cost
    ({'a': 0, 'b': 0}, 1.0)
    """
    start = time.perf_counter()
    deadline = math.inf if time_limit_s is None else start + time_limit_s
    red = reduce_problem(problem, (), budget, deadline)
    alive = red.alive
    res = solve_kernel(
        red.factors,
        alive,
        deadline=deadline,
        ilp_max_nonzeros=ILP_MAX_NONZEROS,
        exact=time_limit_s is None,
    )
    chosen = red.recover(res.assign)
    cost = problem.total(chosen)
    status, bound, method = res.status, res.lower_bound, res.method
    if status == "feasible":
        simple = greedy(problem)
        if problem.total(simple) < cost:
            chosen, cost, method = simple, problem.total(simple), "greedy"
    if status == "optimal":
        bound = cost
    if not math.isfinite(cost):
        status = "infeasible"
    ordered = {n: chosen[n] for n in problem.node_costs}
    stats = {
        "time_s": time.perf_counter() - start,
        "kernel_nodes": len(alive),
        "eliminated": len(red.eliminated.records) + len(red.series.records),
        "method": method,
    }
    return Solution(ordered, cost, stats, status=status, lower_bound=bound)


def reduce_to(
    problem: CostGraph, keep: tuple[str, ...]
) -> tuple[np.ndarray, Callable[[tuple[int, ...]], dict[str, int]]]:
    """Eliminate every node but ``keep`` (at most two): the minimum total cost as a table over
    the kept nodes' strategies, and a function giving every node's strategy for a kept choice.

    Exact. When a kernel is left beside the kept nodes, it is solved (by the ILP) once per
    choice of the kept nodes' strategies.
    """
    if len(keep) > 2:
        raise ValueError("reduce_to keeps at most two nodes")
    red = reduce_problem(problem, keep, Budget(), math.inf)
    fp, kv = red.factors, red.keep
    alive = red.alive
    shape = tuple(fp.domains[v] for v in kv)
    if not alive:
        table = np.full(shape, fp.constant)
        for i, v in enumerate(kv):
            table = table + fp.unary[v].reshape([-1 if j == i else 1 for j in range(len(kv))])
        for scope, t in fp.tables.items():  # only the table over both kept nodes is left
            table = table + (t if list(scope) == kv else t.T)

        def recover(k: tuple[int, ...]) -> dict[str, int]:
            assign = np.zeros(len(fp.domains), dtype=np.int64)
            assign[kv] = k
            return red.recover(assign)

        return table, recover
    table = np.full(shape, np.inf)
    answers: dict[tuple[int, ...], np.ndarray] = {}
    for combo in itertools.product(*(range(n) for n in shape)):
        res = _conditioned(fp, alive, dict(zip(kv, combo)))
        table[combo] = fp.value(res.assign)
        answers[combo] = res.assign
    return table, lambda k: red.recover(answers[tuple(k)])


def _conditioned(fp: FactorProblem, alive: list[int], fixed: dict[int, int]) -> KernelResult:
    """Exact kernel optimum with the ``fixed`` variables held at the given strategies."""
    unary = list(fp.unary)
    for v, s in fixed.items():
        unary[v] = np.where(np.arange(fp.domains[v]) == s, unary[v], np.inf)
    sub = FactorProblem(fp.domains, unary, dict(fp.tables), fp.constant)
    return solve_kernel(sub, alive + list(fixed), deadline=math.inf, ilp_max_nonzeros=0, exact=True)


def greedy(problem: CostGraph) -> dict[str, int]:
    """Nodes in order, each at its cheapest strategy given the neighbours already chosen."""
    adj: dict[str, list[tuple[str, np.ndarray]]] = {n: [] for n in problem.node_costs}
    for u, v, m in problem.edges:
        adj[u].append((v, m))
        adj[v].append((u, m.T))
    chosen: dict[str, int] = {}
    for n, c in problem.node_costs.items():
        local = c.copy()
        for other, m in adj[n]:
            if other in chosen:
                local += m[:, chosen[other]]
        chosen[n] = int(np.argmin(local))
    return chosen
