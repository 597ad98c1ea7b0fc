"""Bandwidth sweep: each plan's communication time as the inter-node network speeds up, and
the bandwidths where TAPS changes its plan."""

from __future__ import annotations

import os

import streamlit as st

from dashboard import cache, state
from dashboard.charts import plan_name, sweep_figure
from dashboard.widgets import context_caption, need_model, need_topology, show_chart
from taps_core.planner import BASELINES
from taps_core.report import fmt_seconds
from taps_core.sweep import log_bandwidths, node_inter_bandwidth

# estimated sweeps longer than this many seconds wait for a click (env var: for tests, demos)
AUTO_RUN_SECONDS = float(os.environ.get("TAPS_SWEEP_AUTORUN_S", "20"))


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
    c[0].number_input("From (GB/s per host)", 0.01, 1e5, key="sweep_lo")
    c[1].number_input("To (GB/s per host)", 0.01, 1e5, key="sweep_hi")
    c[2].slider("Points", 2, 12, key="sweep_points")
    c[3].multiselect("Compare TAPS with", BASELINES[1:], key="sweep_curves", format_func=plan_name)
    lo, hi = sorted((float(ss["sweep_lo"]), float(ss["sweep_hi"])))
    points = int(ss["sweep_points"])
    labels = tuple(lb for lb in BASELINES if lb in ss["sweep_curves"] or lb == "taps")
    bandwidths = log_bandwidths(lo * 1e9, hi * 1e9, points)
    st.caption(
        f"Every network link is rescaled so a host's NICs add up to the swept bandwidth "
        f"(this cluster: {current / 1e9:.3g} GB/s per host); relative link speeds, NVLink "
        "and PCIe stay as they are."
    )

    plan = cache.plan(ctx.workload, ctx.topo_json, ctx.mode, "topology", ctx.memory_limit_bytes)
    per_search = plan.search.time_s if not isinstance(plan, cache.Failure) else 1.0
    estimate = per_search * points * (1 if labels == ("taps",) else 4)
    args = (ctx.workload, ctx.topo_json, ctx.mode, ctx.memory_limit_bytes, bandwidths, labels)
    key = repr((ctx.workload[0], ctx.workload[2:], ctx.topo_url, ctx.mode, bandwidths, labels))
    if estimate > AUTO_RUN_SECONDS and ss.get("sweep_go") != key:
        st.info(
            f"This sweep runs about {points * (1 if labels == ('taps',) else 4)} searches "
            f"(~{estimate:.0f} s)."
        )
        if not st.button("Run the sweep", type="primary"):
            st.stop()
        ss["sweep_go"] = key
    with st.spinner(f"Planning at {points} bandwidths…"):
        sw = cache.sweep(*args)
    if isinstance(sw, cache.Failure):
        st.error(sw.message)
        st.stop()
    show_chart(sweep_figure(sw, current), "sweep")
    for lb in sw.labels:
        reasons = [p.reasons[lb] for p in sw.points if lb in p.reasons]
        if reasons:
            where = (
                "at any bandwidth"
                if len(reasons) == len(sw.points)
                else f"at {len(reasons)} of {len(sw.points)} bandwidths"
            )
            st.warning(f"**{plan_name(lb)}** does not fit {where}: {reasons[0]}")
    st.subheader("TAPS plan regimes")
    rows = []
    for r in sw.regimes:
        times = [
            t
            for t in (sw.points[i].comm_time_s["taps"] for i in (r.first, r.last))
            if t is not None
        ]
        rows.append(
            {
                "GB/s per host": f"{r.low_Bps / 1e9:.3g}"
                + (f" – {r.high_Bps / 1e9:.3g}" if r.last > r.first else ""),
                "TAPS plan (strategies carrying most compute)": r.summary,
                "ops changed vs previous regime": str(r.changed_ops) if r.first else "(first)",
                "TAPS comm. time": " – ".join(dict.fromkeys(map(fmt_seconds, times))) or "n/a",
            }
        )
    st.table(rows, hide_index=True)
    if len(sw.regimes) == 1:
        st.caption("TAPS keeps one plan over the whole range: widen it or add points.")
    with st.expander("Every point"):
        table = []
        for p in sw.points:
            row = {"GB/s per host": p.node_bandwidth_Bps / 1e9}
            for lb in sw.labels:
                t = p.comm_time_s[lb]
                row[f"{plan_name(lb)} comm (ms)"] = None if t is None else t * 1e3
            row["TAPS plan"] = p.taps_summary
            table.append(row)
        st.dataframe(table, hide_index=True, width="stretch")
        for p in sw.points:
            for lb, reason in p.reasons.items():
                st.caption(
                    f"{p.node_bandwidth_Bps / 1e9:.3g} GB/s: {plan_name(lb)} does not "
                    f"fit ({reason})"
                )


main()
