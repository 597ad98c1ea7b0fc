"""Bandwidth sweep: step time of TAPS and each baseline as the network between hosts speeds up,
drawn as it is computed, with every change of TAPS's plan located and explained."""

from __future__ import annotations

import streamlit as st

from dashboard import cache, state
from dashboard.charts import CHANGE_MARKS, plan_name, sweep_figure
from dashboard.widgets import context_caption, need_model, need_topology, show_chart, titled
from taps_core.report import fmt_seconds
from taps_core.search.baselines import BASELINES
from taps_core.sweep import log_bandwidths, node_inter_bandwidth

WARM_TAPS_AFTER_S = 2.0  # seconds per search above which TAPS is warm-started too


def main() -> None:
    ctx = state.current()
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
    current = node_inter_bandwidth(topo)
    c = st.columns([1, 1, 1, 3])
    c[0].number_input("From (GB/s per host)", *state.RANGES["sweep_lo"], key="sweep_lo")
    c[1].number_input("To (GB/s per host)", *state.RANGES["sweep_hi"], key="sweep_hi")
    c[2].slider("Points", *state.RANGES["sweep_points"], key="sweep_points")
    c[3].multiselect("Compare TAPS with", BASELINES[1:], key="sweep_curves", format_func=plan_name)
    lo, hi = sorted((float(ss["sweep_lo"]), float(ss["sweep_hi"])))
    labels = tuple(lb for lb in BASELINES if lb in ss["sweep_curves"] or lb == "taps")
    grid = log_bandwidths(lo * 1e9, hi * 1e9, int(ss["sweep_points"]))
    # a slow search previews TAPS warm-started; the finished sweep is the same either way
    here = cache.plan(ctx.workload, ctx.topo_json, ctx.mode, "topology", ctx.memory_limit_bytes)
    warm = not isinstance(here, cache.Failure) and here.search.time_s > WARM_TAPS_AFTER_S
    st.caption(
        f"Every network link is rescaled so a host's NICs add up to the swept bandwidth "
        f"(this cluster: {current / 1e9:.3g} GB/s per host); NVLink and PCIe stay as they are. "
        + (
            "One search takes "
            f"{fmt_seconds(here.search.time_s)} here, so TAPS is first drawn re-costed between "
            "points that agree, then searched at every point before the sweep completes."
            if warm
            else "TAPS is searched at every point; baselines are searched at the ends and "
            "re-costed in between where their plan does not change."
        )
    )
    run = cache.sweep_run(
        ctx.workload, ctx.topo_json, ctx.mode, ctx.memory_limit_bytes, labels, warm
    )
    if isinstance(run, cache.Failure):
        st.error(run.message)
        st.stop()
    chart, status = st.empty(), st.empty()
    sw = None
    for sw in run.fill(grid):  # draws while it plans; a rerun resumes from what was found
        if sw.complete:
            break
        done = len(sw.done)
        status.caption(
            f"Planning… {done} of {len(grid)} bandwidths"
            + (f", locating {len(sw.changes)} plan change(s)" if done == len(grid) else "")
        )
        chart.plotly_chart(titled(sweep_figure(sw, current), ctx), theme=None)
    status.empty()
    assert sw is not None
    with chart.container():
        show_chart(sweep_figure(sw, current), "sweep")
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


def explain_changes(sw) -> None:
    """The numbered plan changes in words, and hosts repeating work."""
    st.subheader("Where TAPS changes its plan, and why")
    if not sw.changes:
        st.info(
            "TAPS keeps one plan over the whole range: widen the range or add points to find "
            "where it changes."
        )
    for i, c in enumerate(sw.changes):
        mark = CHANGE_MARKS[i] if i < len(CHANGE_MARKS) else str(i + 1)
        st.markdown(f"**{mark}** {c.words}")
    repeat = [
        p for p in sw.done if p.plans["taps"].fits and p.plans["taps"].replicated_across >= 0.5
    ]
    if repeat:
        top = max(p.node_bandwidth_Bps for p in repeat) / 1e9
        st.warning(
            f"Up to {top:.3g} GB/s per host TAPS's plan has every host repeat at least half "
            "of the work (hollow marks): the network is so slow that computing the same thing "
            "on each host is cheaper than splitting it and exchanging data."
        )


def regime_table(sw) -> None:
    st.subheader("TAPS plan regimes")
    rows = []
    for r in sw.regimes:
        a, b = sw.points[r.first], sw.points[r.last]
        times = dict.fromkeys(
            fmt_seconds(p.plans["taps"].total_time_s) for p in (a, b) if p.plans["taps"].fits
        )
        rows.append(
            {
                "GB/s per host": f"{r.low_Bps / 1e9:.3g}"
                + (f" – {r.high_Bps / 1e9:.3g}" if r.last > r.first else ""),
                "TAPS plan (strategies carrying most compute)": r.summary,
                "hosts repeat": f"{100 * r.replicated_across:.0f}% of compute",
                "TAPS step time": " – ".join(times) or "n/a",
            }
        )
    st.dataframe(rows, hide_index=True, width="stretch")
    with st.expander("Every point"):
        table = []
        for p in sw.done:
            row = {"GB/s per host": p.node_bandwidth_Bps / 1e9}
            for lb, q in p.plans.items():
                row[f"{plan_name(lb)} step (ms)"] = (
                    None if q.total_time_s is None else q.total_time_s * 1e3
                )
                row[f"{plan_name(lb)} comm (ms)"] = (
                    None if q.comm_time_s is None else q.comm_time_s * 1e3
                )
            row["TAPS plan"] = p.plans["taps"].summary
            table.append(row)
        st.dataframe(table, hide_index=True, width="stretch")


main()
