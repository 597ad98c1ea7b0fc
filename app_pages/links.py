"""Links: where the plan's bytes travel, per link (by op kind) and GPU to GPU."""

from __future__ import annotations

import streamlit as st

from dashboard import cache, state
from dashboard.links_view import (
    busiest_link_groups,
    devices_of,
    link_bars_figure,
    traffic_heatmap_figure,
)
from dashboard.widgets import context_caption, current, need_plan, show_chart
from taps_core.plan.report import fmt_bytes, fmt_seconds, links_csv


def main() -> None:
    ctx = current()
    st.title("Link traffic")
    context_caption(ctx)
    plan = need_plan(ctx)
    result = cache.link_breakdown(
        ctx.workload, ctx.topo_json, ctx.mode, ctx.cost_model, ctx.memory_limit_bytes
    )
    if isinstance(result, cache.Failure):
        st.error(result.message)
        st.stop()
    br, heat = result
    devices = devices_of(cache.topology(ctx.topo_json))
    if not plan.links:
        st.info("This plan sends nothing between GPUs (a single GPU, or every op replicated).")
        return
    busiest = max(plan.links, key=lambda k: k.busy_time_s)
    c = st.columns(4)
    c[0].metric("Links carrying traffic", f"{len(plan.links)} (directed)")
    c[1].metric(
        "Busiest link: busy time",
        fmt_seconds(busiest.busy_time_s),
        help="Bytes over effective bandwidth, per step",
    )
    c[1].caption(f"{busiest.src}→{busiest.dst} ({busiest.kind})")
    c[2].metric("Busiest link: bytes", fmt_bytes(busiest.bytes))
    c[3].metric(
        "Inter-node share of bytes",
        f"{100 * plan.inter_node_bytes / max(plan.comm_bytes, 1e-30):.0f}%",
    )
    top = st.slider(
        "Links shown per group (busiest first)", *state.RANGES["links_top"], key="links_top"
    )
    metric_ = st.radio(
        "Per link", ("busy", "bytes"), key="links_metric", horizontal=True,
        format_func={"busy": "busy time", "bytes": "bytes"}.__getitem__,
    )  # fmt: skip
    show_chart(link_bars_figure(br, devices, metric=metric_, top=top), f"links_{metric_}")
    st.caption(
        "Busy time = bytes over the link's effective bandwidth (peak x efficiency). The "
        "busiest link bounds how fast a collective can finish."
    )
    if plan.pipeline is not None:
        st.caption(
            "Pipelined plan: every stage's collectives on its own hosts, plus the sends of "
            "boundary activations between stages (\"pipeline send\")."
        )
    if heat is not None:
        show_chart(traffic_heatmap_figure(*heat, devices), "gpu_heatmap")
    st.subheader("Busiest links")
    st.caption("Links that carry the same bytes in one row: how many, which, where; the "
               "figures are each link's (the CSV has every link).")
    st.dataframe(
        busiest_link_groups(plan, devices, top),
        hide_index=True,
        width="stretch",
        column_config={
            name: st.column_config.NumberColumn(format="%.4g")
            for name in ("bandwidth (GB/s)", "bytes (GB)", "busy (ms)")
        },
    )
    st.download_button(
        "Links CSV",
        lambda: links_csv(plan),
        file_name="taps-links.csv",
        mime="text/csv",
        on_click="ignore",
        key="dl_links_page",
    )


main()
