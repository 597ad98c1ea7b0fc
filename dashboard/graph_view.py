"""The operator graph as a left-to-right DAG, with repeated layers folded into one block.

Two layers are *identical* when they have the same ops (names relative to the layer), output
shapes, strategies, ZeRO stages, recomputation and pipeline stage. Collapsed, each distinct
layer is drawn once, marked ``x N``; edges from one copy of a layer to the next would loop back
into the block and are dropped. Positions come from networkx's topological generations (x) and
the order inside a generation (y). A pipelined plan's stages are shaded bands.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, replace

import networkx as nx
import plotly.graph_objects as go

from dashboard.charts import FONT, SHARDING_COLORS, style
from dashboard.pipeline_view import stage_label
from taps_core.explain import layer_relative_names
from taps_core.graph import OpGraph
from taps_core.plan import OpPlan, Plan
from taps_core.report import (
    SHARDING_CLASSES,
    fmt_bytes,
    fmt_seconds,
    sharding_class,
    strategy_words,
)

MAX_VISIBLE_GENERATIONS = 28  # wider graphs open zoomed on their start (labels stay legible)


def _relative_names(plan: Plan) -> dict[str, str]:
    """Op name without its layer's common dotted prefix (``L3.attn.q`` -> ``attn.q``)."""
    return layer_relative_names(plan.ops)


@dataclass(frozen=True)
class LayerGroups:
    """``rep[layer]`` is the first layer identical to ``layer``; ``count[rep]`` their number;
    ``members[op]`` the ops (one per identical layer) an op of a representative layer stands for.
    """

    rep: dict[int, int]
    count: dict[int, int]
    members: dict[str, tuple[str, ...]]
    relative: dict[str, str]


def layer_groups(plan: Plan, graph: OpGraph) -> LayerGroups:
    """Group identical layers of a plan (see the module docstring)."""
    relative = _relative_names(plan)
    sig: dict[int, list[tuple]] = {}
    for op in plan.ops:
        if op.layer is not None:
            shape = graph.tensors[graph.op_by_name[op.name].output].shape
            sig.setdefault(op.layer, []).append(
                (relative[op.name], op.strategy.label(), shape, op.zero, op.recompute, op.stage)
            )
    first: dict[tuple, int] = {}
    rep: dict[int, int] = {}
    for layer, ops in sig.items():  # dict order = first appearance in the graph
        rep[layer] = first.setdefault(tuple(ops), layer)
    count = Counter(rep.values())
    members: dict[str, list[str]] = {}
    rep_name: dict[tuple[int, str], str] = {}
    for op in plan.ops:
        if op.layer is None:
            members[op.name] = [op.name]
            continue
        key = (rep[op.layer], relative[op.name])
        if op.layer == rep[op.layer]:
            rep_name[key] = op.name
            members[op.name] = [op.name]
        else:
            members[rep_name[key]].append(op.name)
    return LayerGroups(rep, dict(count), {k: tuple(v) for k, v in members.items()}, relative)


@dataclass(frozen=True)
class DagLayout:
    """Shown ops with positions, shown edges, and the blocks of folded layers."""

    nodes: tuple[str, ...]
    pos: dict[str, tuple[float, float]]
    edges: tuple[tuple[str, str], ...]
    blocks: tuple[tuple[int, int, tuple[str, ...]], ...]  # (layer, copies, its ops)
    groups: LayerGroups


def dag_layout(plan: Plan, graph: OpGraph, *, expand: bool = False) -> DagLayout:
    """Positions of the shown ops: x = topological generation, y = order within it."""
    groups = layer_groups(plan, graph)
    index = {op.name: i for i, op in enumerate(plan.ops)}
    if expand:
        to_shown = {op.name: op.name for op in plan.ops}
    else:
        to_shown = {m: rep for rep, ms in groups.members.items() for m in ms}
    shown = sorted(set(to_shown.values()), key=index.__getitem__)
    dag = nx.DiGraph()
    dag.add_nodes_from(shown)
    for u, v in graph.digraph.edges:
        a, b = to_shown.get(u), to_shown.get(v)
        # edges folding back into a block are dropped: stays a DAG
        if a is not None and b is not None and index[a] < index[b]:
            dag.add_edge(a, b)
    pos: dict[str, tuple[float, float]] = {}
    for x, gen in enumerate(nx.topological_generations(dag)):
        gen = sorted(gen, key=index.__getitem__)
        for i, name in enumerate(gen):
            pos[name] = (float(x), (len(gen) - 1) / 2 - i)
    by_layer: dict[int, list[str]] = {}  # every shown layer gets a box and a label
    for name in shown:
        layer = plan.ops[index[name]].layer
        if layer is not None:
            by_layer.setdefault(layer, []).append(name)
    blocks = [
        (layer, 1 if expand else groups.count.get(layer, 1), tuple(names))
        for layer, names in by_layer.items()
    ]
    return DagLayout(tuple(shown), pos, tuple(dag.edges), tuple(blocks), groups)


