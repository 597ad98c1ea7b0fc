"""The memory-first IOPDDL search: feasible on tight problems with forbidden entries, a repair
that reaches the limit whenever the minimum-usage assignment does, exact answers on tiny
problems, determinism, the time limit, and a slice of the contest-shaped benchmark."""

from __future__ import annotations

import itertools
import math
import time

import numpy as np
import pytest

from benchmarks import iopddl_contest
from taps_core.solver.iopddl import feasible as feas
from taps_core.solver.iopddl.format import FORBIDDEN, IopddlProblem, evaluate
from taps_core.solver.iopddl.solve import solve_iopddl


def _forbidden_picks(p: IopddlProblem, sol: list[int]) -> int:
    """How many chosen node strategies and edge pairs are forbidden."""
    count = sum(int(c[s] >= FORBIDDEN) for c, s in zip(p.costs, sol))
    return count + sum(
        int(f[sol[u] * len(p.costs[v]) + sol[v]] >= FORBIDDEN) for u, v, f in p.edges
    )


def _tiny(seed: int, nodes: int = 6) -> IopddlProblem:
    """A random problem small enough for brute force, with forbidden entries and a limit
    between the least and the cheapest-per-node peaks."""
    rng = np.random.default_rng(seed)
    k = rng.integers(1, 4, nodes)
    costs = [rng.integers(0, 100, kk) for kk in k]
    for c in costs:
        if len(c) > 1 and rng.random() < 0.4:
            c[int(rng.integers(len(c)))] = FORBIDDEN
    usages = [rng.integers(1, 50, kk) for kk in k]
    lo = rng.integers(0, 6, nodes)
    spans = np.stack([lo, lo + rng.integers(1, 6, nodes)], axis=1).astype(np.int64)
    least = [int(np.argmin(np.where(c < FORBIDDEN, u, 10**9))) for c, u in zip(costs, usages)]
    edges = []
    for v in range(1, nodes):
        for u in sorted({int(rng.integers(v)), int(rng.integers(v))}):
            m = rng.integers(0, 60, k[u] * k[v])
            m[rng.random(m.size) < 0.15] = FORBIDDEN
            m[least[u] * k[v] + least[v]] = 7  # the least-usage plan stays allowed
            edges.append((u, v, m))
    p = IopddlProblem("tiny", costs, usages, spans, edges, None)
    cheap = [int(np.argmin(c)) for c in costs]
    lo_peak, hi_peak = evaluate(p, least)[1], evaluate(p, cheap)[1]
    return IopddlProblem("tiny", costs, usages, spans, edges, int((lo_peak + hi_peak) / 2))


def _brute(p: IopddlProblem) -> float:
    best = math.inf
    for sol in itertools.product(*(range(len(c)) for c in p.costs)):
        cost, _, fits = evaluate(p, list(sol))
        if fits and cost < best:
            best = cost
    return best


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_tight_problems_with_forbidden_entries_get_feasible_answers(seed):
    p = iopddl_contest.generate(400, seed=seed, mean_strategies=10.0)
    assert sum(int((c >= FORBIDDEN).sum()) for c in p.costs) > 100
    res = feas.search(p, time_limit_s=2.0)
    sol = [int(x) for x in res.solution]
    cost, peak, fits = evaluate(p, sol)
    assert fits and res.fits and peak <= p.usage_limit and math.isfinite(cost)
    assert _forbidden_picks(p, sol) == 0


def test_solve_iopddl_is_feasible_on_a_tight_problem():
    p = iopddl_contest.generate(600, seed=5, mean_strategies=8.0)
    out = solve_iopddl(p, time_limit_s=6.0)
    cost, _peak, fits = evaluate(p, out["solution"])
    assert out["status"] in ("feasible", "optimal") and fits and cost == out["cost"]
    assert out["lower_bound"] is None or out["lower_bound"] <= cost
    assert _forbidden_picks(p, out["solution"]) == 0


@pytest.mark.parametrize("slack", [1.0, 1.02])
def test_repair_reaches_the_limit_when_min_usage_fits(slack):
    p = iopddl_contest.generate(500, seed=11, mean_strategies=8.0, slack=slack)
    f = feas.flatten(p)
    cheap = np.array([int(np.argmin(c)) for c in f.cost], dtype=np.int64)
    assert not evaluate(p, [int(x) for x in cheap])[2]  # the cheapest plan is over the limit
    fixed = feas.repair(f, cheap)
    assert fixed is not None
    sol = [int(x) for x in fixed]
    assert evaluate(p, sol)[2] and all(p.costs[i][s] < FORBIDDEN for i, s in enumerate(sol))


def test_repair_gives_up_only_below_the_least_peak():
    p = iopddl_contest.generate(300, seed=4, mean_strategies=6.0, slack=0.99)
    f = feas.flatten(p)
    assert evaluate(p, [int(x) for x in feas.min_usage(f)])[1] > p.usage_limit
    assert feas.repair(f, np.zeros(len(f.k), dtype=np.int64)) is None
    assert not feas.search(f, time_limit_s=1.0).fits


@pytest.mark.parametrize("seed", range(6))
def test_tiny_problems_match_brute_force(seed):
    p = _tiny(seed)
    best = _brute(p)
    out = solve_iopddl(p, time_limit_s=10.0)
    assert out["status"] == "optimal" and out["cost"] == best
    res = feas.search(p, time_limit_s=1.0)
    cost, _, fits = evaluate(p, [int(x) for x in res.solution])
    assert fits and cost == best  # the search alone reaches the optimum here too


def test_search_is_deterministic():
    p = iopddl_contest.generate(800, seed=9, mean_strategies=8.0)
    settings = feas.Settings(work_per_s=2_000.0)  # the budget, not the clock, ends both
    a = feas.search(p, time_limit_s=10.0, settings=settings)
    b = feas.search(p, time_limit_s=10.0, settings=settings)
    assert a.stats["stopped_by"] == b.stats["stopped_by"] == "budget"
    assert np.array_equal(a.solution, b.solution) and a.cost == b.cost


def test_time_limit_is_honoured_on_a_medium_problem():
    p = iopddl_contest.generate(6000, seed=2, mean_strategies=6.0)
    start = time.perf_counter()
    out = solve_iopddl(p, time_limit_s=8.0)
    assert time.perf_counter() - start < 8.0 * 1.5  # generous: a shared machine
    assert evaluate(p, out["solution"])[2]


def test_benchmark_slice_prints_scores(tmp_path):
    lines: list[str] = []
    rows = iopddl_contest.run(((200, 6.0, 2.0),), log=lines.append)
    assert "mean score" in lines[-1] and rows[0]["score"]["ours"] > 0
    assert max(rows[0]["score"].values()) == 1.0
    # the docs/RESULTS.md block of that run, written between its markers and kept on rewrite
    from benchmarks.results_block import kept_block, write_block

    text = iopddl_contest.section(rows, "python -m benchmarks.iopddl_contest")
    ours = iopddl_contest.mean_scores(rows)["ours"]
    assert "\n| 200 | " in text and f"Mean score: ours {ours:.3f}," in text
    doc = tmp_path / "RESULTS.md"
    doc.write_text("# Results\n")
    write_block(doc, iopddl_contest.BEGIN, iopddl_contest.END, text)
    write_block(doc, iopddl_contest.BEGIN, iopddl_contest.END, text)
    assert doc.read_text().count(iopddl_contest.BEGIN) == 1
    assert kept_block(doc, iopddl_contest.BEGIN, iopddl_contest.END) == text
