"""The solver on graphs of any shape: exact against brute force and the ILP, bounded, honest.

Factor elimination of nodes of any degree, the kernel left over a tight budget (to the ILP,
or to diffusion + local search with a lower bound), determinism, and the greedy floor.
"""

from __future__ import annotations

import math

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from taps_core.solver import CostGraph, brute_force, ilp, reduce_to, solve
from taps_core.solver import elimination as elim_mod
from taps_core.solver.elimination import greedy
from taps_core.solver.factors import Budget, FactorProblem, plan, run
from taps_core.solver.kernel import diffusion, solve_ilp

TINY = Budget(table_elements=4, step_work=8)  # nearly nothing may be eliminated by tables


def _problem(
    graph: nx.Graph,
    rng: np.random.Generator,
    *,
    max_s: int = 3,
    forbid: float = 0.0,
    single: float = 0.0,
    min_s: int = 1,
) -> CostGraph:
    costs = {}
    for n in graph.nodes:
        k = 1 if rng.random() < single else int(rng.integers(min_s, max_s + 1))
        costs[str(n)] = rng.random(k)
    edges = []
    for u, v in graph.edges:
        m = rng.random((len(costs[str(u)]), len(costs[str(v)])))
        if forbid:
            m[rng.random(m.shape) < forbid] = np.inf
        edges.append((str(u), str(v), m))
    return CostGraph(costs, tuple(edges))


def _regular(n: int, seed: int, k: int = 2) -> CostGraph:
    """Random 3-regular graph, ``k`` strategies, frustrated (Ising-like) edge costs."""
    g = nx.random_regular_graph(3, n, seed=seed)
    rng = np.random.default_rng(seed)
    costs = {str(v): rng.random(k) * 0.1 for v in g.nodes}
    edges = []
    for u, v in g.edges:
        w = rng.normal()
        edges.append((str(u), str(v), np.where(np.eye(k, dtype=bool), 0.0, w) - min(0.0, w)))
    return CostGraph(costs, tuple(edges))