def inside_class(op: OpPlan) -> str:
    """Sharding class of an op's split inside a host alone (replicated inside = grey)."""
    return sharding_class(replace(op, strategy=replace(op.strategy, inter=())))


def host_counts(plan: Plan) -> dict[int | None, int]:
    """Hosts an op runs on, by pipeline stage (key None: the whole cluster, no stages)."""
    out: dict[int | None, int] = {None: plan.nodes}
    if plan.pipeline is not None:
        out.update({st.index: len(st.hosts) for st in plan.pipeline.stages})
    return out


def across_state(op: OpPlan, nodes: int) -> str:
    """``split`` (uses every host it runs on: the cluster's, or its pipeline stage's),
    ``repeated`` (those hosts repeat it) or ``single`` (one host)."""
    if nodes <= 1:
        return "single"
    return "split" if math.prod(f for _, f in op.strategy.inter) == nodes else "repeated"


def label_chars(lay: DagLayout, width_px: int = 1100) -> int:
    """Characters a label may use so neighbours never overlap (0: no labels).

    Labels alternate above and below their node column by column, so a label may span two
    columns; at 12 px a character is about 7 px wide. Columns closer than 30 px get none.
    """
    columns = min(
        int(max((x for x, _ in lay.pos.values()), default=0)) + 1, MAX_VISIBLE_GENERATIONS
    )
    per_column = width_px / max(columns, 1)
    return 0 if per_column < 30 else max(4, int(2 * per_column / 7) - 1)


def _short(name: str, chars: int) -> str:
    return name if len(name) <= chars else name[: max(chars - 1, 1)] + "…"


def _hover(op: OpPlan, graph: OpGraph, copies: int, differs: int | None, baseline: str) -> str:
    spec = graph.op_by_name[op.name]
    ins = "<br>".join(f"&nbsp;&nbsp;{t} {list(graph.tensors[t].shape)}" for t in spec.inputs)
    out = graph.tensors[spec.output]
    lines = [
        f"<b>{op.name}</b> ({op.kind})" + (f" ×{copies} identical layers" if copies > 1 else ""),
        f"einsum {op.einsum}",
        f"inputs:<br>{ins}",
        f"output: {spec.output} {list(out.shape)}",
        f"strategy: {op.strategy.label()} ({sharding_class(op)})",
        f"= {strategy_words(op.strategy)}",
        f"ZeRO-{op.zero}"
        + (", layer recomputed in backward" if op.recompute else "")
        + (f", pipeline stage {op.stage}" if op.stage is not None else ""),
        f"compute {fmt_seconds(op.compute_s)}, comm {fmt_seconds(op.comm_time_s)} "
        f"({fmt_bytes(op.comm_bytes)})" + (" per layer" if copies > 1 else ""),
    ]
    if differs:
        lines.append(
            f"<b>differs from {baseline}</b>"
            + (f" in {differs} of {copies} layers" if copies > 1 else "")
        )
    return "<br>".join(lines)


