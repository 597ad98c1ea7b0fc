"""Section 1 of the report: TAPS's communication time against the three baseline planners."""

from __future__ import annotations

from benchmarks.plan_quality import QualityResult, QualityRow
from benchmarks.report_sections.gain import breakdown_section, claim_paragraph
from benchmarks.report_sections.inputs import RunResults
from benchmarks.report_sections.markdown import figure, num, pct, sec, table
from taps_core.plan.report import fmt_seconds

PLAN_NAMES = {
    "taps": "TAPS",
    "volume": "volume-based",
    "megatron": "Megatron-style",
    "data_parallel": "data parallel",
}

STAT_ROWS = (
    ("realistic", "realistic"),
    ("realistic_train", "realistic, training"),
    ("realistic_infer", "realistic, inference"),
    ("realistic_dgx", "realistic, DGX presets only"),
    ("material", "material (incl. TAPS leaving nodes idle)"),
    ("multi_node", "multi-node, both fit"),
    ("all", "all where both fit"),
)

SCENARIO_HEADER = [
    "cluster",
    "GPUs",
    "mode",
    "batch",
    "TAPS comm",
    "volume comm",
    "Megatron comm",
    "data-parallel comm",
    "TAPS vs volume",
    "vs Megatron",
    "vs data parallel",
    "TAPS step",
    "step vs volume",
    "TAPS across nodes",
    "compare (s)",
]


def quality_section(r: RunResults) -> list[str]:
    """Section 1's lines: method, reduction statistics, per-model tables, breakdowns, timing."""
    q = r.quality
    assert q is not None
    out = _method(r, q)
    out += [_stats_table(q), ""]
    out += claim_paragraph(r)
    out += [
        figure(r.figures, "reduction_heatmap", "Reduction over volume-based search"),
        "",
    ]
    for model in dict.fromkeys(row.model for row in q.rows):
        out += [f"### {model}", ""]
        body = [_scenario_cells(row) for row in q.rows if row.model == model]
        out += [table(SCENARIO_HEADER, body, "lrlr" + "r" * 11), ""]
    out += [
        "Times are per step. `*` realistic, `†` material but TAPS leaves the nodes repeating one "
        "node's work, no mark: communication immaterial. *TAPS across nodes*: share of TAPS's "
        "compute in ops split across nodes. *no fit*: over 80 GiB per GPU, or the batch cannot "
        "be split that way (reasons below).",
        "",
    ]
    out += _no_fit_reasons(q)
    for i, b in enumerate(q.breakdowns):
        out += breakdown_section(r, b, "" if i == 0 else f"_{i + 1}")
    out += _planning_time(r, q)
    return out


def _method(r: RunResults, q: QualityResult) -> list[str]:
    """The heading and "How it was measured": planners, metrics, batches, what counts."""
    cfg = r.config
    scaled = sorted(
        {
            f"{row.model} {row.sample_batch} -> {row.batch} on {row.nodes} nodes"
            for row in q.rows
            if row.batch != row.sample_batch
        }
    )
    return [
        "## 1. Plan quality: TAPS vs volume-based, Megatron-style and data-parallel plans",
        "",
        "How it was measured:",
        "",
        "- Every scenario runs `taps_core.search.baselines.compare`: TAPS (topology-aware DP), the "
        "volume-based search (the same DP, but each collective costed by the bytes each GPU "
        "sends at one fixed rate, blind to which link carries them), Megatron-style (data "
        "parallel across nodes, column/row tensor parallelism inside a node) and pure data "
        "parallelism, all in the same strategy space, under the GPU's memory limit (80 GiB), "
        "and **all reported with the topology-aware model**.",
        "- *Communication time* is the plan's summed per-op `comm_time_s` for one step: forward, "
        "backward and gradient sync in training, one forward pass in inference. The reduction is "
        "`taps_core.search.baselines.reduction`: `1 - TAPS comm / other comm`.",
        "- TAPS minimises the **step time** (compute + communication), not communication "
        "alone, so it may accept more communication to save compute (a negative reduction); its "
        "step time is never above a baseline's when both fit.",
        "- The global batch is kept a multiple of the node count, so that data parallelism "
        "across every node (what the baselines assume) applies: each model's sample batch is "
        "used where it divides, otherwise raised to `max(sample batch, nodes)` rounded up to a "
        "multiple of the nodes; the batch column shows the value used"
        + (f" ({', '.join(scaled)})." if scaled else "."),
        f"- *Material* (no mark, `†` or `*`): the volume-based plan spends at least "
        f"{fmt_seconds(cfg.material_comm_s)} and {100 * cfg.material_comm_share:.0f}% of its "
        "step communicating; elsewhere a few microseconds saved can read as 100% (shown in "
        "parentheses in the figure).",
        f"- *Realistic* (`*`): material, and on a multi-node cluster TAPS's plan splits at least "
        f"{100 * cfg.realistic_inter_share:.0f}% of its compute across the nodes. `†`: material "
        "but TAPS's best plan leaves the nodes repeating one node's work (small models whose "
        "gradient sync over the network costs more than the compute it saves); the reduction "
        "is then real in the model, but the scenario is one nobody would run.",
        "- Clusters: the dgx-a100 and dgx-h100 presets with 1-16 nodes of 8 GPUs, and the "
        "ethernet lab (dgx-a100 boxes with a single 12.5 GB/s NIC per node).",
        "",
    ]


