"""The summary at the top of the report: one bullet per headline number of each section."""

from __future__ import annotations

import statistics

from benchmarks.bandwidth_sweep import Change, SweepResult
from benchmarks.plan_quality import QualityResult
from benchmarks.report_sections.inputs import RunResults
from benchmarks.report_sections.markdown import pct
from benchmarks.search_speed import REL_TOL, HeadlineA, SpeedResult, SpeedRow


def summary(r: RunResults) -> list[str]:
    """The "Summary" section's lines: plan quality, exactness, headlines, sweeps."""
    out = ["## Summary", ""]
    if r.quality is not None:
        out += _quality_bullets(r.quality)
    sp = r.speed
    if sp is not None:
        out += _exactness_bullets(sp)
        if sp.headline_b is not None:
            out.append(_headline_b_bullet(r, sp.headline_b))
        if sp.headline_a is not None:
            out.append(_headline_a_bullet(sp.headline_a))
    for sw in r.sweeps or []:
        out.append(_sweep_bullet(r, sw))
    out.append("")
    return out


def _quality_bullets(q: QualityResult) -> list[str]:
    """Bullets on the communication-time reductions (percent), fairness checks and the 85%."""
    s = q.stats
    real, mat, allr = s["realistic"], s["material"], s["all"]
    out = [
        f"- **Plan quality.** {s['ran']} scenarios planned ({s['skipped']} skipped); in "
        f"{allr['count']} both TAPS and the volume-based search have a plan that fits. On "
        f"the **{real['count']} realistic scenarios** (communication matters and TAPS "
        "really uses the cluster, see section 1) TAPS's communication time is up to "
        f"**{pct(real.get('max'))} lower** than the volume-based plan's "
        f"({real.get('max_scenario', 'n/a')}); median **{pct(real.get('median'))}**. "
        f"Training only: max {pct(s['realistic_train'].get('max'))} "
        f"({s['realistic_train'].get('max_scenario', 'n/a')}), median "
        f"{pct(s['realistic_train'].get('median'))}. DGX presets only (no Ethernet): max "
        f"{pct(s['realistic_dgx'].get('max'))} "
        f"({s['realistic_dgx'].get('max_scenario', 'n/a')}).",
        f"- Over every scenario where both fit: max {pct(allr.get('max'))}, median "
        f"{pct(allr.get('median'))}; single-node scenarios give ~0% (every byte is on "
        f"NVLink), and {s['taps_replicates_nodes']} material multi-node scenarios are left "
        "out of the realistic set because TAPS's best plan there leaves the other nodes "
        "repeating one node's work (their reductions, up to "
        f"{pct(mat.get('max'))} over all material scenarios, are real in the model but "
        "nobody would rent those nodes).",
    ]
    fair = s.get("fair_checks", {})
    if fair:
        out.append(_fair_bullet(fair))
    reached = real.get("at_least_85", 0)
    if reached:
        out.append(
            f"- **The paper's 85% is reached**: {reached} of the {real['count']} realistic "
            f"scenarios show >= 85% less communication ({s['realistic_train']['at_least_85']}"
            f" training, {s['realistic_infer']['at_least_85']} inference; "
            f"{s['realistic_dgx']['at_least_85']} on DGX clusters). Section 1 shows where "
            "the gain comes from."
        )
    else:
        out.append(
            "- **The paper's 85% is not reached** on any realistic scenario with our cost "
            "model; section 1 ('Why not 85%') says why."
        )
    return out


def _fair_bullet(fair: dict[str, object]) -> str:
    """The bullet counting scenarios where every planner's plan is proven optimal, and why the
    others are not (pipeline shapes left unbounded, or a memory-bound gap)."""
    gaps = fair.get("gap_left") or []
    open_ = fair.get("shapes_open")
    return (
        f"- **Every planner gets the same exact search.** In "
        f"{fair['scenarios_with_plans']} scenarios with a fitting plan, every plan's "
        f"status is proven optimal over its whole space in **{fair['all_optimal']}**"
        + (
            f"; in **{open_}** more, every plan is proven but for the pipeline shapes, so those "
            "plans say `feasible`: proven over all plans without stages and every framework "
            "configuration (pipelined ones included) with other shapes left unbounded (the "
            "default search in training on several hosts; `--prove-stages` bounds them), or, "
            "for ResNet-50 (not a stack of identical layers), every stage's plan proven with "
            "the stage count and split from a guided search"
            if open_ is not None and open_ else ""
        )
        + (f"; a proven gap remains in {len(gaps)} (memory binds: {', '.join(gaps[:6])}"
           + (f" and {len(gaps) - 6} more" if len(gaps) > 6 else "") + ")" if gaps else "")
        + f"; the volume-based plan is the best of all fitting plans under its own "
        f"(volume) objective in **{fair['volume_best_own']} of {fair['with_volume']}**; "
        f"TAPS's step time is never above a baseline's in **{fair['taps_fastest']} of "
        f"{fair['with_taps']}**."
    )


