"""Bandwidth sweep: step time of TAPS and each baseline as the network between hosts speeds up,
drawn as it is computed, with every change of TAPS's plan located and explained.

The cluster's own bandwidth is always a point, planned as the Plan page plans it (same search,
pipeline stages included), so the sweep there is the Plan page's step time. Tables come from
:func:`taps_core.studies.sweep_json.sweep_to_json`'s numbers (what ``python -m taps_core
sweep`` prints), rounded to 4 significant digits."""

from __future__ import annotations

import streamlit as st

from dashboard import cache, state
from dashboard.charts import CHANGE_MARKS, plan_name, sweep_figure
from dashboard.widgets import (
    context_caption,
    current,
    need_model,
    need_topology,
    show_chart,
    titled,
)
from taps_core import strict_json
from taps_core.cluster.topology import node_inter_bandwidth
from taps_core.plan.report import fmt_seconds
from taps_core.search.baselines import BASELINES
from taps_core.studies.sweep import Priced, Sweep, sweep_grid
from taps_core.studies.sweep_json import sweep_to_json

WARM_TAPS_AFTER_S = 2.0  # seconds per search above which TAPS is warm-started too
WORKERS_AFTER_S = 1.0  # seconds per search above which grid points are searched in parallel
# (starting a worker process costs about a second: below this, one process is faster)
DIGITS = 4  # significant digits in the tables (ms, GB/s)


def sig(value: float | None, digits: int = DIGITS) -> float | None:
    """``value`` rounded to ``digits`` significant digits (None stays None): 31.51, not
    31.514555166975864."""
    return None if value is None else float(f"{value:.{digits}g}")


def main() -> None:
    ctx = current()
    ss = st.session_state
    st.title("Inter-node bandwidth sweep")
    context_caption(ctx)
    need_model(ctx)
    topo = need_topology(ctx)
    if topo.nodes < 2:
        st.info(
            "This cluster has one host, so there is no inter-node network to sweep: "
            "choose 2 or more nodes in the sidebar."
        )
        st.stop()
    own_Bps = node_inter_bandwidth(topo)
    c = st.columns([1, 1, 1, 3])
    c[0].number_input("From (GB/s per host)", *state.RANGES["sweep_lo"], key="sweep_lo")
    c[1].number_input("To (GB/s per host)", *state.RANGES["sweep_hi"], key="sweep_hi")
    c[2].slider("Points", *state.RANGES["sweep_points"], key="sweep_points")
    c[3].multiselect("Compare TAPS with", BASELINES[1:], key="sweep_curves", format_func=plan_name)
    lo, hi = sorted((float(ss["sweep_lo"]), float(ss["sweep_hi"])))
    labels = tuple(lb for lb in BASELINES if lb in ss["sweep_curves"] or lb == "taps")
    # the cluster's own bandwidth is always a point: there the sweep is the Plan page's plan
    points = int(ss["sweep_points"])
    grid = sweep_grid(lo * 1e9, hi * 1e9, points, own_Bps)
    # a slow search previews TAPS warm-started; the finished sweep is the same either way
    here = cache.plan(ctx.workload, ctx.topo_json, ctx.mode, "topology", ctx.memory_limit_bytes)
    took_s = 0.0 if isinstance(here, cache.Failure) else here.search.time_s
    warm, slow = took_s > WARM_TAPS_AFTER_S, took_s > WORKERS_AFTER_S
    st.caption(
        f"Every network link is rescaled so a host's NICs add up to the swept bandwidth "
        f"(this cluster: {own_Bps / 1e9:.3g} GB/s per host, always a point, planned as the Plan "
        "page plans it); NVLink and PCIe stay as they are. Plans are searched as on the Plan "
        "and Compare pages, pipeline stages included. "
        + (
            "One search takes "
            f"{fmt_seconds(took_s)} here, so TAPS is first drawn re-costed between "
            "points that agree, then searched at every point before the sweep completes."
            if warm
            else "TAPS is searched at every point; baselines are searched at the ends and "
            "re-costed in between where their plan does not change."
        )
        + (" Points are searched in parallel, one per core (the same result)." if slow else "")
    )
    run = cache.sweep_run(
        ctx.workload, ctx.topo_json, ctx.mode, ctx.memory_limit_bytes, labels, warm, slow
    )
    if isinstance(run, cache.Failure):
        st.error(run.message)
        st.stop()
    chart, status = st.empty(), st.empty()
    sw = None
    # draws while it plans; a rerun resumes from what was found
    for drawn, sw in enumerate(run.fill(grid)):
        if sw.complete:
            break
        done = len(sw.done)
        status.caption(
            f"Planning… {done} of {len(grid)} bandwidths"
            + (" (the points asked for and this cluster's own)" if len(grid) > points else "")
            + (f", locating {len(sw.plan_changes)} plan change(s)" if done == len(grid) else "")
        )
        # a key per draft: two states in a row may draw the same figure, and Streamlit
        # refuses two charts with one auto-generated ID in a run
        chart.plotly_chart(titled(sweep_figure(sw, own_Bps), ctx), theme=None,
                           key=f"sweep_draft_{drawn}")
    status.empty()
    assert sw is not None
    with chart.container():
        show_chart(sweep_figure(sw, own_Bps), "sweep")
    explain_changes(sw)
    for lb in sw.labels:
        reasons = [p.reasons[lb] for p in sw.done if lb in p.reasons]
        if reasons:
            where = (
                "at any bandwidth"
                if len(reasons) == len(sw.done)
                else f"at {len(reasons)} of {len(sw.done)} bandwidths"
            )
            st.warning(f"**{plan_name(lb)}** does not fit {where}: {reasons[0]}")
    regime_table(sw)
    st.download_button(
        "Sweep JSON (what python -m taps_core sweep --json prints)",
        lambda: strict_json.dumps(sweep_to_json(sw), indent=1),
        file_name=f"{ctx.file_stem('sweep')}.json",
        mime="application/json",
        on_click="ignore",
        key="dl_sweep",
    )