def _same(a: float, b: float) -> bool:
    return (math.isinf(a) and math.isinf(b)) or a == pytest.approx(b, rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("seed", range(20))
def test_dense_graphs_match_brute_force(seed):
    # degrees 3-7: every node needs a table over 3+ neighbours, some single-strategy nodes
    rng = np.random.default_rng(300 + seed)
    g = nx.gnp_random_graph(int(rng.integers(5, 9)), 0.75, seed=seed)
    p = _problem(g, rng, forbid=0.1, single=0.2)
    got, want = solve(p), brute_force(p)
    assert _same(got.cost, want.cost)
    assert _same(p.total(got.strategies), got.cost)
    assert got.status in ("optimal", "infeasible")


@pytest.mark.parametrize("seed", range(12))
def test_kernel_to_the_ilp_is_exact(seed, monkeypatch):
    # a budget that forbids tables: the series stage, then the ILP on what is left
    rng = np.random.default_rng(400 + seed)
    g = nx.gnp_random_graph(int(rng.integers(6, 9)), 0.8, seed=seed)
    p = _problem(g, rng, min_s=2)
    sol = solve(p, budget=TINY)
    assert sol.stats["kernel_nodes"] > 0 and sol.stats["method"] == "ilp"
    assert sol.status == "optimal"
    assert sol.cost == pytest.approx(brute_force(p).cost, rel=1e-9)


@pytest.mark.parametrize("seed", range(12))
def test_heuristic_kernel_is_bounded_and_feasible(seed, monkeypatch):
    # no ILP at all: diffusion bound <= optimum <= answer, and never worse than greedy
    monkeypatch.setattr(elim_mod, "ILP_MAX_NONZEROS", 0)
    rng = np.random.default_rng(500 + seed)
    g = nx.gnp_random_graph(int(rng.integers(6, 9)), 0.8, seed=seed)
    p = _problem(g, rng, max_s=4, min_s=2)
    sol = solve(p, time_limit_s=5, budget=TINY)
    assert sol.stats["kernel_nodes"] > 0 and "ilp" not in sol.stats["method"]
    best = brute_force(p).cost
    assert sol.lower_bound <= best + 1e-9
    assert sol.cost >= best - 1e-9
    assert sol.cost <= p.total(greedy(p)) + 1e-12
    assert sol.status == (
        "optimal" if sol.lower_bound >= sol.cost - 1e-9 * sol.cost else "feasible"
    )
    if sol.status == "feasible":
        assert 0 <= sol.gap <= 1


@settings(max_examples=30, deadline=None)
@given(st.integers(4, 9), st.floats(0.3, 1.0), st.integers(1, 4), st.integers(0, 10_000))
def test_property_factor_elimination_equals_ilp(n, density, max_s, seed):
    rng = np.random.default_rng(seed)
    p = _problem(nx.gnp_random_graph(n, density, seed=seed), rng, max_s=max_s, single=0.1)
    assert solve(p).cost == pytest.approx(ilp(p).cost, rel=1e-9)


def test_diffusion_bound_never_exceeds_the_optimum():
    rng = np.random.default_rng(11)
    for seed in range(15):
        g = nx.gnp_random_graph(7, 0.6, seed=seed)
        p = _problem(g, rng, max_s=3)
        names = list(p.node_costs)
        idx = {n: i for i, n in enumerate(names)}
        fp = FactorProblem([len(p.node_costs[n]) for n in names], [p.node_costs[n] for n in names])
        for u, v, m in p.edges:
            fp.add((idx[u], idx[v]), m)
        bound, rep = diffusion(fp, list(range(len(names))), deadline=math.inf)
        assert bound <= brute_force(p).cost + 1e-9
        any_choice = np.zeros(len(names), dtype=np.int64)
        assert rep.value(any_choice) == pytest.approx(fp.value(any_choice), rel=1e-9)


def test_random_3_regular_graph_equals_the_ilp():
    p = _regular(60, seed=60)
    sol = solve(p, time_limit_s=60)
    assert sol.status == "optimal"
    assert sol.cost == pytest.approx(ilp(p).cost, rel=1e-9)


def test_solutions_are_deterministic():
    p = _regular(80, seed=3, k=3)
    a, b = solve(p, time_limit_s=60), solve(p, time_limit_s=60)
    assert a.strategies == b.strategies and a.cost == b.cost


def test_elimination_plan_respects_the_budget():
    p = _regular(40, seed=5)
    names = list(p.node_costs)
    idx = {n: i for i, n in enumerate(names)}
    fp = FactorProblem([2] * len(names), [p.node_costs[n] for n in names])
    for u, v, m in p.edges:
        fp.add((idx[u], idx[v]), m)
    small = Budget(table_elements=64, step_work=128)
    order = plan(fp, set(), small)
    assert order.largest_table <= 64 and not order.complete
    run(fp, order.order)
    assert all(t.size <= 64 for t in fp.tables.values())


def test_reduce_to_with_a_kernel_conditions_exactly(monkeypatch):
    # K5 with a tiny budget: a kernel stays beside the two kept nodes
    monkeypatch.setattr(elim_mod, "Budget", lambda: TINY)
    rng = np.random.default_rng(2)
    p = _problem(nx.complete_graph(5), rng)
    table, recover = reduce_to(p, ("0", "4"))
    for a in range(len(p.node_costs["0"])):
        for c in range(len(p.node_costs["4"])):
            fixed = dict(p.node_costs)
            fixed["0"] = np.where(np.arange(len(fixed["0"])) == a, fixed["0"], np.inf)
            fixed["4"] = np.where(np.arange(len(fixed["4"])) == c, fixed["4"], np.inf)
            want = brute_force(CostGraph(fixed, p.edges)).cost
            assert table[a, c] == pytest.approx(want, rel=1e-9)
            assert p.total(recover((a, c))) == pytest.approx(want, rel=1e-9)


def test_infeasible_problem_says_so():
    p = CostGraph(
        {"a": np.array([0.0, 1.0]), "b": np.array([0.0, 1.0])},
        (("a", "b", np.full((2, 2), np.inf)),),
    )
    sol = solve(p)
    assert sol.status == "infeasible" and math.isinf(sol.cost)


def test_ilp_with_tables_of_three_variables():
    # the kernel ILP accepts tables over 3 variables (left by factor elimination)
    rng = np.random.default_rng(8)
    fp = FactorProblem([2, 3, 2], [rng.random(2), rng.random(3), rng.random(2)])
    fp.add((0, 1, 2), rng.random((2, 3, 2)))
    fp.add((2, 0), rng.random((2, 2)))
    res = solve_ilp(fp, [0, 1, 2])
    best = min(fp.value(np.array([a, b, c])) for a in range(2) for b in range(3) for c in range(2))
    assert res.status == "optimal" and fp.value(res.assign) == pytest.approx(best)
