"""Plotly figures for the dashboard (pure: engine results in, ``go.Figure`` out, no Streamlit).

Every figure has a title, axis titles with units and a legend (or a colour bar), fonts of at
least 12 px, and a fixed template, so the PNG/SVG export and the HTML report look like the page.
"""

from __future__ import annotations

import dataclasses
import math
import re

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio
from plotly.subplots import make_subplots

from taps_core.plan.records import NotFitting, Plan
from taps_core.plan.report import fmt_bytes, fmt_seconds
from taps_core.studies.explain import Case
from taps_core.studies.sweep import Priced, Sweep

GiB = 2**30
FONT = dict(family="Inter, Helvetica, Arial, sans-serif", size=13, color="#1f2937")
# Okabe-Ito colours: distinguishable with colour-blindness and in greyscale print
SHARDING_COLORS = {
    "replicated": "#999999",
    "data parallel": "#0072B2",
    "column": "#E69F00",
    "row": "#009E73",
    "2-D": "#CC79A7",
    "expert": "#D55E00",
    "sequence": "#F0E442",  # yellow, not a second blue
}
PLAN_COLORS = {
    "taps": "#D55E00",
    "volume": "#0072B2",
    "megatron": "#009E73",
    "data_parallel": "#CC79A7",
}
PLAN_NAMES = {
    "taps": "TAPS (topology-aware)",
    "volume": "volume-based",
    "megatron": "Megatron-style",
    "data_parallel": "data parallel",
}
LINK_COLORS = {"nvlink": "#76B900", "pcie": "#E69F00", "network": "#0072B2"}
MEMORY_PARTS = (
    ("parameters", "#0072B2"),
    ("gradients", "#56B4E9"),
    ("optimizer", "#E69F00"),
    ("activations", "#009E73"),
    ("kv_cache", "#CC79A7"),
)
MEMORY_NAMES = {"kv_cache": "KV cache"}
OP_KIND_COLORS = (
    "#0072B2",
    "#E69F00",
    "#009E73",
    "#CC79A7",
    "#56B4E9",
    "#D55E00",
    "#F0E442",
    "#999999",
    "#882255",
    "#44AA99",
    "#332288",
)

_AXIS = dict(gridcolor="#EBF0F8", linecolor="#EBF0F8", zerolinecolor="#EBF0F8", ticks="")
# a small white template (plotly_white alone adds ~7 KB of JSON to every figure sent)
TEMPLATE = dict(
    layout=dict(
        paper_bgcolor="white",
        plot_bgcolor="white",
        colorway=list(PLAN_COLORS.values()),
        xaxis=_AXIS,
        yaxis=_AXIS,
        hovermode="closest",
    )
)
# figures the dashboard makes start from it (building plotly's default template costs ~60 ms)
pio.templates["taps"] = go.layout.Template(TEMPLATE)
pio.templates.default = "taps"


def style(
    fig: go.Figure,
    title: str,
    *,
    x: str | None = None,
    y: str | None = None,
    height: int = 380,
    legend_title: str | None = None,
    legend_below: bool = False,
) -> go.Figure:
    """Apply the dashboard look: title, axis titles, legend, readable fonts.

    The legend sits under the title, or under the plot with ``legend_below`` (for subplots,
    whose own titles take the space above).
    """
    legend = dict(
        orientation="h",
        x=0,
        font=dict(size=12),
        traceorder="normal",
        title=dict(text=legend_title) if legend_title else None,
    )
    if legend_below:
        legend.update(yanchor="top", y=-0.12)
    else:
        legend.update(yanchor="bottom", y=1.02)
    fig.update_layout(
        template="taps",
        font=FONT,
        height=height,
        title=dict(text=title, font=dict(size=16), x=0, xanchor="left"),
        margin=dict(l=70, r=30, t=90, b=60 if not legend_below else 110),
        legend=legend,
        hoverlabel=dict(font_size=13),
    )
    if x is not None:
        fig.update_xaxes(title_text=x, title_font=dict(size=13), tickfont=dict(size=12))
    if y is not None:
        fig.update_yaxes(title_text=y, title_font=dict(size=13), tickfont=dict(size=12))
    return fig


