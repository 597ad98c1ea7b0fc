"""Plan: the searched plan's headline figures, why it looks the way it does, memory, the
pipeline schedule (pipelined plans), operator graph, per-op table, framework exports and
downloads (including the review pack)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import plotly.graph_objects as go
import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from dashboard import cache, state
from dashboard.charts import fmt_gib, lever_notes, memory_figure
from dashboard.exports import summary_lines
from dashboard.graph_view import MAX_VISIBLE_GENERATIONS, dag_figure, dag_layout, op_rows
from dashboard.pipeline_view import EDGE_MICROBATCHES, FORWARD_SHARE, gantt_figure
from dashboard.report_html import html_report
from dashboard.review_pack import review_pack
from dashboard.topology_view import topology_figure
from dashboard.widgets import (
    context_caption,
    current,
    export_buttons,
    need_model,
    need_plan,
    op_table,
    page_url,
    plan_args,
    show_chart,
    titled,
    why_this_plan,
)
from taps_core.ir.graph import OpGraph
from taps_core.plan.claims import search_status
from taps_core.plan.records import Plan
from taps_core.plan.report import describe, fmt_bytes, fmt_seconds, links_csv, plan_to_json


def main() -> None:
    """The Plan page, section by section."""
    ctx = current()
    st.title("TAPS Planner")
    context_caption(ctx)
    graph = need_model(ctx)
    prove = st.toggle(
        "Prove over every pipeline shape", key="plan_prove",
        help="Bound every stage count x micro-batch count (any layer split, any per-op plan "
        "per stage): the plan stays, its claim becomes 'optimal' or a certified gap. Seconds "
        "on small models, a minute on the largest.",
    )
    # the headline's slots come before the search: a rerun empties the previous plan's line
    # and reasons at once, so its reasons can never stand beside the new plan's line, however
    # the browser batches the updates that follow
    slots = (st.empty(), st.empty(), st.empty())
    plan = need_plan(ctx, prove)
    why_box = _headline(plan, *slots)
    your_configuration(ctx, plan)
    view = (plan_args(ctx, prove), ctx.tag)  # what the views drawn from the plan depend on
    mem_fig = _memory(plan, view)
    gantt = _pipeline(plan, view)
    expand, dag = _operator_graph(plan, graph, view)
    _per_op(plan, graph, expand)
    exports, export_names = _exports(ctx)
    _downloads(ctx, plan, graph, exports, export_names, mem_fig, gantt, dag)
    with why_box.container(border=True):
        why_this_plan(ctx, plan)


def _headline(
    plan: Plan, line: DeltaGenerator, note: DeltaGenerator, why_box: DeltaGenerator
) -> DeltaGenerator:
    """The plan in words (in ``line``), its search note and headline figures; returns
    ``why_box``, kept for 'why this plan'."""
    # 'why' first: it is filled last (it prices a few runner-ups) and until then says so
    why_box.info("Why this plan: pricing its decisions against their runner-ups...")
    if plan.search.note:
        note.info(f"Search: {plan.search.note}")
    line.markdown(f"**Plan:** {describe(plan)}")
    c = st.columns(4)
    c[0].metric(
        "Step time",
        fmt_seconds(plan.total_time_s),
        help="Compute plus communication per step, no overlap assumed"
        + (" (the slowest pipeline stage's), plus the pipeline bubble" if plan.pipeline else ""),
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
    s = plan.search
    st.caption(
        f"Search result: **{search_status(plan)}** · {s.algorithm}, "
        f"{s.num_strategies:,} strategies, {fmt_seconds(s.time_s)}"
    )
    return why_box


def _memory(plan: Plan, view: tuple[Any, ...]) -> go.Figure:
    """The memory chart and which levers the plan pulls; returns the chart (built once per
    ``view``, see :func:`dashboard.cache.shared_view`)."""
    mem_fig = cache.shared_view("memory", view, lambda: titled(memory_figure(plan)))
    show_chart(mem_fig, "memory")
    notes = lever_notes(plan)
    st.caption(
        " ".join(notes)
        if notes
        else "No memory lever pulled: every part is held in full by each GPU that needs it."
    )
    return mem_fig


def _pipeline(plan: Plan, view: tuple[Any, ...]) -> go.Figure | None:
    """The pipeline schedule of a pipelined plan; returns its Gantt chart, else None."""
    gantt = None
    if plan.pipeline is not None:
        pi = plan.pipeline
        st.subheader("Pipeline schedule")
        c = st.columns(4)
        c[0].metric("Stages", len(pi.stages), help="Each on its own group of hosts")
        c[1].metric(
            "Micro-batches",
            f"{pi.microbatches} × {pi.micro_batch_size}",
            help="Micro-batches per step × samples in each",
        )
        c[2].metric(
            "Pipeline bubble",
            f"{100 * pi.bubble_fraction:.0f}%",
            help=f"{fmt_seconds(pi.bubble_time_s)} of fill and drain per step",
        )
        c[3].metric(
            "Between stages",
            fmt_bytes(pi.p2p_bytes),
            help="Boundary activations forward and their gradients back, per step",
        )
        gantt = cache.shared_view("pipeline", view, lambda: titled(gantt_figure(plan)))
        show_chart(gantt, "pipeline")
        fwd = round(FORWARD_SHARE * 3)
        st.caption(
            f"Replayed from the engine's per-stage figures under {pi.schedule}: each stage's "
            "time per micro-batch (compute and in-stage communication) split forward : "
            f"backward = {fwd} : {3 - fwd} (the engine reports them together); a middle "
            "stage's send time halved between its forward and backward sends. Hatched = the "
            "stage waits (fill, drain, or a slower stage). Numbers are micro-batches"
            + (
                f"; past {2 * EDGE_MICROBATCHES + 1} micro-batches the steady state between "
                f"the first and last {EDGE_MICROBATCHES} is cut (dotted column)."
                if pi.microbatches > 2 * EDGE_MICROBATCHES + 1
                else "."
            )
        )
    return gantt


def _operator_graph(
    plan: Plan, graph: OpGraph, view: tuple[Any, ...]
) -> tuple[bool, go.Figure]:
    """The operator graph with its expand toggle; returns the toggle and the chart."""
    st.subheader("Operator graph")
    expand = st.toggle("Show every layer (expand identical layers)", key="plan_expand")

    def build() -> tuple[Any, go.Figure]:
        layout = dag_layout(plan, graph, expand=expand)
        return layout, titled(dag_figure(plan, graph, expand=expand, layout=layout))

    layout, dag = cache.shared_view("graph", (view, expand), build)
    show_chart(dag, "graph")
    columns = int(max((x for x, _ in layout.pos.values()), default=0)) + 1
    wide = (
        f" Showing the first {MAX_VISIBLE_GENERATIONS} of {columns} columns: drag to pan."
        if expand and columns > MAX_VISIBLE_GENERATIONS
        else " Drag to pan, scroll to zoom."
    )
    staged = (
        " Shaded bands = pipeline stages; across hosts means across the stage's hosts."
        if plan.pipeline is not None
        else ""
    )
    st.caption(
        "Fill = how the op is split inside a host, ring = how it is split across hosts "
        "(batch, sequence, tensor column/row, 2-D; grey = replicated). Hover a node for "
        "shapes and costs."
        + staged
        + wide
    )
    return expand, dag


def _per_op(plan: Plan, graph: OpGraph, expand: bool) -> None:
    """The per-op strategy table."""
    st.subheader("Per-op strategies")
    op_table(op_rows(plan, graph, expand=expand))


def _exports(ctx: state.Context) -> tuple[Any, dict[str, str]]:
    """The framework export buttons; returns the exports and the names of the files offered."""
    st.subheader("Export to Megatron-LM, DeepSpeed, PyTorch DTensor")
    exports = cache.exports(
        ctx.workload, ctx.topo_json, ctx.mode, ctx.cost_model, ctx.memory_limit_bytes
    )
    export_names = export_buttons(exports, ctx.file_stem, key="dl_export")
    st.caption(
        "A plan is exported only when the framework can run that plan, the same splits on the "
        "same GPUs; otherwise the box names the first op or lever it has no words for."
    )
    return exports, export_names


def _downloads(
    ctx: state.Context,
    plan: Plan,
    graph: OpGraph,
    exports: Any,
    export_names: dict[str, str],
    mem_fig: go.Figure,
    gantt: go.Figure | None,
    dag: go.Figure,
) -> None:
    """The plan JSON, links CSV, HTML report and review pack, each built on click."""
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
    report, pack = _on_click(ctx, plan, graph, exports, export_names, mem_fig, gantt, dag)
    d[2].download_button(
        "HTML report (self-contained)",
        report,
        file_name=f"{ctx.file_stem('report')}.html",
        mime="text/html",
        on_click="ignore",
        key="dl_html",
    )
    d[3].download_button(
        "Review pack (zip)",
        pack,
        file_name=f"{ctx.file_stem('review-pack')}.zip",
        mime="application/zip",
        on_click="ignore",
        key="dl_pack",
        help="Charts as SVG and PNG, the HTML report, the plan JSON, the framework exports "
        "and this view's URL",
    )


def _on_click(
    ctx: state.Context,
    plan: Plan,
    graph: OpGraph,
    exports: Any,
    export_names: dict[str, str],
    mem_fig: go.Figure,
    gantt: go.Figure | None,
    dag: go.Figure,
) -> tuple[Callable[[], str], Callable[[], bytes]]:
    """The HTML report and the review pack as functions, run when their button is clicked."""
    topo = cache.topology(ctx.topo_json)
    url = page_url()

    def figures() -> dict:  # runs on click, in another thread: only captured values inside
        topo_fig = titled(topology_figure(topo, plan), ctx)
        shown = [("memory", mem_fig), ("pipeline", gantt), ("graph", dag), ("topology", topo_fig)]
        return {ctx.file_stem(k): f for k, f in shown if f is not None}

    def report() -> str:
        return html_report(plan, list(figures().values()), rows=op_rows(plan, graph), url=url,
                           cluster=ctx.topo_label, topology=topo)

    def pack() -> bytes:
        files = {
            f"{ctx.file_stem('report')}.html": report(),
            f"{ctx.file_stem('plan')}.json": json.dumps(plan_to_json(plan), indent=1),
        }
        exported = [] if isinstance(exports, cache.Failure) else list(exports)
        files.update({export_names[f.fmt]: f.text for f in exported if f.fmt in export_names})
        lines = summary_lines(tuple(exported), export_names)
        return review_pack(
            figures(),
            files=files,
            url=url,
            summary=f"{ctx.tag}\nPlan: {describe(plan)}\nSearch: {search_status(plan)}\n\n"
            "Exports:\n" + "\n".join(f"  {line}" for line in lines),
        )

    return report, pack


def your_configuration(ctx: state.Context, plan: Plan) -> None:
    """The configuration the user runs today, priced by the same model beside the plan."""
    spec = st.text_input(
        "Your configuration",
        key="plan_yours",
        # an example the sample transformers accept on any preset (tp 2 divides their head
        # counts, pp 1 any host count), not one cluster's numbers (dp=24 meant 1536 GPUs)
        placeholder="e.g. tp=2,pp=1,mbs=1,recompute=full,zero=1",
        max_chars=8000,
        help="A Megatron-style configuration (keys tp, pp, dp, mbs, sp, recompute "
        "(none, selective or full), zero, and first / last: the layers of the first / last "
        "pipeline stage), "
        "or paste Megatron-LM's arguments (--tensor-model-parallel-size 8 ...) or a DeepSpeed "
        "config (JSON): priced exactly by the same cost model as the plan",
    ).strip()
    if not spec:
        return
    yours = cache.fixed(ctx.workload, ctx.topo_json, ctx.mode, ctx.memory_limit_bytes, spec)
    if isinstance(yours, cache.Failure):
        st.error(f"Your configuration: {yours.message}")
        return
    fits = yours.memory.total <= yours.memory_limit_bytes * (1 + 1e-9)
    faster = yours.total_time_s - plan.total_time_s
    rows = [
        {"": name, "step": fmt_seconds(p.total_time_s), "compute": fmt_seconds(p.compute_time_s),
         "communication": fmt_seconds(p.comm_time_s),
         "inter-node bytes": fmt_bytes(p.inter_node_bytes),
         "memory / device": fmt_gib(p.memory.total)}
        for name, p in (("the plan", plan), (f"yours ({spec})", yours))
    ]
    st.dataframe(rows, hide_index=True, width="stretch")
    if faster > 0:
        verdict = (f"The plan is {fmt_seconds(faster)} per step faster "
                   f"({100 * faster / yours.total_time_s:.0f}%)")
    elif faster < 0:
        verdict = f"Yours is {fmt_seconds(-faster)} per step faster" + (
            ": the plan's search did not cover it (please report this case)" if fits else ""
        )
    else:
        verdict = "Same step time"
    st.caption(verdict + ("" if fits else "; yours does not fit in memory") + ".")


main()
