"""Pairwise reductions of the elimination DP (MindSpore-style): the fast path for model graphs.

Reductions, cheapest first, until none is left within the budget:
- single-strategy node (any degree): fold its edges into the neighbours' cost vectors;
- isolated node: take its cheapest strategy;
- leaf: fold a degree-one node into its neighbour's cost vector;
- series: a degree-two node v between u and w becomes an edge u-w with
  ``C'(a, c) = min_b C_uv(a, b) + c_v(b) + C_vw(b, c)`` (a min-plus product; argmin kept);
- parallel edges add up as they appear.
What is left (nodes of degree >= 3, kept nodes, eliminations over the budget) goes on to
:mod:`taps_core.solver.factors`. Replaying the records backwards recovers every strategy.
"""

from __future__ import annotations

import heapq
import math
import time
from dataclasses import dataclass, field

import numpy as np

from taps_core.solver.minplus import min_plus
from taps_core.solver.problem import CostGraph

# a record replays one elimination: ("root", v, s) | ("leaf", v, u, arg[S_u])
# | ("series", v, u, w, arg[S_u, S_w]); arg gives v's strategy for the neighbours' strategies
Record = tuple


@dataclass(frozen=True)
class SeriesBudget:
    """Largest pairwise elimination to do here (bigger ones are left to the factor engine).

    Model graphs reach ~4e8 element operations (gpt3-175b on 1024 GPUs, 1460 strategies):
    the defaults leave them all here, exact and fast.
    """

    table_elements: float = float(1 << 23)  # entries of the edge a series step creates
    step_work: float = float(1 << 31)  # S_u * S_v * S_w element operations of one step
    deadline: float = math.inf  # time.perf_counter() value after which nothing is reduced
    series: bool = True  # False: leaves and single-strategy nodes only (no new edges)
    stored_elements: float = float(1 << 28)  # argmin entries kept for recovery, all steps


@dataclass
class SeriesState:
    """Mutable working copy of the problem (arrays are replaced, never written in place)."""

    costs: dict[str, np.ndarray]
    adj: dict[str, dict[str, np.ndarray]]  # adj[u][v] has shape [S_u, S_v]
    constant: float = 0.0
    records: list[Record] = field(default_factory=list)
    stored: int = 0  # entries of the series records' argmin tables

    def add_edge(self, u: str, v: str, m: np.ndarray) -> None:
        if v in self.adj[u]:
            m = self.adj[u][v] + m
        self.adj[u][v] = m
        self.adj[v][u] = m.T

    def remove(self, v: str) -> None:
        for u in self.adj.pop(v):
            del self.adj[u][v]
        del self.costs[v]


def state_of(problem: CostGraph) -> SeriesState:
    """A working copy of ``problem`` (parallel edges already added up)."""
    st = SeriesState(dict(problem.node_costs), {n: {} for n in problem.node_costs})
    for u, v, m in problem.edges:
        st.add_edge(u, v, m)
    return st


def _work(st: SeriesState, v: str, budget: SeriesBudget) -> float:
    """Estimated cost of eliminating ``v`` now (inf for degree >= 3 or over the budget)."""
    nbrs = st.adj[v]
    if len(st.costs[v]) == 1:  # one strategy: folds into every neighbour, whatever the degree
        return 0.0
    if len(nbrs) > 2 or (len(nbrs) == 2 and not budget.series):
        return np.inf
    size = float(len(st.costs[v]))
    for u in nbrs:
        size *= len(st.costs[u])
    if size > budget.step_work:
        return np.inf
    if len(nbrs) == 2:
        table = size / len(st.costs[v])
        if table > budget.table_elements or st.stored + table > budget.stored_elements:
            return np.inf
    return size


def eliminate_series(st: SeriesState, keep: frozenset[str], budget: SeriesBudget) -> None:
    """Apply reductions, cheapest first, until only ``keep``, degree >= 3 nodes and nodes over
    the budget are left (or the deadline passes)."""
    heap = [(_work(st, n, budget), i, n) for i, n in enumerate(st.costs) if n not in keep]
    heapq.heapify(heap)
    tick = len(heap)
    while heap:
        est, _, v = heapq.heappop(heap)
        if v not in st.costs or not np.isfinite(est):
            continue
        if time.perf_counter() > budget.deadline:
            return
        now = _work(st, v, budget)
        if now != est:  # stale entry: requeue with the current estimate
            tick += 1
            heapq.heappush(heap, (now, tick, v))
            continue
        nbrs = list(st.adj[v])
        c_v = st.costs[v]
        if len(c_v) == 1:
            st.constant += float(c_v[0])
            for u in nbrs:
                st.costs[u] = st.costs[u] + st.adj[v][u][0]
            st.records.append(("root", v, 0))
            st.remove(v)
        elif len(nbrs) == 0:
            s = int(np.argmin(c_v))
            st.constant += float(c_v[s])
            st.records.append(("root", v, s))
            st.remove(v)
        elif len(nbrs) == 1:
            u = nbrs[0]
            val = c_v[:, None] + st.adj[v][u]  # [S_v, S_u]
            arg = val.argmin(axis=0)
            st.costs[u] = st.costs[u] + val[arg, np.arange(val.shape[1])]
            st.records.append(("leaf", v, u, arg))
            st.remove(v)
        else:
            u, w = nbrs
            out, arg = min_plus(st.adj[v][u].T, c_v, st.adj[v][w])
            if len(c_v) <= 65536:  # strategy indices in the smallest type that holds them
                arg = arg.astype(np.uint8 if len(c_v) <= 256 else np.uint16)
            st.stored += arg.size
            st.records.append(("series", v, u, w, arg))
            st.remove(v)
            st.add_edge(u, w, out)
        for n in nbrs:
            if n not in keep:
                tick += 1
                heapq.heappush(heap, (_work(st, n, budget), tick, n))


def recover_series(st: SeriesState, kept: dict[str, int]) -> dict[str, int]:
    """Every node's strategy from the strategies of the nodes left (``kept``), newest first."""
    chosen = dict(kept)
    for rec in reversed(st.records):
        if rec[0] == "root":
            chosen[rec[1]] = rec[2]
        elif rec[0] == "leaf":
            chosen[rec[1]] = int(rec[3][chosen[rec[2]]])
        else:
            chosen[rec[1]] = int(rec[4][chosen[rec[2]], chosen[rec[3]]])
    return chosen