def chart_config(fmt: str, name: str) -> dict:
    """Plotly config: the camera button saves ``fmt`` (png at 2x, or svg) as ``<name>.<fmt>``
    (``name`` like ``gpt2_dgx-a100-2_train_links``; unsafe characters become ``-``)."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-")[:120] or "chart"
    opts = {"format": fmt, "filename": name}
    if fmt == "png":
        opts["scale"] = 2
    return {"toImageButtonOptions": opts, "displaylogo": False}


def fmt_gib(nbytes: float) -> str:
    """Bytes as GiB with three significant digits, or MiB below 1 GiB (never "0.0476 GiB")."""
    if abs(nbytes) < GiB:
        return f"{nbytes / 2**20:.3g} MiB"
    return f"{nbytes / GiB:.3g} GiB"


def plan_name(label: str) -> str:
    return PLAN_NAMES.get(label, label)


# ---- plan page ------------------------------------------------------------------------------


def memory_parts(plan: Plan) -> dict[str, float]:
    """Non-zero parts of the memory per device (bytes), whatever parts the engine reports."""
    return _parts(plan.memory)


def _parts(memory: object) -> dict[str, float]:
    parts = dataclasses.asdict(memory) if dataclasses.is_dataclass(memory) else {}
    return {k: float(v) for k, v in parts.items() if isinstance(v, (int, float)) and v > 0}


def lever_labels(plan: Plan) -> list[str]:
    """The memory levers a plan pulls, short (``ZeRO-1``, ``recompute 3/12 layers``, ...)."""
    out = []
    zero = sorted({op.zero for op in plan.ops if op.zero})
    if zero:
        out.append("ZeRO-" + "/".join(map(str, zero)))
    layers = len({op.layer for op in plan.ops if op.layer is not None})
    if plan.recomputed_layers:
        out.append(f"recompute {plan.recomputed_layers}/{layers} layers")
    if plan.selective_layers:
        out.append(f"selective recompute {plan.selective_layers}/{layers} layers")
    if plan.microbatches > 1:
        out.append(f"{plan.microbatches} micro-batches")
    if plan.flash_attention:
        out.append("flash attention")
    return out


def lever_notes(plan: Plan) -> list[str]:
    """What each lever the plan pulls does to the memory bars, one sentence each."""
    out = []
    zero = max((op.zero for op in plan.ops), default=0)
    if zero:
        held = {
            1: "optimizer state",
            2: "optimizer state and gradients",
            3: "optimizer state, gradients and parameters",
        }[min(zero, 3)]
        out.append(
            f"ZeRO-{zero}: each weight's {held} divided over the GPUs that hold copies "
            "of it (its data-parallel group)."
        )
    if plan.recomputed_layers:
        layers = len({op.layer for op in plan.ops if op.layer is not None})
        out.append(
            f"Recomputation: {plan.recomputed_layers} of {layers} layers keep only "
            "their input for backward and run their forward again."
        )
    if plan.selective_layers:
        layers = len({op.layer for op in plan.ops if op.layer is not None})
        out.append(
            f"Selective recomputation: {plan.selective_layers} of {layers} layers keep no "
            "attention scores and run their attention core again in backward."
        )
    pi = plan.pipeline
    if pi is not None:
        p = len(pi.stages)
        out.append(
            f"Pipeline: activations are kept per micro-batch in flight "
            f"({pi.micro_batch_size} samples each); under 1F1B the first stage holds up "
            f"to {min(p, pi.microbatches)} at once, the last stage one."
        )
    elif plan.microbatches > 1:
        out.append(
            f"Gradient accumulation: activations of one micro-batch at a time "
            f"(1/{plan.microbatches} of the batch)."
        )
    if plan.flash_attention:
        out.append("Flash attention: no attention-score tensors kept for backward.")
    if plan.memory.kv_cache > 0:
        out.append("KV cache: K and V of every layer for the whole sequence.")
    return out


def lever_effects(plan: Plan) -> dict[str, str]:
    """Memory part -> the levers that shrink it in this plan (for the bars' hover)."""
    zero = max((op.zero for op in plan.ops), default=0)
    out: dict[str, list[str]] = {}
    for part, stage in (("optimizer", 1), ("gradients", 2), ("parameters", 3)):
        if zero >= stage:
            out.setdefault(part, []).append(f"sharded by ZeRO-{zero}")
    if plan.recomputed_layers:
        out.setdefault("activations", []).append(f"{plan.recomputed_layers} layers recomputed")
    if plan.selective_layers:
        out.setdefault("activations", []).append(
            f"attention scores recomputed in {plan.selective_layers} layers")
    if plan.microbatches > 1:
        out.setdefault("activations", []).append(f"per micro-batch, {plan.microbatches} a step")
    if plan.flash_attention:
        out.setdefault("activations", []).append("flash attention")
    return {k: ", ".join(v) for k, v in out.items()}


def memory_figure(plan: Plan) -> go.Figure:
    """Memory per device as one stacked bar (one per stage for a pipelined plan), only the
    parts this mode holds; the title names the memory levers the plan pulls."""
    fig = go.Figure()
    m = plan.memory
    colors = dict(MEMORY_PARTS)
    pi = plan.pipeline
    rows = (
        [(f"stage {st.index}", st.plan.memory) for st in pi.stages]
        if pi is not None
        else [("per device", m)]
    )
    parts: dict[str, list[float]] = {}
    for i, (_, mem) in enumerate(rows):
        for part, nbytes in _parts(mem).items():
            parts.setdefault(part, [0.0] * len(rows))[i] = nbytes
    total = max((mem.total for _, mem in rows), default=m.total)
    unit, scale = ("GiB", GiB) if total >= GiB else ("MiB", 2**20)
    extra = iter(OP_KIND_COLORS[5:])
    effects = lever_effects(plan)
    for part, values in parts.items():
        name = MEMORY_NAMES.get(part, part.replace("_", " "))
        effect = f" ({effects[part]})" if part in effects else ""
        fig.add_bar(
            y=[label for label, _ in rows],
            x=[round(v / scale, 6) for v in values],
            orientation="h",
            name=name,
            marker_color=colors.get(part) or next(extra, "#999999"),
            hovertemplate=f"%{{y}} {name}: %{{x:.3g}} {unit}{effect}<extra></extra>",
        )
    limit = plan.memory_limit_bytes / scale
    top = total / scale
    if top >= 0.2 * limit:  # near the limit: show both to scale
        fig.add_vline(
            x=limit,
            line=dict(color="#b91c1c", dash="dash", width=2),
            annotation=dict(text=f"limit {fmt_gib(plan.memory_limit_bytes)}", font=dict(size=12)),
        )
        fig.update_xaxes(range=[0, max(limit, top) * 1.08])
    else:  # far below it: zoom on the bar, say where the limit is
        fig.update_xaxes(range=[0, top * 1.25 or 1.0])
        fig.add_annotation(
            x=1,
            xref="paper",
            y=1.0,
            yref="paper",
            xanchor="right",
            yanchor="bottom",
            text=f"limit {fmt_gib(plan.memory_limit_bytes)}: off scale →",
            showarrow=False,
            font=dict(size=12, color="#b91c1c"),
        )
    fig.update_layout(barmode="stack")
    if pi is not None:
        fig.update_yaxes(autorange="reversed")
    levers = lever_labels(plan)
    where = " (fullest stage)" if pi is not None else ""
    return style(
        fig,
        f"Memory per device{where}: {fmt_gib(m.total)} of {fmt_gib(plan.memory_limit_bytes)}"
        + (f" · levers: {', '.join(levers)}" if levers else " · no memory levers"),
        x=f"memory per device ({unit})",
        height=250 if pi is None else 220 + 34 * len(rows),
    )


# ---- compare page ---------------------------------------------------------------------------


def time_unit(longest_s: float) -> tuple[float, str]:
    """(factor from seconds, unit) for an axis whose longest time is ``longest_s``: ms below
    10 s, seconds from there (a 154 s step reads "150", not "150k" ms)."""
    return (1.0, "s") if longest_s >= 10 else (1e3, "ms")


def time_figure(plans: dict[str, Plan | NotFitting]) -> go.Figure:
    """Step time per plan, compute + communication stacked; plans that do not fit say so."""
    labels = list(plans)
    names = [plan_name(lb) for lb in labels]
    fitting = [p for p in plans.values() if isinstance(p, Plan)]
    k, unit = time_unit(max((p.total_time_s for p in fitting), default=0.0))
    comp = [p.compute_time_s * k if isinstance(p, Plan) else 0.0 for p in plans.values()]
    comm = [p.comm_time_s * k if isinstance(p, Plan) else 0.0 for p in plans.values()]
    bubble = [p.bubble_time_s * k if isinstance(p, Plan) else 0.0 for p in plans.values()]
    fig = go.Figure()
    fig.add_bar(
        x=names,
        y=comp,
        name="compute",
        marker_color="#9ca3af",
        hovertemplate="%{x}<br>compute %{y:.3g} " + unit + "<extra></extra>",
    )
    fig.add_bar(
        x=names,
        y=comm,
        name="communication (colour per plan)",
        marker_color=[PLAN_COLORS.get(lb, "#333") for lb in labels],
        hovertemplate="%{x}<br>communication %{y:.3g} " + unit + "<extra></extra>",
    )
    if any(bubble):  # pipelined plans: the fill-and-drain idle time is part of the step
        fig.add_bar(
            x=names,
            y=bubble,
            name="pipeline bubble (idle)",
            marker=dict(color="#e5e7eb", pattern=dict(shape="/", fgcolor="#6b7280", size=6)),
            hovertemplate="%{x}<br>pipeline bubble %{y:.3g} " + unit + "<extra></extra>",
        )
    top = max((a + b + c for a, b, c in zip(comp, comm, bubble)), default=1.0) or 1.0
    for name, p in zip(names, plans.values()):
        if isinstance(p, NotFitting):
            fig.add_annotation(
                x=name,
                y=top * 0.05,
                text="does not fit",
                showarrow=False,
                font=dict(size=13, color="#b91c1c"),
                yanchor="bottom",
            )
        else:
            fig.add_annotation(
                x=name,
                y=p.total_time_s * k,
                text=fmt_seconds(p.total_time_s),
                showarrow=False,
                yanchor="bottom",
                font=dict(size=12),
            )
    fig.update_layout(barmode="stack")
    return style(
        fig,
        "Step time per plan (compute + communication"
        + (" + pipeline bubble" if any(bubble) else "")
        + ", no overlap)",
        x="plan",
        y=f"time per step ({unit})",
    )


def same_link_bytes(a: Plan, b: Plan, rel: float = 1e-9) -> bool:
    """Whether two plans load every directed link with the same bytes (within ``rel`` of the
    busiest link): then a "where they differ most" chart would show equal pairs of bars."""
    bytes_a = {(k.src, k.dst): k.bytes for k in a.links}
    bytes_b = {(k.src, k.dst): k.bytes for k in b.links}
    scale = max([*bytes_a.values(), *bytes_b.values(), 1.0])
    return all(
        abs(bytes_a.get(key, 0.0) - bytes_b.get(key, 0.0)) <= rel * scale
        for key in bytes_a.keys() | bytes_b.keys()
    )


def link_diff_figure(taps: Plan, other: Plan, top: int = 20) -> go.Figure:
    """Per-link bytes of TAPS and another plan, for the links where they differ most.

    Horizontal bars: link names (``n0.nic3→net``) read along the y axis, which grows its margin
    to the longest, so no name is clipped however many links are listed.
    """
    a = {(k.src, k.dst): k for k in taps.links}
    b = {(k.src, k.dst): k for k in other.links}
    keys = sorted(
        set(a) | set(b),
        key=lambda k: -abs((a[k].bytes if k in a else 0) - (b[k].bytes if k in b else 0)),
    )
    keys = keys[:top]
    names = [f"{s}→{d}" for s, d in keys]
    fig = go.Figure()
    for label, table in ((taps.label, a), (other.label, b)):
        fig.add_bar(
            y=names,
            x=[table[k].bytes / 1e9 if k in table else 0.0 for k in keys],
            orientation="h",
            name=plan_name(label),
            marker_color=PLAN_COLORS.get(label, "#333"),
            hovertemplate="%{y}<br>%{x:.3g} GB<extra>" + plan_name(label) + "</extra>",
        )
    fig.update_layout(barmode="group")
    fig.update_yaxes(autorange="reversed", automargin=True, tickfont=dict(size=12))
    return style(
        fig,
        f"Links where TAPS and {plan_name(other.label)} differ most (top {len(keys)})",
        x="bytes per step (GB)",
        y="directed link",
        height=200 + 26 * max(len(keys), 3),
    )


# ---- sweep page -----------------------------------------------------------------------------


def log_ticks(lo: float, hi: float) -> list[float]:
    """1-2-5 tick values covering [lo, hi] (log axes label only these: no '7 8 9 1 2' runs)."""
    if not (lo > 0 and hi > 0):
        return []
    out = []
    for e in range(math.floor(math.log10(lo)) - 1, math.ceil(math.log10(hi)) + 1):
        for m in (1, 2, 5):
            v = m * 10.0**e
            if lo / 1.5 <= v <= hi * 1.5:
                out.append(float(f"{v:.6g}"))
    return out


CHANGE_MARKS = "①②③④⑤⑥⑦⑧⑨⑩"
# plan -> (marker symbol, line dash, line width px, opacity); drawn widest first, TAPS last (on
# top); each plan its own marker and dash, so a curve lying on another (volume-based on data
# parallel) still shows
SWEEP_LOOK: dict[str, tuple[str, str, float, float]] = {
    "data_parallel": ("triangle-up", "solid", 5.0, 0.55),
    "megatron": ("square", "solid", 2.0, 1.0),
    "volume": ("diamond", "dash", 2.0, 1.0),
    "taps": ("circle", "solid", 3.5, 1.0),
}
SWEEP_LEGEND = ("taps", "volume", "megatron", "data_parallel")  # legend order (others after)


def sweep_figure(sw: Sweep, current_Bps: float | None = None) -> go.Figure:
    """Step time per plan against inter-node bandwidth (top), its communication and compute
    parts (bottom), TAPS's plan changes as shaded bands, hosts repeating work as hollow marks,
    the cluster's own bandwidth (a point of the sweep) as a star on TAPS's curve.

    Points not computed yet are gaps bridged by the line, so a sweep in progress shows its
    shape.
    """
    bubble = any(  # pipelined plans' steps include the fill-and-drain idle time
        q.fits and q.bubble_time_s for p in sw.points if p is not None for q in p.plans.values()
    )
    fig = make_subplots(
        rows=2, cols=1, shared_xaxes=True, row_heights=[0.6, 0.4], vertical_spacing=0.1,
        subplot_titles=(
            "Step time per plan (compute + communication"
            + (" + pipeline bubble" if bubble else "") + ", no overlap)",
            "Its parts: communication (solid) and compute (dotted)",
        ),
    )
    x = list(np.array(sw.bandwidths_Bps) / 1e9)
    ys: list[float] = []
    look = list(SWEEP_LOOK)
    for label in sorted(sw.labels, key=lambda lb: look.index(lb) if lb in look else -1):
        ys += _sweep_plan_traces(fig, sw, label, x)
    _sweep_own_star(fig, sw)
    fig.add_scatter(  # legend key for hollow marks
        x=[None], y=[None], mode="markers", name="hollow: hosts repeat ≥50% of the work",
        marker=dict(size=10, color="white", line=dict(color="#374151", width=2)), row=1, col=1,
    )
    _sweep_change_bands(fig, sw, x)
    if current_Bps:
        _sweep_current_line(fig, current_Bps)
    _sweep_axes(fig, x, ys)
    return _sweep_layout(fig)


_Ms = list[float | None]  # one time per bandwidth (ms), None: not priced yet or does not fit


def _fitting_ms(priced: list[Priced | None], attr: str) -> _Ms:
    """Time ``attr`` of each point in ms, None where the plan is not priced yet or does not fit."""
    return [getattr(q, attr) * 1e3 if q is not None and q.fits else None for q in priced]


def _sweep_plan_traces(fig: go.Figure, sw: Sweep, label: str, x: list[float]) -> list[float]:
    """Draw one plan's step-time curve and its parts; returns the times drawn (ms, for ticks)."""
    priced = [None if p is None else p.plans.get(label) for p in sw.points]
    if not any(q is not None and q.fits for q in priced):
        return []  # never fits: no legend entry (the page says why)
    total = _fitting_ms(priced, "total_time_s")
    comm = _fitting_ms(priced, "comm_time_s")
    comp = _fitting_ms(priced, "compute_time_s")
    _sweep_step_trace(fig, label, x, priced, total, comm, comp)
    _sweep_part_traces(fig, label, x, comm, comp)
    return [v for v in (*total, *comm, *comp) if v]


def _sweep_step_trace(
    fig: go.Figure, label: str, x: list[float], priced: list[Priced | None], total: _Ms,
    comm: _Ms, comp: _Ms,
) -> None:
    """Top plot: one plan's step time (ms) per bandwidth, hollow where hosts repeat work."""
    color = PLAN_COLORS.get(label, "#333")
    name = plan_name(label)
    rep = [q.replicated_across if q is not None and q.fits else 0.0 for q in priced]
    symbol, dash, width, opacity = SWEEP_LOOK.get(label, ("square", "solid", 2.0, 1.0))
    fig.add_scatter(
        x=x,
        y=total,
        name=name,
        legendgroup=label,
        legendrank=SWEEP_LEGEND.index(label) if label in SWEEP_LOOK else 9,
        mode="lines+markers",
        connectgaps=True,
        opacity=opacity,
        line=dict(color=color, width=width, dash=dash),
        marker=dict(
            size=10 if label in ("taps", "data_parallel") else 8,
            color=["white" if r >= 0.5 else color for r in rep],
            line=dict(color=color, width=2),
            symbol=symbol,
        ),
        customdata=np.array(
            [
                [c or 0.0, m or 0.0, 100 * r, (q.bubble_time_s or 0.0) * 1e3 if q else 0.0]
                for c, m, r, q in zip(comm, comp, rep, priced)
            ]
        ),
        hovertemplate="%{x:.3g} GB/s per host<br>step %{y:.4g} ms = communication "
        "%{customdata[0]:.3g} ms + compute %{customdata[1]:.3g} ms + pipeline bubble "
        "%{customdata[3]:.3g} ms<br>hosts repeat "
        "%{customdata[2]:.0f}% of the compute<extra>" + name + "</extra>",
        row=1,
        col=1,
    )


def _sweep_part_traces(fig: go.Figure, label: str, x: list[float], comm: _Ms, comp: _Ms) -> None:
    """Bottom plot: one plan's communication (solid) and compute (dotted) time (ms)."""
    color = PLAN_COLORS.get(label, "#333")
    name = plan_name(label)
    opacity = SWEEP_LOOK.get(label, ("square", "solid", 2.0, 1.0))[3]
    width = 2.5 if label == "taps" else 4.0 if label == "data_parallel" else 1.5
    for part, dash in ((comm, "solid"), (comp, "dot")):
        fig.add_scatter(
            x=x,
            y=part,
            name=name,
            legendgroup=label,
            showlegend=False,
            mode="lines",
            connectgaps=True,
            opacity=opacity,
            line=dict(color=color, width=width, dash=dash),
            hovertemplate="%{x:.3g} GB/s: %{y:.3g} ms<extra>" + name
            + (" communication" if dash == "solid" else " compute") + "</extra>",
            row=2,
            col=1,
        )


def _sweep_own_star(fig: go.Figure, sw: Sweep) -> None:
    """A star at the cluster's own bandwidth on TAPS's curve: the Plan page's step time (ms)."""
    own = [
        (p.node_bandwidth_Bps / 1e9, p.plans["taps"].total_time_s * 1e3)
        for p in sw.points
        if p is not None and sw.is_own(p.node_bandwidth_Bps) and p.plans["taps"].fits
    ]
    if own:  # the cluster's own bandwidth is a point: the Plan page's plan and step time
        fig.add_scatter(
            x=[own[0][0]],
            y=[own[0][1]],
            name="this cluster (the Plan page's plan)",
            mode="markers",
            marker=dict(size=18, symbol="star", color="#facc15", line=dict(color="#111827",
                                                                         width=1.5)),
            hovertemplate="this cluster: %{x:.3g} GB/s per host<br>TAPS step %{y:.4g} ms"
            "<extra></extra>",
            row=1,
            col=1,
        )


MARK_GAP_SHARE = 0.035  # change marks on one row keep this share of the x axis apart (~24 px)
MARK_ROW_STEP = 0.13  # each further row of marks sits this share of the top plot lower


def mark_rows(xs: list[float], gap: float) -> list[int]:
    """A row per mark (0: the top one) such that marks on one row are at least ``gap`` apart
    along x (any unit): left to right, each takes the first row whose last mark is far
    enough, so close changes stack instead of printing over each other."""
    rows = [0] * len(xs)
    last: list[float] = []  # the x of each row's rightmost mark
    for i in sorted(range(len(xs)), key=lambda j: xs[j]):
        row = next((r for r, x in enumerate(last) if xs[i] - x >= gap), len(last))
        if row == len(last):
            last.append(xs[i])
        last[row] = xs[i]
        rows[i] = row
    return rows


def _sweep_change_bands(fig: go.Figure, sw: Sweep, x: list[float]) -> None:
    """Shade each bandwidth range (GB/s) where TAPS's plan changes, numbered ①, ② ... on top
    (stacked in rows where changes lie closer than a mark's width on the axis over ``x``)."""
    changes = sw.plan_changes  # equal-cost twins change no step: not marked
    centres = [math.log10(math.sqrt(c.low_Bps * c.high_Bps) / 1e9) for c in changes]
    span = math.log10(max(x) / min(x)) if x and min(x) > 0 else 1.0
    rows = mark_rows(centres, MARK_GAP_SHARE * max(span, 1e-9))
    for i, c in enumerate(changes):
        mark = CHANGE_MARKS[i] if i < len(CHANGE_MARKS) else str(i + 1)
        lo, hi = c.low_Bps / 1e9, c.high_Bps / 1e9
        for row in (1, 2):
            fig.add_vrect(x0=lo, x1=hi, fillcolor="#6b7280", opacity=0.25 if c.located else 0.1,
                          line_width=0, row=row, col=1)
        fig.add_annotation(  # inside the top plot, under its subplot title
            x=centres[i], y=1.0 - MARK_ROW_STEP * rows[i], xref="x", yref="y domain",
            yanchor="top", text=f"<b>{mark}</b>", showarrow=False, bgcolor="white",
            font=dict(size=15, color="#111827"),
        )


def _sweep_current_line(fig: go.Figure, current_Bps: float) -> None:
    """A dotted line at the cluster's bandwidth (bytes/s per host), labelled at the bottom
    (away from legend and marks)."""
    fig.add_vline(x=current_Bps / 1e9, line=dict(color="#6b7280", dash="dot", width=2))
    fig.add_annotation(
        x=math.log10(current_Bps / 1e9), xref="x", y=0.0, yref="paper", yanchor="bottom",
        xanchor="left", text=f" this cluster: {current_Bps / 1e9:.3g} GB/s", showarrow=False,
        font=dict(size=12, color="#374151"), bgcolor="rgba(255,255,255,0.85)",
    )


def _sweep_axes(fig: go.Figure, x: list[float], ys: list[float]) -> None:
    """Log axes ticked 1-2-5 over the bandwidths ``x`` (GB/s) and times ``ys`` (ms)."""
    ticks = log_ticks(min(x), max(x))
    fig.update_xaxes(type="log", tickvals=ticks, ticktext=[f"{t:g}" for t in ticks])
    fig.update_xaxes(title_text="inter-node bandwidth per host (GB/s, log scale)", row=2, col=1)
    # ticks stay in the data's ms; their text reads seconds once a step reaches 10 s
    scale, unit = time_unit(max(ys, default=0.0) / 1e3)
    if ys:
        yt = log_ticks(min(ys), max(ys))
        fig.update_yaxes(type="log", tickvals=yt, ticktext=[f"{t * scale / 1e3:g}" for t in yt])
    fig.update_yaxes(title_text=f"{unit} per step (log)", row=1, col=1)
    fig.update_yaxes(title_text=f"{unit} per step (log)", row=2, col=1)
    fig.update_annotations(font_size=13, selector=dict(xref="x domain"))


def _sweep_layout(fig: go.Figure) -> go.Figure:
    """Title, fonts and the legend at the figure's foot, under the x-axis title."""
    fig = style(fig, "Step time vs inter-node bandwidth", height=680, legend_below=True,
                legend_title="plan")
    # the legend at the figure's foot (container coordinates), under the x-axis title
    fig.update_layout(legend=dict(yref="container", y=0, yanchor="bottom"), margin=dict(b=130))
    return fig


# ---- how-it-works page ------------------------------------------------------------------------


def explain_figure(cases: tuple[Case, Case]) -> go.Figure:
    """Bytes each GPU sends vs time taken, for plans A and B side by side."""
    fig = make_subplots(
        rows=1,
        cols=2,
        subplot_titles=("What a volume model sees: bytes per GPU", "What the GPUs feel: time"),
    )
    colors = ("#009E73", "#0072B2")
    for case, color in zip(cases, colors):
        name = f"plan {case.name}: {case.description}"
        fig.add_bar(
            x=[f"plan {case.name}"],
            y=[case.bytes_per_gpu / 1e9],
            name=name,
            marker_color=color,
            legendgroup=case.name,
            text=[fmt_bytes(case.bytes_per_gpu)],
            textposition="outside",
            row=1,
            col=1,
            hovertemplate=f"{name}<br>%{{y:.3g}} GB per GPU<extra></extra>",
        )
        fig.add_bar(
            x=[f"plan {case.name}"],
            y=[case.time_s * 1e3],
            name=name,
            showlegend=False,
            marker_color=color,
            legendgroup=case.name,
            text=[fmt_seconds(case.time_s)],
            textposition="outside",
            row=1,
            col=2,
            hovertemplate=f"{name}<br>%{{y:.3g}} ms<extra></extra>",
        )
    fig.update_yaxes(
        title_text="bytes sent per GPU (GB)",
        row=1,
        col=1,
        range=[0, max(c.bytes_per_gpu for c in cases) / 1e9 * 1.25],
    )
    fig.update_yaxes(
        title_text="all-reduce time (ms)",
        row=1,
        col=2,
        range=[0, max(c.time_s for c in cases) * 1e3 * 1.25],
    )
    fig.update_annotations(font_size=14)
    fig.update_traces(textfont_size=13, cliponaxis=False)
    return style(
        fig,
        "All-reduce of one buffer: plan A (inside a host) vs plan B (across hosts)",
        height=460,
        legend_below=True,
    )
