"""Section 3 of the report: TAPS's plan as the NIC bandwidth between nodes is swept."""

from __future__ import annotations

from benchmarks.bandwidth_sweep import Change, SweepPoint, SweepResult
from benchmarks.report_sections.inputs import RunResults
from benchmarks.report_sections.markdown import figure, pct, sec, table

POINT_HEADER = [
    "NIC (GB/s)",
    "per node (GB/s)",
    "TAPS comm",
    "volume comm",
    "Megatron comm",
    "data-parallel comm",
    "TAPS vs volume",
    "TAPS step",
    "TAPS search",
    "TAPS plan (strategies carrying most compute)",
]


def sweep_section(r: RunResults) -> list[str]:
    """Section 3's lines: how the clusters are built and swept, then one part per sweep."""
    cfg = r.config
    out = [
        "## 3. Bandwidth sweep: TAPS's plan as the inter-node network changes",
        "",
        "Clusters built with `taps_core.build_cluster` like the dgx-a100 preset (8 "
        "A100-80GB per node, NVSwitch 300 GB/s per direction, 8 NICs per node, PCIe Gen4 32 GB/s "
        "from each GPU to its NIC), every NIC set to the bandwidth shown (per direction; the "
        f"preset has 25 GB/s), {cfg.sweep_points} points evenly spaced in log between "
        f"{cfg.sweep_low_Bps / 1e9:.3g} and {cfg.sweep_high_Bps / 1e9:.3g} GB/s. `compare` at "
        "each point; where TAPS's plan differs between two neighbouring points, two searches "
        "beside where the two plans' re-costed steps cross, else "
        f"{cfg.sweep_refine_steps} bisection steps with TAPS alone, narrow the switch down (a "
        "change the unproven memory-bound search explains, the other end's plan being faster "
        "re-costed, is reported and not narrowed down, and so is a *rearrangement*: both ends "
        "have the same TP / PP / DP sizes, ZeRO stage, micro-batches and kinds of "
        "recomputation, and only some ops move between equal-shaped splits). At most "
        f"{cfg.sweep_locate_searches} searches per sweep go to locating changes (a search at "
        "the memory-bound low bandwidths takes about a minute); a change met after that keeps "
        "the bracket reached. A "
        "switch whose two plans cost the same at the switch (relative 1e-9) is a *tie*: the "
        "search flipping between equal-cost plans, not a change of mind. Training is used when "
        "it fits in memory, inference otherwise.",
        "",
    ]
    for sw in r.sweeps or []:
        out += sweep_one(r, sw)
    return out


def sweep_one(r: RunResults, sw: SweepResult) -> list[str]:
    """One sweep: its points, figure, whether TAPS cares, every plan switch and the ties."""
    out = [
        f"### {sw.model}, {sw.mode}, batch {sw.batch}, {sw.nodes} nodes",
        "",
    ]
    if "train" in sw.reasons:
        out += [f"Training does not fit, so this sweep plans inference: {sw.reasons['train']}", ""]
    out += [
        table(POINT_HEADER, [_point_cells(p) for p in sw.points], "rrrrrrrrll"),
        "",
        figure(r.figures, f"bandwidth_sweep_{sw.model}", f"{sw.model}: comm time vs NIC bandwidth"),
        "",
        "The volume-based plan "
        + (
            "is the same at every point (its cost model does not see bandwidth); only its "
            "reported time moves."
            if sw.volume_plan_constant
            else "changes between points (unexpected: its cost model ignores bandwidth)."
        ),
        "",
    ]
    out += _flat_taps_note(sw)
    real = [c for c in sw.changes if not c.tie and not c.missed_s and not c.rearranged]
    ties = [c for c in sw.changes if c.tie]
    missed = [c for c in sw.changes if c.missed_s]
    moved = [c for c in sw.changes if c.rearranged and not c.tie]
    if not real:
        out += [("No switch of the best plan is located (up to ties): TAPS's plan changes only "
                 "where its unproven search missed a plan (below)." if missed else
                 "TAPS keeps one plan (up to ties) over the whole range."), ""]
    for i, ch in enumerate(real, start=1):
        out += _switch_lines(i, ch)
    if ties:
        out += _tie_lines(ties)
    if missed:
        out += _missed_lines(missed)
    if moved:
        out += _rearranged_lines(moved)
    return out


def _rearranged_lines(moved: list[Change]) -> list[str]:
    """Changes between grid points that keep the plan's structure (rearrangements)."""
    shown = "; ".join(
        f"{c.low_Bps / 1e9:.4g}-{c.high_Bps / 1e9:.4g} GB/s ({c.changed_ops} ops"
        + (f", the plan below {sec(c.gap_s)} slower above" if c.gap_s > 0 else "") + ")"
        for c in moved
    )
    return [
        f"Rearrangements ({len(moved)}; not switches): the plan keeps its TP / PP / DP sizes, "
        "ZeRO stage, micro-batches and kinds of recomputation and moves some ops to other "
        "equal-shaped splits, between neighbouring points (not narrowed down) or where a "
        f"bisection met it: {shown}.",
        "",
    ]


