"""The operator graph as a left-to-right DAG, with repeated layers folded into one block.

Two layers are *identical* when they have the same ops (names relative to the layer), output
shapes, strategies, ZeRO stages and recomputation; past two blocks the pipeline stage does not
count, so the 80 layers of a 16-stage Llama fold into one block and the stages become shaded
bands with their layer ranges. Collapsed, each distinct layer is drawn once, marked with its
layer range; edges from one copy of a layer to the next would loop back into the block and are
dropped. Positions come from networkx's topological generations (x) and the order inside a
generation (y).

Colour says how an op is split and which level carries it: the fill is the split inside a host,
the ring around it the split across hosts (grey = replicated there). The classes (batch,
sequence, tensor column / row / between them, 2-D, expert) are read from the plan's strategies,
never recomputed. The default view shows every column; labels are placed by a greedy pass over
estimated text boxes (font size x characters, in pixels of a ``width_px`` wide figure) so no
two overlap, shortened or left to the hover when there is no room.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

import networkx as nx
import plotly.graph_objects as go

from dashboard.charts import FONT, style
from dashboard.pipeline_view import stage_label
from taps_core.ir.graph import OpGraph
from taps_core.ir.strategies import DEFERRABLE_KINDS
from taps_core.plan.records import OpPlan, Plan, StageInfo
from taps_core.plan.report import (
    fmt_bytes,
    fmt_seconds,
    strategy_words,
)
from taps_core.studies.explain import layer_relative_names

MAX_VISIBLE_GENERATIONS = 28  # the expanded view opens on its first columns (pan for the rest)
DEFAULT_WIDTH_PX = 960  # the width labels are laid out for (a wide page beside the sidebar)
CHAR_EM = 0.6  # estimated character width / font size (Inter/Arial average, rounded up)

# split classes, one colour each (Okabe-Ito): blues for token splits, warm for tensor splits
BATCH = "batch (data parallel)"
SEQUENCE = "sequence"
COLUMN = "tensor: column"
ROW = "tensor: row (partial sums)"
BETWEEN = "tensor: heads/features"
TWO_D = "2-D (two kinds of split)"
EXPERT = "expert"
REPLICATED = "replicated"
SPLIT_COLORS: dict[str, str] = {
    REPLICATED: "#BBBBBB",
    BATCH: "#0072B2",
    SEQUENCE: "#56B4E9",
    COLUMN: "#E69F00",
    BETWEEN: "#F0E442",
    ROW: "#009E73",
    TWO_D: "#CC79A7",
    EXPERT: "#D55E00",
}
SPLIT_CLASSES = tuple(SPLIT_COLORS)
STAGE_FILLS = ("rgba(86,180,233,0.16)", "rgba(230,159,0,0.14)")  # sky blue, orange (Okabe-Ito)
FILL_PX, RING_PX = 16, 26  # marker sizes: the fill (inside a host) and the ring (across hosts)
ROW_PX = 58  # vertical pixels between two ops of one column


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


MAX_STAGE_BLOCKS = 2  # up to this many layer blocks, identical layers of different stages
# are drawn apart (each stage's band over its own block); past it they fold into one


def layer_groups(plan: Plan, graph: OpGraph) -> LayerGroups:
    """Group identical layers of a plan (see the module docstring).

    The pipeline stage counts only while that leaves at most :data:`MAX_STAGE_BLOCKS` distinct
    layers (2 stages: one block per stage, side by side); with more stages, identical layers
    fold across them so the whole graph fits.
    """
    relative = _relative_names(plan)
    sig: dict[int, list[tuple]] = {}
    for op in plan.ops:
        if op.layer is not None:
            shape = graph.tensors[graph.op_by_name[op.name].output].shape
            sig.setdefault(op.layer, []).append((relative[op.name], op.strategy.label(), shape,
                                                 op.zero, op.recompute, op.selective, op.stage))
    if len({tuple(ops) for ops in sig.values()}) > MAX_STAGE_BLOCKS:
        sig = {layer: [k[:-1] for k in ops] for layer, ops in sig.items()}
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
    expand: bool = False

    def members(self, name: str) -> tuple[str, ...]:
        """The plan ops a shown op stands for (itself when expanded)."""
        return (name,) if self.expand else self.groups.members[name]


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
    for x, gen in enumerate(nx.topological_generations(_after_layers(dag, plan, index))):
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
    return DagLayout(tuple(shown), pos, tuple(dag.edges), tuple(blocks), groups, expand)


def _after_layers(dag: nx.DiGraph, plan: Plan, index: dict[str, int]) -> nx.DiGraph:
    """``dag`` plus (undrawn) ordering edges from every shown layer op to each op outside the
    layers that follows it in the plan: folded, the last layer's ops are its representative's,
    so the tail (ln_f, lm_head, loss) would otherwise sit in the columns of a later block."""
    ordered = dag.copy()
    layered = [n for n in dag if plan.ops[index[n]].layer is not None]
    for name in dag:
        if plan.ops[index[name]].layer is None:
            ordered.add_edges_from((u, name) for u in layered if index[u] < index[name])
    return ordered


# ---- what colour an op gets --------------------------------------------------------------------


def level_class(op: OpPlan, level: str) -> str:
    """The split class of an op on one mesh level (``inter`` or ``intra``), from its strategy.

    Batch-like letters (batch, expert tokens) make a batch split, the sequence letter a sequence
    split, any other letter a tensor split: *column* for a weight op (matmul, embedding, conv)
    that does not contract it, *row* when it contracts it (partial sums), *heads/features* for
    the ops between them (norms, adds, activations, attention, loss). Two kinds at once are 2-D.
    """
    letters = {ch for ch, f in op.strategy.level(level) if f > 1}
    if not letters:
        return REPLICATED
    if "e" in letters:
        return EXPERT
    model = letters - {"b", "c", "s"}
    kinds = {"batch"} if letters & {"b", "c"} else set()
    kinds |= {"sequence"} if "s" in letters else set()
    kinds |= {"tensor"} if model else set()
    if len(kinds) > 1:
        return TWO_D
    if "batch" in kinds:
        return BATCH
    if "sequence" in kinds:
        return SEQUENCE
    if op.kind not in DEFERRABLE_KINDS:
        return BETWEEN
    inputs, output = op.einsum.split("->")
    contracted = set(inputs.replace(",", "")) - set(output)
    if model <= contracted:
        return ROW
    return COLUMN if not model & contracted else TWO_D


def host_counts(plan: Plan) -> dict[int | None, int]:
    """Hosts an op runs on, by pipeline stage (key None: the whole cluster, no stages)."""
    out: dict[int | None, int] = {None: plan.nodes}
    if plan.pipeline is not None:
        out.update({st.index: len(st.hosts) for st in plan.pipeline.stages})
    return out


def across_class(op: OpPlan, hosts: int) -> str | None:
    """The split class across the hosts an op runs on (None: it runs on one host)."""
    return None if hosts <= 1 else level_class(op, "inter")


def split_words(op: OpPlan, hosts: int) -> str:
    """The figure's colours in words: ``tensor: column inside, batch (data parallel) across``."""
    across = across_class(op, hosts)
    return f"{level_class(op, 'intra')} inside" + ("" if across is None else f", {across} across")