def explain_changes(sw: Sweep) -> None:
    """The numbered plan changes: the structure in Megatron's terms first, then the planner's
    per-op words; and a warning where hosts repeat work."""
    st.subheader("Where TAPS changes its plan, and why")
    if not sw.plan_changes:
        st.info(
            "TAPS keeps one plan over the whole range: widen the range or add points to find "
            "where it changes."
        )
    for i, c in enumerate(sw.plan_changes):
        mark = CHANGE_MARKS[i] if i < len(CHANGE_MARKS) else str(i + 1)
        where = f"{c.low_Bps / 1e9:.3g} – {c.high_Bps / 1e9:.3g} GB/s per host"
        rest = c.words[len(c.structure):].strip() if c.words.startswith(c.structure) else c.words
        if c.structure:
            st.markdown(f"**{mark} At {where}, going slower: {c.structure}**")
            st.caption(rest)
        else:
            st.markdown(f"**{mark} At {where}: the same Megatron structure**, finer choices: "
                        + c.words)
    if sw.twin_changes:
        spans = ", ".join(f"{c.low_Bps / 1e9:.3g} – {c.high_Bps / 1e9:.3g}"
                          for c in sw.twin_changes)
        st.caption(
            f"Equal-cost twins, not changes: at {spans} GB/s per host TAPS returns another of "
            "two plans that take the same step at both ends (e.g. a batch split for a "
            "sequence split of the same ops), so the step does not change there."
        )
    repeat = [
        p for p in sw.done if p.plans["taps"].fits and p.plans["taps"].replicated_across >= 0.5
    ]
    if repeat:
        top = max(p.node_bandwidth_Bps for p in repeat) / 1e9
        st.warning(
            f"At the swept bandwidths up to {top:.3g} GB/s per host (hollow marks) TAPS's plan "
            "has every host repeat at least half of the work: the network is so slow that "
            "computing the same thing on each host is cheaper than splitting it and exchanging "
            "data."
        )


def _structure(q: Priced) -> str:
    return q.shape.words() if q.shape is not None else "does not fit"


def regime_table(sw: Sweep) -> None:
    """One row per run of points with one TAPS plan (or equal-cost twins), then every point
    (rounded)."""
    st.subheader("TAPS plan regimes")
    rows = []
    for r in sw.regimes:
        a, b = sw.points[r.first], sw.points[r.last]
        times = dict.fromkeys(
            fmt_seconds(p.plans["taps"].total_time_s) for p in (a, b) if p.plans["taps"].fits
        )
        own = any(
            sw.is_own(p.node_bandwidth_Bps) for p in sw.points[r.first : r.last + 1] if p
        )
        rows.append(
            {
                "GB/s per host": f"{r.low_Bps / 1e9:.3g}"
                + (f" – {r.high_Bps / 1e9:.3g}" if r.last > r.first else "")
                + (" (this cluster inside)" if own else ""),
                "structure (Megatron terms)": r.shape.words() if r.shape else "does not fit",
                "TAPS plan (strategies carrying most compute)": r.summary,
                "hosts repeat": f"{100 * r.replicated_across:.0f}% of compute",
                "TAPS step time": " – ".join(times) or "n/a",
            }
        )
    st.dataframe(rows, hide_index=True, width="stretch")
    with st.expander("Every point"):
        st.dataframe(point_rows(sw), hide_index=True, width="stretch")


def point_rows(sw: Sweep) -> list[dict[str, object]]:
    """Every computed point: bandwidth, each plan's step and communication (ms, 4 significant
    digits), TAPS's structure; the cluster's own bandwidth marked."""
    table = []
    for p in sw.done:
        row: dict[str, object] = {
            "GB/s per host": sig(p.node_bandwidth_Bps / 1e9),
            "point": "this cluster" if sw.is_own(p.node_bandwidth_Bps) else "",
        }
        for lb, q in p.plans.items():
            row[f"{plan_name(lb)} step (ms)"] = sig(
                None if q.total_time_s is None else q.total_time_s * 1e3
            )
            row[f"{plan_name(lb)} comm (ms)"] = sig(
                None if q.comm_time_s is None else q.comm_time_s * 1e3
            )
        row["TAPS structure (Megatron terms)"] = _structure(p.plans["taps"])
        row["TAPS plan"] = p.plans["taps"].summary
        table.append(row)
    return table


main()
