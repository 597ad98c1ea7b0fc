"""Memory limits over live ranges: optimal by ILP, bounded and feasible by the Lagrangian."""

from __future__ import annotations

import itertools
import math

import networkx as nx
import numpy as np
import pytest

from taps_core.solver import CostGraph
from taps_core.solver import memory as mem_mod
from taps_core.solver.memory import LiveMemory, memory_profile, solve_with_memory


def _case(seed: int, n: int = 7) -> tuple[CostGraph, LiveMemory, float]:
    """A random problem, a limit between the smallest and a loose peak, and its optimum."""
    rng = np.random.default_rng(seed)
    g = nx.gnp_random_graph(n, 0.4, seed=seed)
    costs = {str(v): rng.integers(0, 20, int(rng.integers(1, 4))).astype(float) for v in g.nodes}
    edges = tuple(
        (str(u), str(v), rng.integers(0, 20, (len(costs[str(u)]), len(costs[str(v)]))) * 1.0)
        for u, v in g.edges
    )
    usage = {k: rng.integers(0, 10, len(c)).astype(float) for k, c in costs.items()}
    spans = {}
    for k in costs:
        lo = int(rng.integers(0, 10))
        spans[k] = (lo, lo + int(rng.integers(0, 6)))
    p = CostGraph(costs, edges)
    names = list(costs)
    choices = [
        dict(zip(names, c)) for c in itertools.product(*(range(len(costs[k])) for k in names))
    ]
    loose = LiveMemory(usage, spans, math.inf)
    smallest = min(memory_profile(p, loose, c) for c in choices)
    mem = LiveMemory(usage, spans, float(smallest + rng.integers(0, 8)))
    best = min(
        (p.total(c) for c in choices if memory_profile(p, mem, c) <= mem.limit), default=math.inf
    )
    return p, mem, best


@pytest.mark.parametrize("seed", range(25))
def test_ilp_path_is_optimal(seed):
    p, mem, best = _case(seed)
    sol = solve_with_memory(p, mem)
    assert sol.status == "optimal"
    assert sol.cost == pytest.approx(best)
    assert memory_profile(p, mem, sol.strategies) <= mem.limit


@pytest.mark.parametrize("seed", range(25))
def test_lagrangian_path_is_feasible_and_bounded(seed, monkeypatch):
    monkeypatch.setattr(mem_mod, "ILP_MAX_NONZEROS", 0)  # force the Lagrangian search
    p, mem, best = _case(seed)
    sol = solve_with_memory(p, mem, time_limit_s=10)
    assert memory_profile(p, mem, sol.strategies) <= mem.limit
    assert sol.lower_bound <= best + 1e-9 <= sol.cost + 2e-9
    if sol.status == "optimal":
        assert sol.cost == pytest.approx(best)


def test_limit_below_the_smallest_usage_is_infeasible():
    p = CostGraph({"a": np.array([1.0]), "b": np.array([2.0])})
    mem = LiveMemory({"a": np.array([5.0]), "b": np.array([6.0])}, {"a": (0, 2), "b": (1, 3)}, 10)
    sol = solve_with_memory(p, mem)
    assert sol.status == "infeasible" and "11" in sol.stats["reason"]


def test_loose_limit_is_the_unconstrained_optimum():
    p, mem, _ = _case(3)
    loose = LiveMemory(mem.usage, mem.interval, 1e9)
    sol = solve_with_memory(p, loose)
    assert sol.status == "optimal" and "no time step" in sol.stats["note"]


def test_empty_intervals_use_no_memory():
    p = CostGraph({"a": np.array([0.0, 5.0])})
    mem = LiveMemory({"a": np.array([100.0, 1.0])}, {"a": (3, 3)}, 10)
    assert solve_with_memory(p, mem).strategies == {"a": 0}
