"""Compare: TAPS against the volume-based search, Megatron-style and data-parallel plans."""

from __future__ import annotations

import json

import streamlit as st

from dashboard import cache, state
from dashboard.charts import link_diff_figure, plan_name, same_link_bytes, time_figure
from dashboard.graph_view import dag_figure, dag_layout, op_rows
from dashboard.widgets import (
    context_caption,
    current,
    export_buttons,
    need_model,
    need_topology,
    show_chart,
)
from taps_core.ir.graph import OpGraph
from taps_core.plan.claims import search_status
from taps_core.plan.records import NotFitting, Plan
from taps_core.plan.report import compare_to_json, describe, fmt_seconds
from taps_core.search.baselines import reduction
from taps_core.studies.explain import replication_warning, slow_baseline_warning

BASELINES = ("volume", "megatron", "data_parallel")


def differ_words(taps: Plan, other: Plan, name: str, differ: set[str]) -> str:
    """How many ops differ, at which level, and both plans' structure in Megatron-LM terms."""
    from taps_core.studies.shape import plan_shape

    inside = sum(a.strategy.intra != b.strategy.intra for a, b in zip(taps.ops, other.ops))
    across = sum(a.strategy.inter != b.strategy.inter for a, b in zip(taps.ops, other.ops))
    head = (
        f"**Every one** of the {len(taps.ops)} ops" if len(differ) == len(taps.ops)
        else f"**{len(differ)}** of {len(taps.ops)} ops"
    )
    rings = "" if len(differ) == len(taps.ops) else " (red rings)"
    return (
        f"{head} are sharded differently by TAPS and the {name} plan{rings}: {inside} inside "
        f"hosts, {across} across hosts. TAPS: {plan_shape(taps).words()}; {name}: "
        f"{plan_shape(other).words()}."
    )


def main() -> None:
    """The Compare page, section by section."""
    ctx = current()
    st.title("Compare plans")
    context_caption(ctx)
    graph = need_model(ctx)
    need_topology(ctx)
    plans, taps = _search(ctx)
    _headline(plans, taps)
    _why_they_differ(ctx, plans, taps, graph)
    _in_words(plans)
    picked = _pick_baseline(plans)
    if picked is None:
        return
    label, expand = picked
    other = plans[label]
    assert isinstance(other, Plan)
    _strategy_diff(taps, other, label, graph, expand)
    _per_link(taps, other)
    _downloads(ctx, plans, label)


def _search(ctx: state.Context) -> tuple[dict[str, Plan | NotFitting], Plan]:
    """The four plans, or the page stops with the reason there are none (or no TAPS plan)."""
    with st.spinner("Searching four plans (TAPS, volume, Megatron, data parallel)…"):
        plans = cache.comparison(ctx.workload, ctx.topo_json, ctx.mode, ctx.memory_limit_bytes)
    if isinstance(plans, cache.Failure):
        st.error(plans.message)
        st.stop()
    taps = plans["taps"]
    if isinstance(taps, NotFitting):
        st.error(f"TAPS: {taps.reason}")
        st.stop()
    return plans, taps


def step_ratio_words(ratio: float) -> str:
    """A baseline's step against TAPS's: '1.29× TAPS's', or in percent below 1.1×
    ('0.32% longer than TAPS's'), where a ratio would round to 1×."""
    if ratio >= 1.1:
        return f"{ratio:.3g}× TAPS's"
    if abs(ratio - 1) < 5e-5:
        return "as long as TAPS's"
    return f"{100 * abs(ratio - 1):.2g}% {'longer' if ratio > 1 else 'less'} than TAPS's"


def _headline(plans: dict[str, Plan | NotFitting], taps: Plan) -> None:
    """TAPS against each baseline in figures, the plans that do not fit, the time chart."""
    c = st.columns(3)
    for col, label in zip(c, BASELINES):
        other = plans[label]
        if isinstance(other, Plan):
            r = reduction(taps, other)
            ratio = other.total_time_s / max(taps.total_time_s, 1e-30)
            col.metric(
                f"TAPS vs {plan_name(label)}",
                f"{abs(100 * r):.0f}% {'less' if r >= 0 else 'more'} comm.",
                delta=f"its step takes {step_ratio_words(ratio)}",
                delta_color="off",
                help="Communication time per step of TAPS relative to this plan; below, how "
                "much longer this plan's whole step (compute + communication) is",
            )
            col.caption(
                f"comm {fmt_seconds(taps.comm_time_s)} vs {fmt_seconds(other.comm_time_s)}; "
                f"step {fmt_seconds(taps.total_time_s)} vs {fmt_seconds(other.total_time_s)}"
            )
        else:
            col.metric(f"TAPS vs {plan_name(label)}", "does not fit")
    for label, p in plans.items():
        if isinstance(p, NotFitting):
            st.warning(f"**{plan_name(label)}** has no plan: {p.reason}")
    show_chart(time_figure(plans), "compare_time")


