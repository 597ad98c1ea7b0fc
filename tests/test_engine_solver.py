"""The elimination DP is exact: equal to brute force and to the ILP on many small graphs."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from taps_core.errors import InvalidInputError
from taps_core.solver import (
    CostGraph,
    brute_force,
    ilp,
    min_plus,
    problem_from_json,
    reduce_to,
    solve,
)
from taps_core.solver.minplus import min_plus_power, min_plus_values, repeated_squaring


def _problem(
    graph: nx.Graph, rng: np.random.Generator, *, max_s: int = 3, forbid: float = 0.0
) -> CostGraph:
    costs = {str(n): rng.random(int(rng.integers(1, max_s + 1))) for n in graph.nodes}
    edges = []
    for u, v in graph.edges:
        m = rng.random((len(costs[str(u)]), len(costs[str(v)])))
        if forbid:
            m[rng.random(m.shape) < forbid] = np.inf
        edges.append((str(u), str(v), m))
    return CostGraph(costs, tuple(edges))


def _check(p: CostGraph) -> None:
    got, want = solve(p), brute_force(p)
    if np.isinf(want.cost):
        assert np.isinf(got.cost)
        return
    assert got.cost == pytest.approx(want.cost, rel=1e-12)
    assert p.total(got.strategies) == pytest.approx(got.cost, rel=1e-12)


@pytest.mark.parametrize("seed", range(25))
def test_random_trees_match_brute_force(seed):
    rng = np.random.default_rng(seed)
    tree = nx.random_labeled_tree(int(rng.integers(1, 9)), seed=seed)
    _check(_problem(tree, rng))


def _series_parallel(rng: np.random.Generator, size: int) -> nx.Graph:
    g = nx.Graph([(0, 1)])
    nxt = 2
    for _ in range(size):
        u, v = list(g.edges)[int(rng.integers(len(g.edges)))]
        if rng.random() < 0.5:  # series: subdivide the edge
            g.remove_edge(u, v)
            g.add_edges_from([(u, nxt), (nxt, v)])
        else:  # parallel: a new path beside it
            g.add_edges_from([(u, nxt), (nxt, v)])
        nxt += 1
    return g


@pytest.mark.parametrize("seed", range(25))
def test_series_parallel_graphs_match_brute_force(seed):
    rng = np.random.default_rng(100 + seed)
    _check(_problem(_series_parallel(rng, int(rng.integers(1, 6))), rng, forbid=0.2))


@pytest.mark.parametrize("seed", range(25))
def test_graphs_with_cycles_and_knots_match_brute_force(seed):
    rng = np.random.default_rng(200 + seed)
    g = nx.gnp_random_graph(int(rng.integers(4, 8)), 0.7, seed=seed)
    _check(_problem(g, rng, forbid=0.1))


def test_complete_graph_needs_factor_elimination():
    # K5 has no node of degree <= 2: tables over 3-4 neighbours solve it, nothing is left over
    rng = np.random.default_rng(7)
    p = _problem(nx.complete_graph(5), rng)
    sol = solve(p)
    assert sol.status == "optimal" and sol.stats["kernel_nodes"] == 0
    assert sol.cost == pytest.approx(brute_force(p).cost, rel=1e-12)


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 7), st.floats(0.0, 1.0), st.integers(0, 10_000))
def test_property_dp_equals_ilp(n, density, seed):
    rng = np.random.default_rng(seed)
    p = _problem(nx.gnp_random_graph(n, density, seed=seed), rng)
    assert solve(p).cost == pytest.approx(ilp(p).cost, rel=1e-9)


def test_reduce_to_gives_conditional_optimum():
    rng = np.random.default_rng(3)
    g = nx.cycle_graph(6)
    g.add_edge(0, 3)
    p = _problem(g, rng)
    table, recover = reduce_to(p, ("0", "3"))
    for a in range(len(p.node_costs["0"])):
        for c in range(len(p.node_costs["3"])):
            fixed = {**p.node_costs}
            fixed["0"] = np.where(np.arange(len(fixed["0"])) == a, fixed["0"], np.inf)
            fixed["3"] = np.where(np.arange(len(fixed["3"])) == c, fixed["3"], np.inf)
            want = brute_force(CostGraph(fixed, p.edges)).cost
            assert table[a, c] == pytest.approx(want, rel=1e-12)
            assert p.total(recover((a, c))) == pytest.approx(want, rel=1e-12)


def test_min_plus_and_power_match_naive():
    rng = np.random.default_rng(5)
    a, mid, b = rng.random((4, 5)), rng.random(5), rng.random((5, 3))
    out, arg = min_plus(a, mid, b)
    naive = (a[:, :, None] + mid[None, :, None] + b[None, :, :]).min(axis=1)
    assert np.allclose(out, naive)
    assert np.allclose(a[np.arange(4)[:, None], arg] + mid[arg] + b[arg, np.arange(3)], out)
    m = rng.random((4, 4))
    naive_pow = m
    for _ in range(6):
        naive_pow = (naive_pow[:, :, None] + m[None, :, :]).min(axis=1)
    assert np.allclose(min_plus_power(m, 7), naive_pow)


@pytest.mark.parametrize("k", [1, 2, 3, 6, 13, 64])
def test_repeated_squaring_composes_in_order_with_run_lengths(k: int) -> None:
    """Runs are joined left to right and each join is told the true run lengths (the layer
    offsets the front schedule shifts by)."""

    def join(x: tuple[int, ...], n_x: int, y: tuple[int, ...], n_y: int) -> tuple[int, ...]:
        assert (len(x), len(y)) == (n_x, n_y)
        return x + tuple(v + n_x for v in y)  # y's layers follow x's

    assert repeated_squaring((0,), k, join) == tuple(range(k))
    with pytest.raises(ValueError, match="k must be >= 1"):
        repeated_squaring((0,), 0, join)


def test_selection_fast_paths_match_dense():
    rng = np.random.default_rng(9)
    a = rng.random((6, 5))
    b = np.full((5, 4), np.inf)
    b[np.arange(5), rng.integers(0, 4, 5)] = rng.random(5)
    mid = rng.random(5)
    out, _ = min_plus(a, mid, b)
    dense = (a[:, :, None] + mid[None, :, None] + b[None, :, :]).min(axis=1)
    assert np.array_equal(np.isinf(out), np.isinf(dense))
    assert np.allclose(out[np.isfinite(out)], dense[np.isfinite(dense)])
    out_t, _ = min_plus(b.T, mid, a.T)
    assert np.allclose(np.nan_to_num(out_t.T, posinf=9), np.nan_to_num(dense, posinf=9))


def test_issue_example_problem():
    p = problem_from_json(
        {
            "nodes": [{"name": "a", "costs": [1.0, 2.0]}, {"name": "b", "costs": [0.0, 0.0]}],
            "edges": [{"src": "a", "dst": "b", "costs": [[0, 3], [3, 0]]}],
        }
    )
    sol = solve(p)
    assert sol.strategies == {"a": 0, "b": 0}
    assert sol.cost == 1.0


@pytest.mark.parametrize(
    "bad, field",
    [
        ({"nodes": 3}, "problem"),
        ({"nodes": [{"name": "a"}]}, "nodes[0]"),
        ({"nodes": [{"name": "a", "costs": []}]}, "nodes[0].costs"),
        (
            {
                "nodes": [{"name": "a", "costs": [1]}],
                "edges": [{"src": "a", "dst": "z", "costs": [[1]]}],
            },
            "edges[a->z]",
        ),
        (
            {
                "nodes": [{"name": "a", "costs": [1]}, {"name": "b", "costs": [1, 2]}],
                "edges": [{"src": "a", "dst": "b", "costs": [[1]]}],
            },
            "edges[a->b].costs",
        ),
    ],
)
def test_bad_problems_name_the_field(bad, field):
    with pytest.raises(InvalidInputError, match=field.replace("[", r"\[").replace("]", r"\]")):
        problem_from_json(bad)


@pytest.mark.parametrize("case", ["dense", "rows select", "columns select", "each i one j",
                                  "each k one j", "chunked", "transposed view",
                                  "transposed view, each i one j"])
def test_min_plus_values_equal_min_plus_and_the_argmin_is_attained(case):
    """The one min-plus product (taps_core.solver.minplus): values with and without argmin
    are identical on every path, and the argmin attains the value."""

    rng = np.random.default_rng(11)
    n_i, n_j, n_k = (700, 30, 40) if case == "chunked" else (6, 5, 4)
    a, mid, b = rng.random((n_i, n_j)), rng.random(n_j), rng.random((n_j, n_k))
    if case == "rows select":  # each j maps to one k
        b = np.where(np.arange(n_k)[None, :] == rng.integers(0, n_k, n_j)[:, None], b, np.inf)
    elif case == "columns select":  # each j comes from one i
        a = np.where(np.arange(n_i)[None, :] == rng.integers(0, n_i, n_j)[:, None], a.T, np.inf).T
    elif case == "each i one j":
        a = np.where(np.arange(n_j)[None, :] == rng.integers(0, n_j, n_i)[:, None], a, np.inf)
    elif case == "each k one j":
        b = np.where(np.arange(n_j)[:, None] == rng.integers(0, n_j, n_k)[None, :], b, np.inf)
    elif case.startswith("transposed view"):  # as an elimination passes a matrix's .T
        if case.endswith("one j"):
            a = np.where(np.arange(n_j)[None, :] == rng.integers(0, n_j, n_i)[:, None], a, np.inf)
        a = np.ascontiguousarray(a.T).T
        assert a.flags.f_contiguous and not a.flags.c_contiguous
    out, arg = min_plus(a, mid, b)
    dense = (a[:, :, None] + mid[None, :, None] + b[None, :, :]).min(axis=1)
    assert np.array_equal(out, min_plus_values(a, mid, b))
    assert np.allclose(np.nan_to_num(out, posinf=-1), np.nan_to_num(dense, posinf=-1))
    picked = a[np.arange(n_i)[:, None], arg] + mid[arg] + b[arg, np.arange(n_k)[None, :]]
    finite = np.isfinite(out)
    assert np.allclose(picked[finite], out[finite])
    terms = a[:, :, None] + (mid[:, None] + b)[None, :, :]  # no ties among random floats
    assert np.array_equal(arg[finite], terms.argmin(axis=1)[finite])


@pytest.mark.parametrize("case", ["rows select", "dense"])
def test_min_plus_argmin_is_the_first_minimum_as_numpy_picks(case):
    """Ties are broken alike on every path (the first j reaching the minimum), so plans do not
    depend on which path computed the product."""
    rng = np.random.default_rng(3)
    n_i, n_j, n_k = (6, 40, 5) if case == "rows select" else (260, 100, 90)
    a = rng.integers(0, 3, (n_i, n_j)).astype(float)  # small integers: many ties
    mid = rng.integers(0, 2, n_j).astype(float)
    b = rng.integers(0, 3, (n_j, n_k)).astype(float)
    if case == "rows select":
        b = np.where(np.arange(n_k)[None, :] == rng.integers(0, n_k, n_j)[:, None], b, np.inf)
    full = a[:, :, None] + mid[None, :, None] + b[None, :, :]
    out, arg = min_plus(a, mid, b)
    reached = np.isfinite(full.min(axis=1))
    assert np.array_equal(out, full.min(axis=1))
    assert np.array_equal(arg[reached], full.argmin(axis=1)[reached])


def test_search_budgets_count_this_threads_cpu_not_the_wall():
    """A budget's clock does not run while the thread waits (other load on the machine), so a
    budget cuts a search at the same point on an idle and on a busy machine."""
    import time

    from taps_core.solver.clock import cpu_seconds

    before = cpu_seconds()
    time.sleep(0.3)
    assert cpu_seconds() - before < 0.1


@pytest.mark.parametrize(
    ("shape", "sparse"),
    [((200, 140, 120), False), ((5, 900, 800), False), ((1600, 100, 100), True)],
)
def test_rows_over_the_cores_equal_the_serial_product(shape, sparse) -> None:
    """Large products split their rows over the cores: the same values and the same argmins
    (the first j reaching each minimum), infinite entries included, with ``mid + b`` dense or
    mostly infinite (only its finite entries visited)."""
    from taps_core.solver import minplus

    n_i, n_j, n_k = shape
    rng = np.random.default_rng(3)
    a = rng.integers(0, 5, (n_i, n_j)).astype(float)  # small integers: many ties
    a[rng.random((n_i, n_j)) < 0.3] = np.inf
    b = rng.integers(0, 5, (n_j, n_k)).astype(float)
    if sparse:
        b[rng.random((n_j, n_k)) < 0.8] = np.inf
    mid = rng.integers(0, 3, n_j).astype(float)
    right = np.ascontiguousarray(mid[:, None] + b)
    left = minplus._finite_entries(np.ascontiguousarray(a), 1, False)
    rows = minplus._finite_entries(right, minplus.SPARSE_SHARE, False)
    assert rows[2] is not sparse and not left[2]  # a: 30% infinite, visited by its index
    assert minplus._terms(left, rows, n_k) >= minplus.PARALLEL_TERMS
    serial = (np.empty((n_i, n_k)), np.zeros((n_i, n_k), dtype=np.int32))
    minplus._rows(np.ascontiguousarray(a), False, right, left, rows, *serial)
    out, arg = min_plus(a, mid, b)
    assert np.array_equal(out, serial[0]) and np.array_equal(arg, serial[1])
    terms = a[:, :, None] + right[None, :, :]
    assert np.array_equal(out, terms.min(axis=1))
    reached = np.isfinite(out)  # where no term is finite the argmin is 0, numpy's too
    assert np.array_equal(arg[reached], terms.argmin(axis=1)[reached])
    assert np.array_equal(min_plus_values(a, mid, b), out)
