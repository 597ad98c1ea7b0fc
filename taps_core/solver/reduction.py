"""Stages 1-2 of the solver: series reductions, then factor elimination within a budget.

Shared by :mod:`~taps_core.solver.elimination` (unconstrained problems) and
:mod:`~taps_core.solver.memory` (problems with a memory limit, whose memory-relevant nodes
are kept out of the elimination).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from taps_core.solver.factors import Budget, Eliminated, FactorProblem, plan, run
from taps_core.solver.problem import CostGraph
from taps_core.solver.series import (
    SeriesBudget,
    SeriesState,
    eliminate_series,
    recover_series,
    state_of,
)


@dataclass
class Reduced:
    """A problem after stages 1-2: the factor problem over the nodes left, and how to undo."""

    series: SeriesState
    names: list[str]  # factor variable i is node names[i]
    factors: FactorProblem
    eliminated: Eliminated
    keep: list[int]  # variables of the kept nodes, in ``keep`` order

    @property
    def alive(self) -> list[int]:
        kept = set(self.keep)
        return [v for v, u in enumerate(self.factors.unary) if len(u) and v not in kept]

    def recover(self, assign: np.ndarray) -> dict[str, int]:
        assign = self.eliminated.recover(assign.copy())
        left = {n: int(assign[i]) for i, n in enumerate(self.names)}
        return recover_series(self.series, left)


def reduce_problem(
    problem: CostGraph,
    keep: tuple[str, ...],
    budget: Budget,
    deadline: float,
    *,
    series: bool = True,
) -> Reduced:
    """Stages 1-2 of :func:`~taps_core.solver.elimination.solve` on ``problem``; the ``keep``
    nodes are never eliminated (``Reduced.keep`` lists their variables in the same order).

    ``series=False`` folds only leaves and single-strategy nodes, which add no edge: min-plus
    products and wide tables can make an ILP's relaxation weaker than the original's.
    """
    st = state_of(problem)
    eliminate_series(st, frozenset(keep), SeriesBudget(deadline=deadline, series=series))
    names = [n for n in problem.node_costs if n in st.costs]
    idx = {n: i for i, n in enumerate(names)}
    fp = FactorProblem([len(st.costs[n]) for n in names], [st.costs[n] for n in names])
    fp.constant = st.constant
    for u in names:
        for w, m in st.adj[u].items():
            if idx[u] < idx[w]:
                fp.add((idx[u], idx[w]), m)
    kept = {idx[n] for n in keep}
    if not series:
        return Reduced(st, names, fp, run(fp, []), [idx[n] for n in keep])
    order = plan(fp, kept, budget)
    if not order.complete:
        order = plan(fp, kept, budget, shrink_only=True)
    return Reduced(st, names, fp, run(fp, order.order), [idx[n] for n in keep])