def _stats_table(q: QualityResult) -> str:
    """Max and median reduction (percent) and the count reaching 85%, per scenario set."""
    rows = []
    for key, name in STAT_ROWS:
        st = q.stats[key]
        rows.append(
            [
                name,
                str(st["count"]),
                pct(st.get("max")),
                st.get("max_scenario", "n/a"),
                pct(st.get("median")),
                str(st.get("at_least_85", 0)),
            ]
        )
    return table(
        ["scenarios", "count", "max reduction", "where", "median reduction", ">= 85%"],
        rows,
        "lrrlrr",
    )


def _plan_cell(row: QualityRow, label: str) -> str:
    """One planner's communication seconds per step in a scenario, or why there are none."""
    p = row.plans.get(label)
    if p is None:
        return "n/a"
    return sec(p.comm_s) if p.fits else "no fit"


def _mark(row: QualityRow) -> str:
    """The scenario's mark after its reduction: `*` realistic, `†` material, else none."""
    if row.realistic:
        return " *"
    if row.material:
        return " †"
    return ""


def _scenario_cells(row: QualityRow) -> list[str]:
    """One scenario's row of the per-model table (seconds per step, reductions in percent)."""
    if row.skipped:
        return [row.cluster, str(row.gpus), row.mode, str(row.batch), row.skipped] + [""] * (
            len(SCENARIO_HEADER) - 5
        )
    taps = row.plans["taps"]
    return [
        row.cluster,
        str(row.gpus),
        row.mode,
        str(row.batch),
        _plan_cell(row, "taps"),
        _plan_cell(row, "volume"),
        _plan_cell(row, "megatron"),
        _plan_cell(row, "data_parallel"),
        pct(row.reduction_vs.get("volume")) + _mark(row),
        pct(row.reduction_vs.get("megatron")),
        pct(row.reduction_vs.get("data_parallel")),
        sec(taps.total_s) if taps.fits else "no fit",
        pct(row.step_reduction_vs_volume),
        pct(row.taps_inter_share, 0) if row.nodes > 1 else "-",
        num(row.compare_s, ".2f"),
    ]


def _no_fit_reasons(q: QualityResult) -> list[str]:
    """A collapsed list of the engine's reasons plans do not fit, with where; none if all fit."""
    reasons: dict[str, list[str]] = {}
    for row in q.rows:
        for label, p in row.plans.items():
            if not p.fits:
                short = p.reason.split(";")[0]
                reasons.setdefault(f"{PLAN_NAMES[label]}: {short}", []).append(
                    f"{row.model}@{row.cluster} {row.mode}"
                )
    if not reasons:
        return []
    out = ["<details><summary>Why plans do not fit (engine messages)</summary>", ""]
    for reason, where in sorted(reasons.items()):
        shown = ", ".join(where[:6]) + (f" and {len(where) - 6} more" if len(where) > 6 else "")
        out.append(f"- {reason} ({shown})")
    out += ["", "</details>", ""]
    return out


def _planning_time(r: RunResults, q: QualityResult) -> list[str]:
    """How long `compare` took (seconds: total, median, slowest) and whether the budget hit."""
    s = q.stats
    return [
        "### Planning time per scenario",
        "",
        f"`compare` (four searches, each with the memory-limit bisection when it binds) took "
        f"{s['compare_s_total']:.0f} s over all scenarios; median "
        f"{num(s['compare_s_median'], '.2f')} s, slowest {num(s['compare_s_max'], '.1f')} s "
        f"({s['compare_slowest']}). Scenarios are not cut off one by one; the section has a "
        f"{r.config.quality_budget_s:.0f} s budget after which the remaining ones are skipped, "
        "and "
        + (
            f"{s['skipped']} scenarios were skipped for it."
            if s["skipped"]
            else "it was not reached."
        ),
        "",
        figure(r.figures, "compare_time", "compare() wall time per scenario"),
        "",
    ]
