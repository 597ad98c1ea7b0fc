"""Plan: the searched plan's headline figures, why it looks the way it does, memory, operator
graph, per-op table and downloads (including the review pack)."""

from __future__ import annotations

import json

import streamlit as st

from dashboard import cache, state
from dashboard.charts import fmt_gib, memory_figure
from dashboard.graph_view import MAX_VISIBLE_GENERATIONS, dag_figure, dag_layout, op_rows
from dashboard.report_html import html_report
from dashboard.review_pack import review_pack
from dashboard.topology_view import topology_figure
from dashboard.widgets import (
    context_caption,
    need_model,
    need_plan,
    op_table,
    page_url,
    show_chart,
    titled,
    why_this_plan,
)
from taps_core.report import describe, fmt_bytes, fmt_seconds, links_csv, plan_to_json


def main() -> None:
    ctx = state.current()
    st.title("TAPS Planner")
    context_caption(ctx)
    graph = need_model(ctx)
    plan = need_plan(ctx)

    st.markdown(f"**Plan:** {describe(plan)}")
    if plan.search.note:
        st.info(f"Search: {plan.search.note}")
    why_box = st.container(border=True)  # filled last: it runs a few extra searches
    c = st.columns(4)
    c[0].metric(
        "Step time",
        fmt_seconds(plan.total_time_s),
        help="Compute plus communication per step, no overlap assumed",
    )
    c[1].metric(
        "Communication time",
        fmt_seconds(plan.comm_time_s),
        help="Per step, on the topology-aware link model",
    )
    c[2].metric("Compute time", fmt_seconds(plan.compute_time_s))
    c[3].metric(
        "Search time",
        fmt_seconds(plan.search.time_s),
        help=f"{plan.search.algorithm}, {plan.search.num_strategies:,} strategies, "
        f"{plan.search.status}",
    )
    c = st.columns(4)
    c[0].metric(
        "Intra-node bytes",
        fmt_bytes(plan.intra_node_bytes),
        help="Sent by all GPUs per step over NVLink / PCIe",
    )
    c[1].metric(
        "Inter-node bytes",
        fmt_bytes(plan.inter_node_bytes),
        help="Sent by all GPUs per step over the network",
    )
    c[2].metric(
        "Memory per device",
        fmt_gib(plan.memory.total),
        help=f"Limit {fmt_gib(plan.memory_limit_bytes)}",
    )
    n = plan.parameters
    c[3].metric("Parameters", f"{n / 1e9:.3g} B" if n >= 1e9 else f"{n / 1e6:.3g} M")
    mem_fig = memory_figure(plan)
    show_chart(mem_fig, "memory")

    st.subheader("Operator graph")
    expand = st.toggle("Show every layer (expand identical layers)", key="plan_expand")
    layout = dag_layout(plan, graph, expand=expand)
    dag = dag_figure(plan, graph, expand=expand, layout=layout)
    show_chart(dag, "graph")
    columns = int(max((x for x, _ in layout.pos.values()), default=0)) + 1
    wide = (
        f" Showing the first {MAX_VISIBLE_GENERATIONS} of {columns} columns: drag to pan."
        if columns > MAX_VISIBLE_GENERATIONS
        else " Drag to pan, scroll to zoom."
    )
    st.caption(
        "Fill colour = how the op is split inside a host; a dark ring = also split across "
        "hosts, a hollow marker = every host repeats it. Hover a node for shapes and costs." + wide
    )

    st.subheader("Per-op strategies")
    op_table(op_rows(plan, graph, expand=expand))

    st.subheader("Downloads")
    d = st.columns(4)
    d[0].download_button(
        "Plan JSON",
        lambda: json.dumps(plan_to_json(plan), indent=1),
        file_name=f"{ctx.file_stem('plan')}.json",
        mime="application/json",
        on_click="ignore",
        key="dl_plan",
    )
    d[1].download_button(
        "Links CSV",
        lambda: links_csv(plan),
        file_name=f"{ctx.file_stem('links')}.csv",
        mime="text/csv",
        on_click="ignore",
        key="dl_links",
    )
    topo = cache.topology(ctx.topo_json)
    url = page_url()

    def figures() -> dict:  # runs on click, in another thread: only captured values inside
        topo_fig = titled(topology_figure(topo, plan), ctx)
        return {
            ctx.file_stem(k): f
            for k, f in (("memory", mem_fig), ("graph", dag), ("topology", topo_fig))
        }

    def report() -> str:
        return html_report(plan, list(figures().values()), rows=op_rows(plan, graph), url=url)

    d[2].download_button(
        "HTML report (self-contained)",
        report,
        file_name=f"{ctx.file_stem('report')}.html",
        mime="text/html",
        on_click="ignore",
        key="dl_html",
    )

    def pack() -> bytes:
        return review_pack(
            figures(),
            files={
                f"{ctx.file_stem('report')}.html": report(),
                f"{ctx.file_stem('plan')}.json": json.dumps(plan_to_json(plan), indent=1),
            },
            url=url,
            summary=f"{ctx.tag}\nPlan: {describe(plan)}",
        )

    d[3].download_button(
        "Review pack (zip)",
        pack,
        file_name=f"{ctx.file_stem('review-pack')}.zip",
        mime="application/zip",
        on_click="ignore",
        key="dl_pack",
        help="Charts as SVG and PNG, the HTML report, the plan JSON and this view's URL",
    )
    with why_box:
        why_this_plan(ctx, plan)


main()