def _exactness_bullets(sp: SpeedResult) -> list[str]:
    """The DP-equals-ILP count and the ILP / DP time ratios; nothing if no ILP finished."""
    done = [row for row in sp.rows if row.ilp_finished]
    equal = [row for row in done if row.equal]
    ratios = [row.ratio for row in done if row.ratio]
    skipped = sum(row.ilp_s is None and row.ilp_status.startswith("not run") for row in sp.rows)
    unfinished = len(sp.rows) - len(done) - skipped
    if not ratios:
        return []
    return [
        f"- **Exactness.** The DP's optimum equals the ILP's (relative {REL_TOL:g}) in "
        f"**{len(equal)} of {len(done)}** grid rows where the ILP finished; "
        f"{unfinished} ILP(s) hit the time limit or failed, {skipped} rows were too large "
        f"to attempt. The ILP takes {min(ratios):.0f}x to {max(ratios):,.0f}x longer "
        f"than the DP (median {statistics.median(ratios):,.0f}x)."
    ]


def _headline_b_bullet(r: RunResults, b: SpeedRow) -> str:
    """Headline (b): DP and ILP seconds on the large GPT, and the speed-up target."""
    return (
        f"- **Headline (b)**, {b.layers}-layer GPT ({b.model} shapes) on dgx-a100:"
        f"{b.nodes} ({b.gpus} GPUs), training: DP {b.dp_s:.3f} s, ILP "
        + (
            f"{b.ilp_s:.1f} s, same optimum: {b.equal}, **{b.ratio:,.0f}x** "
            f"(target >= {r.config.headline_b_target:.0f}x: "
            f"{'met' if b.ratio >= r.config.headline_b_target else 'NOT met'})."
            if b.ratio
            else f"{b.ilp_status}."
        )
    )


def _headline_a_bullet(a: HeadlineA) -> str:
    """Headline (a): the full search's wall seconds against 5 s, and the predicted step."""
    return (
        f"- **Headline (a)**, {a.model} training, {a.layers} layers, {a.cluster} "
        f"({a.gpus} GPUs, batch {a.batch}): the full `search` takes "
        f"**{a.search_wall_s:.1f} s** (target 5 s: "
        f"{'met' if a.search_wall_s <= 5 else 'NOT met'}; {a.dp_solves} DP solves, "
        f"status {a.status}); the exact unconstrained DP alone takes "
        f"**{a.unconstrained_dp_s:.2f} s** (plus {a.unconstrained_build_s:.2f} s to build "
        f"the cost graph). Predicted step **{a.total_s:.1f} s**"
        + (
            f" against the {a.measured_s:.1f} s Megatron-LM measured for this run "
            f"(ratio {a.total_s / a.measured_s:.2f}; target 0.5-2)"
            if a.measured_s
            else ""
        )
        + f": {a.summary}."
    )


def _sweep_bullet(r: RunResults, sw: SweepResult) -> str:
    """One sweep's plan switches, at which NIC bandwidths (GB/s), ties not counted."""
    real = [c for c in sw.changes if not c.tie and not c.missed_s and not c.rearranged]
    ties = sum(c.tie for c in sw.changes)
    missed = sum(bool(c.missed_s) and not c.tie for c in sw.changes)
    moved = sum(c.rearranged and not c.tie for c in sw.changes)
    where = ", ".join(f"{_switch_Bps(c) / 1e9:.3g}" for c in real)
    return (
        f"- **Bandwidth sweep**, {sw.model} ({sw.mode}, {sw.nodes} nodes, NIC "
        f"{r.config.sweep_low_Bps / 1e9:.3g}-{r.config.sweep_high_Bps / 1e9:.3g} GB/s): "
        + (
            f"TAPS switches plan {len(real)} time(s), at about {where} GB/s per NIC"
            if real
            else "no switch of TAPS's plan located"
            if missed
            else "TAPS keeps the same plan throughout"
        )
        + (f" ({ties} flips between equal-cost plans not counted)" if ties else "")
        + (f"; its plan changes in {missed} interval(s) where the memory-bound search, not "
           "proven, missed a plan found at the neighbouring point (not narrowed down)"
           if missed else "")
        + (f"; {moved} rearrangement(s) of ops within one structure (TP / PP / DP, ZeRO, "
           "micro-batches, recomputation), not counted as switches"
           if moved else "")
        + "."
    )


def _switch_Bps(c: Change) -> float:
    """Where a plan switch happens (bytes/s per NIC): geometric mean of its bracket."""
    return (c.low_Bps * c.high_Bps) ** 0.5