def dag_figure(
    plan: Plan,
    graph: OpGraph,
    *,
    expand: bool = False,
    highlight: set[str] | None = None,
    baseline: str = "",
    title: str | None = None,
    layout: DagLayout | None = None,
) -> go.Figure:
    """Plotly DAG coloured by sharding class; ``highlight`` ops get a red ring."""
    lay = layout or dag_layout(plan, graph, expand=expand)
    ops = {op.name: op for op in plan.ops}
    highlight = highlight or set()
    fig = go.Figure()
    ex, ey = [], []
    for u, v in lay.edges:
        (x0, y0), (x1, y1) = lay.pos[u], lay.pos[v]
        ex += [x0, x1, None]
        ey += [y0, y1, None]
    fig.add_scatter(
        x=ex,
        y=ey,
        mode="lines",
        line=dict(color="#9ca3af", width=1.2),
        hoverinfo="skip",
        showlegend=False,
    )
    shapes, notes = [], []
    for layer, copies, names in lay.blocks:
        xs = [lay.pos[n][0] for n in names]
        ys = [lay.pos[n][1] for n in names]
        shapes.append(
            dict(
                type="rect",
                x0=min(xs) - 0.45,
                x1=max(xs) + 0.45,
                y0=min(ys) - 0.8,
                y1=max(ys) + 0.8,
                line=dict(color="#6b7280", dash="dot", width=1.5),
                fillcolor="rgba(107,114,128,0.07)" if copies > 1 else "rgba(0,0,0,0)",
                layer="below",
            )
        )
        notes.append(
            dict(
                x=(min(xs) + max(xs)) / 2,
                y=max(ys) + 0.8,
                yanchor="bottom",
                text=f"<b>layer {layer}" + (f" ×{copies}</b>" if copies > 1 else "</b>"),
                showarrow=False,
                font=dict(size=13 if copies > 1 else 12, color="#374151"),
            )
        )
    ys_all = [p[1] for p in lay.pos.values()] or [0.0]
    top = max(ys_all) + (2.6 if plan.pipeline is not None else 1.6)
    band_shapes, band_notes = stage_bands(plan, lay, top)
    shapes = band_shapes + shapes
    notes += band_notes
    fig.update_layout(shapes=shapes, annotations=notes)  # at once: add_shape is quadratic
    hosts = host_counts(plan)
    by_class: dict[tuple[str, str], list[str]] = {}
    for name in lay.nodes:
        op = ops[name]
        state = across_state(op, hosts.get(op.stage, plan.nodes))
        by_class.setdefault((inside_class(op), state), []).append(name)
    many = len(lay.nodes) > 400
    chars = label_chars(lay)
    shown_classes: set[str] = set()
    for klass in SHARDING_CLASSES:
        for state in ("split", "repeated", "single"):
            names = by_class.get((klass, state))
            if not names:
                continue
            copies = [len(lay.groups.members[n]) if not expand else 1 for n in names]
            diffs = [
                sum(m in highlight for m in (lay.groups.members[n] if not expand else (n,)))
                for n in names
            ]
            color = SHARDING_COLORS[klass]
            fig.add_scatter(
                x=[lay.pos[n][0] for n in names],
                y=[lay.pos[n][1] for n in names],
                mode="markers" if many or chars == 0 else "markers+text",
                name=klass,
                legendgroup=klass,
                showlegend=klass not in shown_classes,
                text=[_short(lay.groups.relative.get(n, n), chars) for n in names],
                textposition=[
                    "top center" if int(lay.pos[n][0]) % 2 == 0 else "bottom center" for n in names
                ],
                textfont=dict(size=12, color="#374151"),
                marker=dict(
                    size=16,
                    color="white" if state == "repeated" else color,
                    symbol="circle",
                    line=dict(
                        color={"split": "#111827", "repeated": color}.get(state, "white"),
                        width=3 if state != "single" else 1,
                    ),
                ),
                hovertext=[
                    _hover(ops[n], graph, c, d, baseline) for n, c, d in zip(names, copies, diffs)
                ],
                hoverinfo="text",
            )
            shown_classes.add(klass)
    if any(state != "single" for _, state in by_class):  # legend keys: across-hosts encoding
        for label, marker in (
            (
                "dark ring: also split across hosts",
                dict(color="#9ca3af", line=dict(color="#111827", width=3)),
            ),
            (
                "hollow: every host repeats it",
                dict(color="white", line=dict(color="#6b7280", width=3)),
            ),
        ):
            fig.add_scatter(
                x=[None], y=[None], mode="markers", name=label, marker=dict(size=16, **marker)
            )
    if highlight:  # rings drawn over the class markers, so legend swatches stay plain
        ringed = [
            n
            for n in lay.nodes
            if any(m in highlight for m in (lay.groups.members[n] if not expand else (n,)))
        ]
        fig.add_scatter(
            x=[lay.pos[n][0] for n in ringed] or [None],
            y=[lay.pos[n][1] for n in ringed] or [None],
            mode="markers",
            name=f"differs from {baseline}",
            hoverinfo="skip",
            marker=dict(size=24, symbol="circle-open", color="#dc2626", line=dict(width=3)),
        )
    if band_shapes:
        fig.add_scatter(
            x=[None],
            y=[None],
            mode="markers",
            name="pipeline stage (shaded band)",
            marker=dict(size=16, symbol="square", color=STAGE_FILLS[0], line=dict(width=0)),
        )
    if any(copies > 1 for _, copies, _ in lay.blocks):
        fig.add_scatter(
            x=[None],
            y=[None],
            mode="markers",
            name="identical layers (×N)",
            marker=dict(
                size=16,
                symbol="square",
                color="rgba(107,114,128,0.15)",
                line=dict(color="#6b7280", width=1.5),
            ),
        )
    xs = [p[0] for p in lay.pos.values()] or [0.0]
    ys = [p[1] for p in lay.pos.values()] or [0.0]
    xmax = max(xs)
    fig.update_xaxes(
        showgrid=False,
        zeroline=False,
        showticklabels=False,
        range=[-0.8, min(xmax, MAX_VISIBLE_GENERATIONS) + 0.8],
    )
    fig.update_yaxes(
        showgrid=False, zeroline=False, showticklabels=False, range=[min(ys) - 1.4, top]
    )
    height = int(max(360, 90 * (max(ys) - min(ys) + 3)))
    what = "all layers" if expand else "identical layers folded"
    fig = style(
        fig,
        title or f"Operator graph: how each op is split ({what})",
        x="execution order, left to right (one column per dependency level)",
        height=min(height, 640) + 90,
        legend_title="split inside hosts",
        legend_below=True,
    )
    fig.update_layout(dragmode="pan", font=FONT)
    return fig


