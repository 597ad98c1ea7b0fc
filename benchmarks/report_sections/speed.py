"""Section 2 of the report: the DP's search time and optimum against the ILP reference."""

from __future__ import annotations

from benchmarks.config import BenchConfig
from benchmarks.report_sections.inputs import RunResults
from benchmarks.report_sections.markdown import figure, num, sec, table
from benchmarks.search_speed import REL_TOL, HeadlineA, SpeedRow

ROW_HEADER = [
    "GPUs",
    "layers",
    "batch",
    "strategies",
    "ILP vars",
    "build (s)",
    "DP (s)",
    "DP kind",
    "plain elim. (s)",
    "ILP (s)",
    "ILP status",
    "DP optimum (s)",
    "ILP optimum (s)",
    "equal",
    "ILP / DP",
]


def speed_section(r: RunResults) -> list[str]:
    """Section 2's lines: method, the two headline checks, every grid row and the figures."""
    sp = r.speed
    assert sp is not None
    out = _method(r.config)
    rows = []
    b = sp.headline_b
    if b is not None:
        rows.append(_headline_b_row(r.config, b))
    a = sp.headline_a
    if a is not None:
        rows.append(_headline_a_row(a))
    out += [table(["check", "times", "result"], rows, "lll"), ""]
    if a is not None and a.note:
        out += [f"Search note for (a): {a.note}.", ""]
    out += [
        "### All rows",
        "",
        table(ROW_HEADER, [_speed_cells(row) for row in sp.rows], "rrrrrrrlrrlrrlr"),
        "",
        figure(r.figures, "speed_vs_layers", "Search time vs layers"),
        "",
        figure(r.figures, "speed_vs_gpus", "Search time vs GPUs"),
        "",
    ]
    return out


def _method(cfg: BenchConfig) -> list[str]:
    """The heading and "How it was measured": problem grid, DP, ILP limits, equality test."""
    return [
        "## 2. Search speed and exactness: DP vs the ILP reference",
        "",
        "How it was measured:",
        "",
        f"- Problem: a GPT with the `{cfg.speed_model}` shapes and 1-96 layers, "
        f"{cfg.speed_mode}ing, on dgx-a100:N (8-{8 * max(cfg.speed_nodes)} GPUs), batch "
        "max(sample batch, nodes); `taps_core.search.problem.build_problem` gives the cost graph "
        "(op nodes plus tensor-layout nodes, topology-aware costs).",
        "- DP: `taps_core.search.layered.solve_problem(problem, 0.0)` (repeated squaring over the "
        "identical layers when there are 3 or more, plain graph elimination otherwise); "
        "best of up to 5 runs while they take under a second together, timed after a second "
        "idle when the row before ran the ILP (this shared machine runs slower for a moment after "
        "seconds of full load). *Plain elim.*: "
        "`taps_core.solver.solve` on the whole cost graph, without the layer memo "
        f"(run up to {cfg.plain_max_vars:,} ILP-equivalent variables).",
        f"- ILP: `taps_core.solver.ilp` (Alpa-style one-hot + edge variables, scipy HiGHS) on "
        f"the same cost graph with a {cfg.ilp_time_limit_s:.0f} s HiGHS time limit, in a forked "
        "process; its time includes assembling the sparse model in Python. Instances with more "
        f"than {cfg.ilp_max_vars:,} variables are not attempted (the ILP needs ~20-40 us per "
        "variable here, so they would only hit the limit), nor any instance at least as large "
        "as one that already hit it.",
        f"- *Equal*: both optima agree to a relative {REL_TOL:g}; claimed only where the ILP "
        "finished with HiGHS status Optimal. Ratio = ILP time / DP time. Optima are the search "
        "objective, seconds per step (compute + communication).",
        "",
        "### Headline checks",
        "",
    ]


def _headline_b_row(cfg: BenchConfig, b: SpeedRow) -> list[str]:
    """Check (b): DP and ILP seconds and optima on the large GPT, and the speed-up target."""
    return [
        f"(b) DP vs ILP, {b.layers}-layer GPT, dgx-a100:{b.nodes} ({b.gpus} GPUs), "
        f"{cfg.speed_mode}",
        f"DP {b.dp_s:.3f} s ({b.dp_algorithm}); ILP "
        + (f"{b.ilp_s:.1f} s" if b.ilp_s is not None else b.ilp_status)
        + f"; optima {b.dp_cost_s:.9g} s vs {num(b.ilp_cost_s, '.9g')} s",
        (
            f"same optimum: {'yes' if b.equal else 'NO'}; ratio {b.ratio:,.0f}x "
            f"(target >= {cfg.headline_b_target:.0f}x: "
            f"{'met' if b.ratio >= cfg.headline_b_target else 'NOT met'})"
        )
        if b.ratio
        else "ILP did not finish: no equality claim",
    ]


def _headline_a_row(a: HeadlineA) -> list[str]:
    """Check (a): the planner's search seconds, its DP solves, memory (GiB) and step time."""
    solves = ", ".join(f"{t:.2f}" for t in a.dp_solve_s)
    return [
        f"(a) {a.model} training, {a.layers} layers, {a.cluster} ({a.gpus} GPUs), "
        f"batch {a.batch}",
        f"`planner.search` **{a.search_wall_s:.1f} s** wall ({a.search_reported_s:.1f} s "
        f"reported by the search); {a.dp_solves} DP solves ({solves} s); exact "
        f"unconstrained DP **{a.unconstrained_dp_s:.2f} s** + "
        f"{a.unconstrained_build_s:.2f} s cost-graph build",
        f"status {a.status}; plan {a.memory_gib:.1f} of {a.memory_limit_gib:.0f} GiB; "
        f"step {sec(a.total_s)} (comm {sec(a.comm_s)}); unconstrained optimum "
        f"{sec(a.unconstrained_cost_s)}"
        + (
            f" (needs more memory than the limit), Lagrangian bound {sec(a.lower_bound_s)}"
            if a.dp_solves > 1
            else " (fits: the plan is the proven optimum)"
        ),
    ]


def _speed_cells(row: SpeedRow) -> list[str]:
    """One grid row: sizes, build/DP/ILP seconds, both optima (s), equality and time ratio."""
    return [
        str(row.gpus),
        str(row.layers),
        str(row.batch),
        f"{row.strategies:,}",
        f"{row.ilp_vars:,}",
        f"{row.build_s:.2f}",
        f"{row.dp_s:.3f}",
        row.dp_algorithm,
        num(row.plain_s),
        num(row.ilp_s, ".1f"),
        row.ilp_status,
        f"{row.dp_cost_s:.6g}",
        num(row.ilp_cost_s, ".6g"),
        {True: "yes", False: "**NO**", None: "-"}[row.equal],
        f"{row.ratio:,.0f}x" if row.ratio else "-",
    ]
