"""Solver at scale: generated problems shaped like real sharding graphs, against the ILP.

``python -m benchmarks.solver_scale [--quick] [--sizes 1000,5000,60000] [--time-limit S]``
prints one table. Problems are generated in the IOPDDL format (the ASPLOS / EuroSys 2025
contest on sharding XLA programs), shaped like its benchmarks: nodes in program order, about
1.5 edges per node (a local predecessor, often a second one nearby, sometimes a far one),
strategy counts from 1 to 900 (most small), resharding-like edge costs (free between
matching layouts), a few forbidden (10**18) pairs, live ranges from definition to last use,
usages that shrink as strategies shard more, and a usage limit between the smallest possible
peak and the peak of the cheapest-per-node plan ("tight"). The largest size runs through the
CLI (``solve-graph FILE``, JSON parsing included). Beside them: random 3-regular graphs with 2
strategies (frustrated costs), solved exactly and by the ILP.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import networkx as nx
import numpy as np

from taps_core.solver import CostGraph, ilp, solve
from taps_core.solver.factors import FactorProblem
from taps_core.solver.iopddl.format import FORBIDDEN, IopddlProblem, evaluate, parse
from taps_core.solver.iopddl.solve import solve_iopddl
from taps_core.solver.kernel import RangeRows, solve_ilp
from taps_core.solver.memory import segments

SHARDS = (1, 2, 4, 8, 16, 32, 64)


def strategy_count(rng: np.random.Generator) -> int:
    """1 (30%), 2-4 (30%), 5-16 (25%), 17-64 (13%), 65-900 (2%, log-uniform)."""
    r = rng.random()
    if r < 0.30:
        return 1
    if r < 0.60:
        return int(rng.integers(2, 5))
    if r < 0.85:
        return int(rng.integers(5, 17))
    if r < 0.98:
        return int(rng.integers(17, 65))
    return int(np.exp(rng.uniform(np.log(65), np.log(900))))


def generate(nodes: int, seed: int = 0, *, tightness: float = 0.3) -> dict[str, Any]:
    """An IOPDDL-format problem (as a JSON-ready dict) with ``nodes`` nodes."""
    rng = np.random.default_rng(seed)
    k = np.array([strategy_count(rng) for _ in range(nodes)])
    size = np.exp(rng.normal(16, 2, nodes))  # tensor bytes, log-normal around 9 MB
    shard = [rng.choice(SHARDS, size=kk) for kk in k]  # ways each strategy splits the tensor
    layout = [rng.integers(0, 8, size=kk) for kk in k]  # a label: equal labels reshard free
    edges: list[tuple[int, int]] = []
    for i in range(1, nodes):
        edges.append((max(0, i - 1 - int(rng.geometric(0.3)) + 1), i))
        if rng.random() < 0.5:
            far = rng.random() < 0.05
            gap = int(rng.integers(1, i + 1)) if far else int(rng.integers(1, min(i, 200) + 1))
            j = i - gap
            if j != edges[-1][0]:
                edges.append((j, i))
    last_use = np.arange(nodes) + 1
    for u, v in edges:
        last_use[u] = max(last_use[u], v + 1)
    intervals = [[int(i), int(last_use[i])] for i in range(nodes)]
    params = rng.random(nodes) < 0.05  # weights: live for the whole program
    for i in np.flatnonzero(params):
        intervals[i] = [0, nodes + 1]
    costs, usages = [], []
    for i in range(nodes):
        comm = size[i] * (1 - 1 / shard[i]) * rng.uniform(0.5, 2.0, k[i]) / 1e4
        compute = size[i] / shard[i] * rng.uniform(0.8, 1.2, k[i]) / 1e5
        costs.append([int(x) for x in comm + compute])
        usages.append([int(x) for x in size[i] / shard[i]])
    edge_costs = []
    for u, v in edges:
        same = layout[u][:, None] == layout[v][None, :]
        scale = size[v] / 1e4 * rng.uniform(0.5, 1.5)
        m = np.where(same, 0.0, scale * (1 + rng.random((k[u], k[v]))))
        if k[u] > 4 and k[v] > 4:
            m[(rng.random(m.shape) < 0.01) & ~same] = FORBIDDEN
        edge_costs.append([int(x) for x in m.reshape(-1)])
    problem = {
        "name": f"generated-{nodes}-{seed}",
        "nodes": {"intervals": intervals, "costs": costs, "usages": usages},
        "edges": {"nodes": [[int(u), int(v)] for u, v in edges], "costs": edge_costs},
    }
    parsed = parse({"problem": problem})
    low = _peak(parsed, [int(np.argmin(u)) for u in parsed.usages])
    cheap = _peak(parsed, [int(np.argmin(c)) for c in parsed.costs])
    problem["usage_limit"] = int(low + tightness * max(cheap - low, 0))
    return {"problem": problem}


def _peak(p: IopddlProblem, solution: list[int]) -> int:
    return int(evaluate(p, solution)[1])


def full_ilp(p: IopddlProblem, time_limit_s: float) -> tuple[float, float | None, str]:
    """(seconds, cost, status) of the ILP over the whole problem, memory rows included."""
    graph, mem = p.graph, p.memory
    names = list(graph.node_costs)
    fp = FactorProblem(
        [len(graph.node_costs[n]) for n in names], [graph.node_costs[n] for n in names]
    )
    for u, v, m in graph.edges:
        fp.add((int(u), int(v)), m)
    rows = None
    if mem is not None:
        lo = p.intervals[:, 0]
        hi = p.intervals[:, 1]
        seg = segments(lo, hi)
        use = [u.astype(float) for u in p.usages]
        rows = RangeRows(
            {i: int(seg.first[i]) for i in range(len(names))},
            {i: int(seg.last[i]) for i in range(len(names))},
            {i: use[i] for i in range(len(names))},
            np.full(seg.count, float(mem.limit)),
        )
    start = time.perf_counter()
    res = solve_ilp(fp, list(range(len(names))), rows=rows, time_limit_s=time_limit_s)
    took = time.perf_counter() - start
    if res is None or res.status == "infeasible":
        return took, None, "no solution" if res is None else "infeasible"
    cost, _, fits = evaluate(p, [int(x) for x in res.assign])
    return took, (cost if fits else None), res.status + ("" if fits else " (over the limit)")


def regular_graph(nodes: int, seed: int) -> CostGraph:
    """Random 3-regular graph, 2 strategies, frustrated (Ising-like) edge costs."""
    g = nx.random_regular_graph(3, nodes, seed=seed)
    rng = np.random.default_rng(seed)
    costs = {str(v): rng.random(2) * 0.1 for v in g.nodes}
    edges = []
    for u, v in g.edges:
        w = rng.normal()
        edges.append((str(u), str(v), np.array([[0.0, w], [w, 0.0]]) - min(0.0, w)))
    return CostGraph(costs, tuple(edges))


def run_regular(sizes: tuple[int, ...], log: Any = print) -> None:
    log("random 3-regular graphs, 2 strategies (time in s)")
    log(f"{'nodes':>6} {'solve':>8} {'ILP':>8} {'ratio':>7}  equal  kernel")
    for n in sizes:
        p = regular_graph(n, seed=n)
        t0 = time.perf_counter()
        sol = solve(p, time_limit_s=60)
        t1 = time.perf_counter()
        ref = ilp(p, time_limit_s=300)
        t2 = time.perf_counter()
        equal = math.isclose(sol.cost, ref.cost, rel_tol=1e-9)
        log(
            f"{n:>6} {t1 - t0:>8.2f} {t2 - t1:>8.2f} {(t2 - t1) / (t1 - t0):>7.1f}  "
            f"{equal!s:>5}  {sol.stats['kernel_nodes']} nodes, {sol.status}"
        )


def run_generated(
    sizes: tuple[int, ...], time_limit_s: float, ilp_up_to: int, log: Any = print
) -> None:
    log(f"generated IOPDDL-shaped problems, memory-limited (time limit {time_limit_s:.0f} s)")
    log(
        f"{'nodes':>6} {'edges':>7} {'MB':>6} {'time':>7} {'status':>9} {'gap':>7} "
        f"{'ILP time':>9} {'ILP status':>12} {'cost/ILP':>9}  method"
    )
    for n in sizes:
        data = generate(n, seed=n)
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "problem.json"
            path.write_text(json.dumps(data))
            mb = path.stat().st_size / 1e6
            if n >= 20_000:  # the largest ones through the CLI, parsing included
                start = time.perf_counter()
                out = subprocess.run(
                    [
                        sys.executable,
                        "-m",
                        "taps_core",
                        "solve-graph",
                        str(path),
                        "--time-limit",
                        str(time_limit_s),
                    ],
                    capture_output=True,
                    text=True,
                    check=False,
                )
                wall = time.perf_counter() - start
                if out.returncode != 0:
                    log(f"{n:>6} CLI failed: {out.stderr.strip()[:200]}")
                    continue
                res = json.loads(out.stdout)
            else:
                p = parse(data)
                start = time.perf_counter()
                res = solve_iopddl(p, time_limit_s=time_limit_s)
                wall = time.perf_counter() - start
        p = parse(data)
        ilp_s, ilp_cost, ilp_status = (math.nan, None, "not run")
        if n <= ilp_up_to:
            ilp_s, ilp_cost, ilp_status = full_ilp(p, max(time_limit_s, 120.0))
        ratio = f"{res['cost'] / ilp_cost:.4f}" if res["cost"] and ilp_cost else "-"
        gap = f"{100 * res['gap']:.2f}%" if res["gap"] is not None else "-"
        log(
            f"{n:>6} {len(p.edges):>7} {mb:>6.1f} {wall:>7.1f} {res['status']:>9} {gap:>7} "
            f"{ilp_s:>9.1f} {ilp_status:>12} {ratio:>9}  {res.get('method')}"
        )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.solver_scale", description=__doc__)
    ap.add_argument("--quick", action="store_true", help="small sizes only (about a minute)")
    ap.add_argument("--sizes", help="comma-separated node counts of the generated problems")
    ap.add_argument("--time-limit", type=float, default=240.0, help="seconds per problem")
    args = ap.parse_args(argv)
    if args.quick:
        sizes, regular, limit = (1000, 3000), (100, 200), min(args.time_limit, 60.0)
    else:
        sizes, regular, limit = (1000, 5000, 20_000, 60_000), (100, 200, 300), args.time_limit
    if args.sizes:
        sizes = tuple(int(x) for x in args.sizes.split(","))
    run_regular(regular)
    run_generated(sizes, limit, ilp_up_to=5000)
    return 0


if __name__ == "__main__":
    sys.exit(main())