def _why_they_differ(
    ctx: state.Context, plans: dict[str, Plan | NotFitting], taps: Plan, graph: OpGraph
) -> None:
    """The box of warnings and TAPS's priced decisions that explain the differences."""
    with st.container(border=True):
        st.markdown("#### Why these plans differ")
        for label in BASELINES:
            other = plans[label]
            if isinstance(other, Plan):
                text = slow_baseline_warning(taps, other, graph, plan_name(label))
                if text:
                    st.warning(text)
        warning = replication_warning(taps) if taps.pipeline is None else None
        if warning:
            st.warning(f"TAPS: {warning}")
        with st.spinner("Pricing TAPS's decisions against their runner-ups…"):
            found = cache.why(
                ctx.workload, ctx.topo_json, ctx.mode, "topology", ctx.memory_limit_bytes
            )
        if not isinstance(found, cache.Failure):
            for d in found:
                st.markdown(f"- TAPS: {d.words}")


def _in_words(plans: dict[str, Plan | NotFitting]) -> None:
    """Each plan described in words, in an expander."""
    with st.expander("Each plan in words"):
        for label, p in plans.items():
            words = (
                f"{describe(p)} (search: {search_status(p)})"
                if isinstance(p, Plan)
                else f"does not fit ({p.reason})"
            )
            st.markdown(f"- **{plan_name(label)}**: {words}")


def _pick_baseline(plans: dict[str, Plan | NotFitting]) -> tuple[str, bool] | None:
    """The baseline to set TAPS against and the expand toggle; None when no baseline fits."""
    st.subheader("Where the strategies differ")
    fitting = [lb for lb in BASELINES if isinstance(plans[lb], Plan)]
    if not fitting:
        st.info("No baseline fits, so there is nothing to set TAPS against.")
        return None
    if st.session_state.get("cmp_baseline") not in fitting:
        st.session_state["cmp_baseline"] = fitting[0]
    c1, c2 = st.columns([2, 3])
    label = c1.radio("Against", fitting, key="cmp_baseline", format_func=plan_name, horizontal=True)
    expand = c2.toggle("Show every layer", key="cmp_expand")
    return label, expand


def _strategy_diff(taps: Plan, other: Plan, label: str, graph: OpGraph, expand: bool) -> None:
    """The ops TAPS and the baseline split differently: in words, on the graph, in a table."""
    differ = {a.name for a, b in zip(taps.ops, other.ops) if a.strategy != b.strategy}
    st.markdown(differ_words(taps, other, plan_name(label), differ))
    everywhere = len(differ) == len(taps.ops)
    if everywhere:  # ringing every op says nothing: the structures differ, as the words say
        differ_rings: set[str] = set()
    else:
        differ_rings = differ
    lay = dag_layout(taps, graph, expand=expand)
    show_chart(
        dag_figure(
            taps,
            graph,
            expand=expand,
            highlight=differ_rings,
            baseline=plan_name(label),
            layout=lay,
            title=f"TAPS plan; every op is split differently by {plan_name(label)}"
            if everywhere else
            f"TAPS plan; ops split differently by {plan_name(label)} ringed in red",
        ),
        "compare_graph",
    )
    if differ:
        others = {op.name: op for op in other.ops}
        rows = [r for r in op_rows(taps, graph, expand=expand, highlight=differ) if r["differs"]]
        for r in rows:
            o = others[r["op"]]
            r[f"{label} strategy"] = o.strategy.label()
            r[f"{label} comm (ms)"] = o.comm_time_s * 1e3
        st.dataframe(
            rows,
            hide_index=True,
            width="stretch",
            column_order=[
                "op",
                "× layers",
                "differs",
                "strategy",
                f"{label} strategy",
                "comm (ms)",
                f"{label} comm (ms)",
                "in words",
            ],
        )


def _per_link(taps: Plan, other: Plan) -> None:
    """The links whose traffic differs most between TAPS and the baseline."""
    st.subheader("Per-link differences")
    if same_link_bytes(taps, other):
        st.info(
            f"TAPS and the {plan_name(other.label)} plan send the same bytes over every link, "
            "so there is no difference to draw."
        )
        return
    show_chart(link_diff_figure(taps, other), "compare_links")



def _downloads(ctx: state.Context, plans: dict[str, Plan | NotFitting], label: str) -> None:
    """The baseline plan's framework exports and the comparison JSON, each built on click."""
    st.subheader(f"Export the {plan_name(label)} plan")
    part = label.replace("_", "-")
    export_buttons(
        cache.exports(
            ctx.workload, ctx.topo_json, ctx.mode, "topology", ctx.memory_limit_bytes, label
        ),
        lambda name: ctx.file_stem(f"{part}_{name}"),
        key=f"dl_cmp_export_{label}",
    )
    st.download_button(
        "Comparison JSON",
        lambda: json.dumps(compare_to_json(plans), indent=1),
        file_name=f"{ctx.file_stem('compare')}.json",
        mime="application/json",
        on_click="ignore",
        key="dl_compare",
    )


main()