def _missed_lines(missed: list[Change]) -> list[str]:
    """Changes between grid points that are not switches of the best plan: at one end the
    other end's plan, re-costed, beats the (unproven, memory-bound) search's plan."""
    shown = "; ".join(
        f"{c.low_Bps / 1e9:.4g}-{c.high_Bps / 1e9:.4g} GB/s ({c.changed_ops} ops; the search "
        f"missed {sec(c.missed_s)} per step at one end)"
        for c in missed
    )
    return [
        f"Not narrowed down ({len(missed)}): changes between neighbouring points where the plan "
        "of one end, re-costed at the other, is faster than the plan the search returned there "
        "(memory binds and the search is not proven, see the TAPS search column). They show "
        "where the unproven search stops, not where the best plan changes, so no bisection is "
        f"spent on them: {shown}.",
        "",
    ]


def _search_cell(p: SweepPoint) -> str:
    """TAPS's search status at a point, with its seconds above the bound if memory binds."""
    if p.taps_status != "feasible" or p.taps_bound_gap_s is None:
        return p.taps_status or "-"
    return f"memory binds, +{sec(p.taps_bound_gap_s)} over bound"


def _point_cells(p: SweepPoint) -> list[str]:
    """One bandwidth point: NIC GB/s, each planner's comm seconds, reduction, TAPS's plan."""
    t, v = p.comm_s.get("taps"), p.comm_s.get("volume")
    red = None if t is None or not v else 1 - t / v
    return [
        f"{p.nic_Bps / 1e9:.3g}",
        f"{8 * p.nic_Bps / 1e9:.3g}",
        sec(t),
        sec(v),
        sec(p.comm_s.get("megatron")),
        sec(p.comm_s.get("data_parallel")),
        pct(red),
        sec(p.total_s.get("taps")),
        _search_cell(p),
        p.taps_summary,
    ]


def _flat_taps_note(sw: SweepResult) -> list[str]:
    """A note when TAPS's comm time is flat because its plan sends nothing across nodes."""
    comm = [p.comm_s.get("taps") for p in sw.points if p.comm_s.get("taps") is not None]
    inter = [p.taps_inter_bytes for p in sw.points if p.taps_inter_bytes is not None]
    if comm and max(comm) - min(comm) <= 1e-9 * max(comm) and inter and max(inter) == 0:
        return [
            "TAPS's communication time is the same at every bandwidth: its plan sends no bytes "
            "across nodes (the nodes split the batch; in inference that needs no traffic), so "
            "the NIC speed does not matter to it, while the volume-based plan sends traffic "
            "across nodes and pays for every GB/s missing.",
            "",
        ]
    return []


def _switch_lines(i: int, ch: Change) -> list[str]:
    """Plan switch ``i``: its bandwidth bracket (GB/s), seconds gained and the ops changed."""
    if ch.gap_s >= 0:
        gain = (
            f"at {ch.high_Bps / 1e9:.4g} GB/s the old plan would take {sec(ch.gap_s)} more "
            "per step"
        )
    else:
        why = (
            "with the memory limit binding, the Lagrangian bisection stopped on a leaner, "
            "slower plan (see the TAPS search column)"
            if ch.after_status == "feasible"
            else f"yet the search reports its plan as {ch.after_status}: an engine bug"
        )
        gain = (
            f"**not an improvement**: at {ch.high_Bps / 1e9:.4g} GB/s the old plan still fits "
            f"and is {sec(-ch.gap_s)} per step *faster*; {why}"
        )
    spent = (" Not narrowed down further: the sweep's locating searches were spent."
             if ch.budget_out else "")
    out = [
        f"**Switch {i}: between {ch.low_Bps / 1e9:.4g} and {ch.high_Bps / 1e9:.4g} GB/s per "
        f"NIC** ({ch.changed_ops} ops change strategy; {gain}).{spent}",
        "",
        f"- below: {ch.before}",
        f"- above: {ch.after}",
        "",
        table(
            ["op", "ops", "below", "above"],
            [[o["op"], str(o["count"]), o["before"], o["after"]] for o in ch.ops[:10]],
            "lrll",
        ),
        "",
    ]
    if len(ch.ops) > 10:
        out += [f"({len(ch.ops) - 10} more kinds of change not shown.)", ""]
    return out


def _tie_lines(ties: list[Change]) -> list[str]:
    """The flips between equal-cost plans, with their brackets (GB/s) and first two ops."""
    shown = "; ".join(
        f"{c.low_Bps / 1e9:.4g}-{c.high_Bps / 1e9:.4g} GB/s: "
        + ", ".join(f"`{o['op']}` x{o['count']} {o['before']} -> {o['after']}" for o in c.ops[:2])
        for c in ties
    )
    return [
        f"Ties ({len(ties)}; the plan's cost does not change, only which of two equal-cost "
        f"strategies the search returns): {shown}.",
        "",
    ]