# ---- text boxes in pixels ----------------------------------------------------------------------


def text_width_px(text: str, size: float, *, bold: bool = False) -> float:
    """Estimated width of one line of text: characters x font size x :data:`CHAR_EM`."""
    return len(text) * size * (CHAR_EM + (0.04 if bold else 0.0)) + 4


Box = tuple[float, float, float, float]  # x0, y0, x1, y1 in pixels of the plot area


def _overlap(a: Box, b: Box) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


class _Boxes:
    """Boxes already taken, bucketed by x (a label only meets its neighbours)."""

    def __init__(self, bucket_px: float = 120.0) -> None:
        self.bucket = bucket_px
        self.cells: dict[int, list[Box]] = {}

    def _keys(self, b: Box) -> range:
        return range(int(b[0] // self.bucket), int(b[2] // self.bucket) + 1)

    def free(self, b: Box) -> bool:
        return not any(_overlap(b, o) for k in self._keys(b) for o in self.cells.get(k, ()))

    def add(self, b: Box) -> None:
        for k in self._keys(b):
            self.cells.setdefault(k, []).append(b)


@dataclass(frozen=True)
class _Frame:
    """Data coordinates to pixels of the plot area (y up)."""

    x0: float
    x1: float
    y0: float
    y1: float
    width_px: float
    height_px: float

    def px(self, x: float, y: float) -> tuple[float, float]:
        return (
            (x - self.x0) / (self.x1 - self.x0) * self.width_px,
            (y - self.y0) / (self.y1 - self.y0) * self.height_px,
        )

    def data_y(self, py: float) -> float:
        return self.y0 + py / self.height_px * (self.y1 - self.y0)

    def data_dx(self, dpx: float) -> float:
        return dpx / self.width_px * (self.x1 - self.x0)


def _short(name: str, chars: int) -> str:
    return name if len(name) <= chars else name[: max(chars - 1, 1)] + "…"


def _fit(options: Iterable[str], room_px: float, size: float, *, bold: bool = False) -> str:
    """The first (longest) text that fits ``room_px``; empty when none does."""
    for text in options:
        if text_width_px(text, size, bold=bold) <= room_px:
            return text
    return ""


def place_labels(
    names: list[str], pos: dict[str, tuple[float, float]], text: dict[str, str], frame: _Frame,
    taken: _Boxes, *, size: float = 12, marker_px: float = RING_PX, spill_px: float = 15,
) -> dict[str, tuple[float, float, str]]:
    """Greedy labels: each op's name above or below its marker, shortened to fit, or none.

    Returns ``{op: (x, y, text)}`` with (x, y) the label's centre in data coordinates; no two
    returned boxes overlap each other, a marker, or a box already in ``taken``, and none runs
    more than ``spill_px`` past the plot area (into the figure's margin, not off the figure).
    """
    half = marker_px / 2 + 1
    for n in names:  # every marker is an obstacle first
        x, y = frame.px(*pos[n])
        taken.add((x - half, y - half, x + half, y + half))
    out: dict[str, tuple[float, float, str]] = {}
    h = size * 1.3
    for n in sorted(names, key=lambda n: (pos[n][0], -pos[n][1])):
        x, y = frame.px(*pos[n])
        seen = -half <= x <= frame.width_px + half  # in the opening view (else: panned to)
        full = text[n]
        variants = [full] + [_short(full, k) for k in range(len(full) - 1, 3, -1)]
        for label in variants:
            w = text_width_px(label, size)
            spot = None
            for cy in (y + half + 2 + h / 2, y - half - 2 - h / 2):
                box = (x - w / 2, cy - h / 2, x + w / 2, cy + h / 2)
                inside = box[0] >= -spill_px and box[2] <= frame.width_px + spill_px
                if (inside or not seen) and taken.free(box):
                    spot = (cy, box)
                    break
            if spot is not None:
                taken.add(spot[1])
                out[n] = (pos[n][0], frame.data_y(spot[0]), label)
                break
    return out


# ---- the figure --------------------------------------------------------------------------------


def _ranges(values: Iterable[int]) -> str:
    """``0–11, 20–23`` for sorted runs of integers."""
    vs = sorted(set(values))
    runs: list[list[int]] = []
    for v in vs:
        if runs and v == runs[-1][1] + 1:
            runs[-1][1] = v
        else:
            runs.append([v, v])
    return ", ".join(f"{a}" if a == b else f"{a}–{b}" for a, b in runs)


def _hover(
    op: OpPlan, graph: OpGraph, members: tuple[OpPlan, ...], differs: int | None, baseline: str,
    hosts: int,
) -> str:
    spec = graph.op_by_name[op.name]
    ins = "<br>".join(f"&nbsp;&nbsp;{t} {list(graph.tensors[t].shape)}" for t in spec.inputs)
    out = graph.tensors[spec.output]
    copies = len(members)
    layers = [m.layer for m in members if m.layer is not None]
    stages = [m.stage for m in members if m.stage is not None]
    across = across_class(op, hosts)
    lines = [
        f"<b>{op.name}</b> ({op.kind})"
        + (f" ×{copies} identical layers ({_ranges(layers)})" if copies > 1 else ""),
        f"einsum {op.einsum}",
        f"inputs:<br>{ins}",
        f"output: {spec.output} {list(out.shape)}",
        f"strategy: {op.strategy.label()}",
        f"= {strategy_words(op.strategy)}",
        f"inside a host: {level_class(op, 'intra')}"
        + ("" if across is None else f"; across hosts: {across}"),
        f"ZeRO-{op.zero}"
        + (", layer" if op.recompute else ", attention core" if op.selective else "")
        + (" recomputed in backward" if op.recompute or op.selective else "")
        + (f", pipeline stage(s) {_ranges(stages)}" if stages else ""),
        f"compute {fmt_seconds(op.compute_s)}, comm {fmt_seconds(op.comm_time_s)} "
        f"({fmt_bytes(op.comm_bytes)})" + (" per layer" if copies > 1 else ""),
    ]
    if differs:
        lines.append(
            f"<b>differs from {baseline}</b>"
            + (f" in {differs} of {copies} layers" if copies > 1 else "")
        )
    return "<br>".join(lines)


LEGENDS = (  # one legend row per kind of mark: (plotly legend id, title)
    ("legend", "fill = split inside a host:"),
    ("legend2", "ring = split across hosts:"),
    ("legend3", "marks:"),
)


def _legend_key(fig: go.Figure, name: str, legend: str, marker: dict) -> None:
    fig.add_scatter(x=[None], y=[None], mode="markers", name=name, legend=legend, marker=marker)


def _dag_frame(lay: DagLayout, *, staged: bool, width_px: int, margin_lr: int) -> _Frame:
    """The plot area: columns in view (all folded, the first :data:`MAX_VISIBLE_GENERATIONS`
    expanded), rows of up to :data:`ROW_PX` pixels, room above for block and stage labels."""
    xs = [p[0] for p in lay.pos.values()] or [0.0]
    ys = [p[1] for p in lay.pos.values()] or [0.0]
    columns = int(max(xs)) + 1
    shown_cols = min(columns, MAX_VISIBLE_GENERATIONS) if lay.expand else columns
    row_px = max(26.0, min(ROW_PX, 640 / (max(ys) - min(ys) + 3)))
    bottom = min(ys) - 0.8 - 12 / row_px
    top = max(ys) + 0.8 + (22 + (26 if staged else 0) + 4) / row_px
    return _Frame(
        -0.7, shown_cols - 0.3, bottom, top, width_px - 2 * margin_lr, (top - bottom) * row_px
    )


def _dag_edges(fig: go.Figure, lay: DagLayout) -> None:
    """Every shown edge as one grey line trace (None-separated segments)."""
    ex: list[float | None] = []
    ey: list[float | None] = []
    for u, v in lay.edges:
        (x0, y0), (x1, y1) = lay.pos[u], lay.pos[v]
        ex += [x0, x1, None]
        ey += [y0, y1, None]
    fig.add_scatter(
        x=ex, y=ey, mode="lines", line=dict(color="#9ca3af", width=1.2), hoverinfo="skip",
        showlegend=False,
    )


def _layer_blocks(
    lay: DagLayout, ops: dict[str, OpPlan], frame: _Frame, taken: _Boxes
) -> tuple[list[dict], list[dict]]:
    """A dotted box per shown layer (shaded when it stands for identical copies) and its layer
    range above it, shortened to the box's width in pixels; the labels' boxes go in ``taken``."""
    shapes, notes = [], []
    for layer, copies, names in lay.blocks:
        bx = [lay.pos[n][0] for n in names]
        by = [lay.pos[n][1] for n in names]
        x0, x1 = min(bx) - 0.45, max(bx) + 0.45
        shapes.append(
            dict(
                type="rect", x0=x0, x1=x1, y0=min(by) - 0.8, y1=max(by) + 0.8,
                line=dict(color="#6b7280", dash="dot", width=1.5),
                fillcolor="rgba(107,114,128,0.07)" if copies > 1 else "rgba(0,0,0,0)",
                layer="below",
            )
        )
        layers = [ops[m].layer for m in lay.members(names[0])]
        span = _ranges(int(v) for v in layers if v is not None)
        options = (
            [f"layers {span} (×{copies} identical)", f"layers {span} ×{copies}", f"×{copies}"]
            if copies > 1
            else [f"layer {layer}", f"L{layer}"]
        )
        room = (x1 - x0) / (frame.x1 - frame.x0) * frame.width_px
        label = _fit(options, room, 13, bold=True)
        if label:
            cx = (x0 + x1) / 2
            px, py = frame.px(cx, max(by) + 0.8)
            w = text_width_px(label, 13, bold=True)
            taken.add((px - w / 2, py, px + w / 2, py + 20))
            notes.append(
                dict(
                    x=cx, y=max(by) + 0.8, yanchor="bottom", text=f"<b>{label}</b>",
                    showarrow=False, font=dict(size=13, color="#374151"),
                    hovertext=f"layers {span}: {copies} identical layer(s), drawn once",
                )
            )
    return shapes, notes


@dataclass(frozen=True)
class _OpClasses:
    """Per shown op: its split class inside a host, across hosts (None: one host), and how
    many of the plan ops it stands for are highlighted."""

    inside: dict[str, str]
    across: dict[str, str | None]
    diffs: dict[str, int]


def _op_markers(
    fig: go.Figure, plan: Plan, graph: OpGraph, lay: DagLayout, highlight: set[str],
    baseline: str, *, ring_px: float, fill_px: float,
) -> _OpClasses:
    """The op markers: a ring (split across hosts, only when some op spans hosts) under a fill
    (split inside a host), one trace each; sizes in pixels. Returns the classes drawn."""
    ops = {op.name: op for op in plan.ops}
    hosts = host_counts(plan)
    names = list(lay.nodes)
    members = {n: tuple(ops[m] for m in lay.members(n)) for n in names}
    inside = {n: level_class(ops[n], "intra") for n in names}
    across = {n: across_class(ops[n], hosts.get(ops[n].stage, plan.nodes)) for n in names}
    diffs = {n: sum(m.name in highlight for m in members[n]) for n in names}
    custom = [
        [
            lay.groups.relative.get(n, n) if not lay.expand else n,
            _ranges(m.layer for m in members[n] if m.layer is not None),
        ]
        for n in names
    ]
    hover = [
        _hover(ops[n], graph, members[n], diffs[n], baseline, hosts.get(ops[n].stage, plan.nodes))
        for n in names
    ]
    px_ = [lay.pos[n][0] for n in names]
    py_ = [lay.pos[n][1] for n in names]
    multi = any(a is not None for a in across.values())
    if multi:
        fig.add_scatter(
            x=px_, y=py_, mode="markers", showlegend=False, hoverinfo="skip",
            name="split across hosts (ring)",
            marker=dict(
                size=ring_px,
                color=[SPLIT_COLORS[across[n]] if across[n] else "white" for n in names],
                line=dict(width=0),
            ),
        )
    fig.add_scatter(
        x=px_, y=py_, mode="markers", showlegend=False, name="ops", customdata=custom,
        hovertext=hover, hoverinfo="text",
        marker=dict(
            size=fill_px, color=[SPLIT_COLORS[inside[n]] for n in names],
            line=dict(color="white" if multi else "#4b5563", width=2 if multi else 1),
        ),
    )
    return _OpClasses(inside, across, diffs)


def _op_labels(
    fig: go.Figure, lay: DagLayout, frame: _Frame, taken: _Boxes, *, marker_px: float,
    spill_px: float,
) -> None:
    """Op names (relative to their layer) where they fit, as one text trace; the hover always
    names the op. ``marker_px``: the obstacle each marker makes (pixels)."""
    names = list(lay.nodes)
    texts = {n: lay.groups.relative.get(n, n) for n in names}
    placed = place_labels(
        names, lay.pos, texts, frame, taken, marker_px=marker_px, spill_px=spill_px
    )
    if placed:
        fig.add_scatter(
            x=[v[0] for v in placed.values()], y=[v[1] for v in placed.values()],
            text=[v[2] for v in placed.values()], mode="text", textposition="middle center",
            textfont=dict(size=12, color="#374151"), hoverinfo="skip", showlegend=False,
        )


def _dag_legend(
    fig: go.Figure, lay: DagLayout, classes: _OpClasses, highlight: set[str], baseline: str,
    *, banded: bool,
) -> None:
    """Legend keys: one group per level (the classes drawn), then the drawing's other marks
    (red rings over highlighted ops, stage bands, folded layers)."""
    for klass in SPLIT_CLASSES:
        if klass in classes.inside.values():
            _legend_key(
                fig, klass, "legend",
                dict(size=14, color=SPLIT_COLORS[klass], line=dict(color="white", width=1)),
            )
    for klass in SPLIT_CLASSES:
        if klass in classes.across.values():
            _legend_key(
                fig, klass + (" (hosts repeat it)" if klass == REPLICATED else ""), "legend2",
                dict(size=16, symbol="circle-open", color=SPLIT_COLORS[klass],
                     line=dict(width=4)),
            )
    extra = []
    if highlight:  # rings drawn over the class markers
        ringed = [n for n in lay.nodes if classes.diffs[n]]
        fig.add_scatter(
            x=[lay.pos[n][0] for n in ringed] or [None],
            y=[lay.pos[n][1] for n in ringed] or [None],
            mode="markers", name=f"differs from {baseline}", hoverinfo="skip",
            legend="legend3",
            marker=dict(size=32, symbol="circle-open", color="#dc2626", line=dict(width=3)),
        )
    if banded:
        extra.append(("pipeline stages (shaded bands)",
                      dict(size=16, symbol="square", color=STAGE_FILLS[0], line=dict(width=0))))
    if any(copies > 1 for _, copies, _ in lay.blocks):
        extra.append(("identical layers (drawn once)",
                      dict(size=16, symbol="square", color="rgba(107,114,128,0.15)",
                           line=dict(color="#6b7280", width=1.5))))
    for name, marker in extra:
        _legend_key(fig, name, "legend3", marker)


def _dag_style(
    fig: go.Figure, frame: _Frame, *, expand: bool, title: str | None, margin_lr: int
) -> go.Figure:
    """Hidden axes over the frame, the title, and one legend row (28 px) per level used,
    stacked under the axis title; the height is the frame's plus those rows."""
    fig.update_xaxes(
        showgrid=False, zeroline=False, showticklabels=False, range=[frame.x0, frame.x1]
    )
    fig.update_yaxes(
        showgrid=False, zeroline=False, showticklabels=False, range=[frame.y0, frame.y1],
        fixedrange=True,
    )
    what = "all layers" if expand else "identical layers drawn once"
    used = [
        (key, text) for key, text in LEGENDS
        if any(getattr(t, "legend", None) == key or (key == "legend" and not t.legend)
               for t in fig.data if t.showlegend is not False and t.name)
    ]
    fig = style(
        fig,
        title or f"Operator graph: how each op is split ({what})",
        x="execution order, left to right (one column per dependency level)",
        height=int(frame.height_px) + 90 + 50 + 28 * len(used),
    )
    legends = {}
    for i, (key, text) in enumerate(used):  # stacked rows under the axis title
        legends[key] = dict(
            orientation="h", x=0, xanchor="left", yanchor="top",
            y=-(44 + 28 * i) / frame.height_px, font=dict(size=12),
            title=dict(text=text, side="left", font=dict(size=12)),
        )
    fig.update_layout(
        dragmode="pan", font=FONT,
        margin=dict(l=margin_lr, r=margin_lr, t=90, b=50 + 28 * len(used)), **legends,
    )
    return fig


def dag_figure(
    plan: Plan,
    graph: OpGraph,
    *,
    expand: bool = False,
    highlight: set[str] | None = None,
    baseline: str = "",
    title: str | None = None,
    layout: DagLayout | None = None,
    width_px: int = DEFAULT_WIDTH_PX,
) -> go.Figure:
    """Plotly DAG coloured by split class per level; ``highlight`` ops get a red ring.

    Folded (the default), every column is in view; expanded, the view opens on the first
    :data:`MAX_VISIBLE_GENERATIONS` columns. Each marker's ``customdata`` is ``[name relative
    to its layer, layer range or ""]``, so a reader (or a test) can tell which ops it stands for.
    """
    lay = layout or dag_layout(plan, graph, expand=expand)
    ops = {op.name: op for op in plan.ops}
    highlight = highlight or set()
    fig = go.Figure()
    margin_lr = 20
    frame = _dag_frame(lay, staged=plan.pipeline is not None, width_px=width_px,
                       margin_lr=margin_lr)
    taken = _Boxes()
    # markers no wider than a column, so a long graph (ResNet-50: 87 columns) keeps them apart
    column_px = frame.width_px / (frame.x1 - frame.x0)
    ring_px = min(RING_PX, max(8.0, 0.9 * column_px))
    fill_px = min(FILL_PX, max(5.0, 0.62 * ring_px))
    _dag_edges(fig, lay)
    # blocks of identical layers, then the stage bands above them
    shapes, notes = _layer_blocks(lay, ops, frame, taken)
    band_shapes, band_notes = stage_bands(plan, lay, frame.y1, frame=frame, taken=taken)
    fig.update_layout(shapes=band_shapes + shapes, annotations=notes + band_notes)
    classes = _op_markers(
        fig, plan, graph, lay, highlight, baseline, ring_px=ring_px, fill_px=fill_px
    )
    _op_labels(fig, lay, frame, taken, marker_px=max(ring_px, 32 if highlight else 0),
               spill_px=margin_lr - 5)
    _dag_legend(fig, lay, classes, highlight, baseline, banded=bool(band_shapes))
    return _dag_style(fig, frame, expand=lay.expand, title=title, margin_lr=margin_lr)


def _stage_runs(plan: Plan, lay: DagLayout) -> list[tuple[frozenset[int], float, float]]:
    """Runs of adjacent columns whose ops stand for the same set of pipeline stages:
    ``(stages, first column, last column)``."""
    ops = {op.name: op for op in plan.ops}
    per_column: dict[int, set[int]] = {}
    for name in lay.nodes:
        col = int(lay.pos[name][0])
        stages = {ops[m].stage for m in lay.members(name) if ops[m].stage is not None}
        per_column.setdefault(col, set()).update(stages)  # type: ignore[arg-type]
    runs: list[tuple[frozenset[int], float, float]] = []
    for col in sorted(per_column):
        key = frozenset(per_column[col])
        if not key:
            continue
        if runs and runs[-1][0] == key and runs[-1][2] == col - 1:
            runs[-1] = (key, runs[-1][1], col)
        else:
            runs.append((key, col, col))
    return runs


def _band_texts(stages: list[StageInfo]) -> list[str]:
    """Band labels, longest first: one stage's full label, or a range of stages."""
    if len(stages) == 1:
        st = stages[0]
        full = stage_label(st)
        return [full, full.rsplit(" · ", 1)[0], f"stage {st.index}", f"S{st.index}"]
    lo, hi = stages[0], stages[-1]
    name = f"stages {lo.index}–{hi.index}"
    per = {st.layers[1] - st.layers[0] + 1 for st in stages if st.layers is not None}
    host_n = {len(st.hosts) for st in stages}
    layers = [v for st in stages if st.layers is not None for v in st.layers]
    span = f"layers {min(layers)}–{max(layers)}" if layers else ""
    each = []
    if len(per) == 1:
        each.append(f"{per.pop()} layers each")
    if len(host_n) == 1:
        k = host_n.pop()
        each.append(f"{k} host{'s' if k > 1 else ''} each")
    out = [" · ".join([name, span, *each]), " · ".join([name, span]), name]
    return [t for t in out if t] + [f"S{lo.index}–{hi.index}"]


def stage_bands(
    plan: Plan, lay: DagLayout, top: float, *, frame: _Frame | None = None,
    taken: _Boxes | None = None,
) -> tuple[list[dict], list[dict]]:
    """Shaded bands (and labels at ``top``) over the columns of each run of pipeline stages
    (folded layers stand for several stages: their band names the range); nothing for a
    plan without stages. Labels are shortened to their band's width (the hover has the rest)."""
    pi = plan.pipeline
    if pi is None:
        return [], []
    by_index = {st.index: st for st in pi.stages}
    ys = [p[1] for p in lay.pos.values()] or [0.0]
    shapes, notes = [], []
    for i, (stages, c0, c1) in enumerate(_stage_runs(plan, lay)):
        sts = [by_index[s] for s in sorted(stages) if s in by_index]
        if not sts:
            continue
        x0, x1 = c0 - 0.5, c1 + 0.5
        shapes.append(
            dict(
                type="rect", x0=x0, x1=x1, y0=min(ys) - 1.3, y1=top - 0.02,
                line=dict(width=0), fillcolor=STAGE_FILLS[i % 2], layer="below",
            )
        )
        options = _band_texts(sts)
        label = options[0]
        hidden = frame is not None and x0 >= frame.x1  # opens out of view (expanded graphs)
        if frame is not None:
            lo, hi = (x0, x1) if hidden else (max(x0, frame.x0), min(x1, frame.x1))
            label = _fit(options, frame.data_dx(1) ** -1 * (hi - lo) - 8, 12, bold=True)
        if not label:
            continue
        lines = [stage_label(st) for st in sts[:12]] + (["…"] if len(sts) > 12 else [])
        x_text = max(x0, frame.x0 if frame else x0) + (frame.data_dx(4) if frame else 0.05)
        if frame is not None and taken is not None and not hidden:
            px, py = frame.px(x_text, top)
            taken.add((px, py - 20, px + text_width_px(label, 12, bold=True), py))
        notes.append(
            dict(
                x=x_text, y=top, xanchor="left", yanchor="top", text=f"<b>{label}</b>",
                showarrow=False, font=dict(size=12, color="#1f2937"),
                hovertext="<br>".join(lines),
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
    hosts = host_counts(plan)
    rows = []
    for name in names:
        op = ops[name]
        members = (name,) if expand else groups.members[name]
        row = {
            "op": name,
            "kind": op.kind,
            "layer": _ranges(ops[m].layer for m in members if ops[m].layer is not None),
            "× layers": len(members),
            "strategy": op.strategy.label(),
            "in words": strategy_words(op.strategy),
            "sharding": split_words(op, hosts.get(op.stage, plan.nodes)),
            "ZeRO": op.zero,
            "recompute": "full" if op.recompute else "selective" if op.selective else "",
            "compute (ms)": op.compute_s * 1e3,
            "comm (ms)": op.comm_time_s * 1e3,
            "comm (MB)": op.comm_bytes / 1e6,
        }
        if plan.pipeline is not None:
            row["stage"] = _ranges(ops[m].stage for m in members if ops[m].stage is not None)
        if highlight is not None:
            row["differs"] = sum(m in highlight for m in members)
        rows.append(row)
    return rows