STAGE_FILLS = ("rgba(86,180,233,0.16)", "rgba(230,159,0,0.14)")  # sky blue, orange (Okabe-Ito)


def stage_bands(plan: Plan, lay: DagLayout, top: float) -> tuple[list[dict], list[dict]]:
    """Shaded bands (and labels at ``top``) over the columns of each pipeline stage's ops;
    nothing for a plan without stages."""
    pi = plan.pipeline
    if pi is None:
        return [], []
    stage_of = {op.name: op.stage for op in plan.ops}
    columns: dict[int, list[float]] = {}
    for name in lay.nodes:
        if stage_of.get(name) is not None:
            columns.setdefault(stage_of[name], []).append(lay.pos[name][0])
    ys = [p[1] for p in lay.pos.values()] or [0.0]
    shapes, notes = [], []
    for st in pi.stages:
        xs = columns.get(st.index)
        if not xs:
            continue
        shapes.append(
            dict(
                type="rect",
                x0=min(xs) - 0.5,
                x1=max(xs) + 0.5,
                y0=min(ys) - 1.3,
                y1=top - 0.05,
                line=dict(width=0),
                fillcolor=STAGE_FILLS[st.index % 2],
                layer="below",
            )
        )
        notes.append(
            dict(
                x=min(xs) - 0.45,
                y=top - 0.1,
                xanchor="left",
                yanchor="top",
                text=f"<b>{stage_label(st)}</b>",
                showarrow=False,
                font=dict(size=12, color="#1f2937"),
            )
        )
    return shapes, notes


def op_rows(
    plan: Plan, graph: OpGraph, *, expand: bool = False, highlight: set[str] | None = None
) -> list[dict]:
    """Rows of the per-op table (one per shown op; folded ops carry their layer count)."""
    groups = layer_groups(plan, graph)
    ops = {op.name: op for op in plan.ops}
    names = [op.name for op in plan.ops] if expand else list(groups.members)
    rows = []
    for name in names:
        op = ops[name]
        copies = 1 if expand else len(groups.members[name])
        row = {
            "op": name,
            "kind": op.kind,
            "layer": "" if op.layer is None else str(op.layer),
            "× layers": copies,
            "strategy": op.strategy.label(),
            "in words": strategy_words(op.strategy),
            "sharding": sharding_class(op),
            "ZeRO": op.zero,
            "recompute": "yes" if op.recompute else "",
            "compute (ms)": op.compute_s * 1e3,
            "comm (ms)": op.comm_time_s * 1e3,
            "comm (MB)": op.comm_bytes / 1e6,
        }
        if plan.pipeline is not None:
            row["stage"] = "" if op.stage is None else str(op.stage)
        if highlight is not None:
            members = (name,) if expand else groups.members[name]
            row["differs"] = sum(m in highlight for m in members)
        rows.append(row)
    return rows
