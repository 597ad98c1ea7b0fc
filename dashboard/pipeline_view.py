"""Pipelined plans drawn: the 1F1B schedule as a timeline (Gantt), stage labels, and the ops of
each stage named after the layers it holds. Pure: engine results in, records and figures out.

The engine reports one figure per stage and micro-batch (:class:`~taps_core.plan.records.StageInfo`:
``microbatch_s`` = forward + backward including the stage's point-to-point sends, ``send_s``
the sends, ``sync_s`` the gradient sync once per step). The timeline replays those figures
under the 1F1B order (Narayanan et al. 2021: stage ``i`` runs ``p - i - 1`` warm-up forwards,
then alternates one forward and one backward, then drains its backwards), with two splits the
engine does not report: forward : backward = 1 : 2 of the stage's time without sends (training
costs backward at twice the forward), and a middle stage's sends halved between the forward
send (to the next stage) and the backward send (to the previous one).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import plotly.graph_objects as go

from dashboard.charts import style
from taps_core.ir.graph import OpGraph
from taps_core.plan.records import PipelineInfo, Plan, StageInfo
from taps_core.plan.report import fmt_seconds
from taps_core.studies.explain import layer_relative_names

FORWARD_SHARE = 1 / 3  # forward : backward = 1 : 2 of a stage's time without sends
EDGE_MICROBATCHES = 8  # micro-batches drawn at each end of a long schedule (steady state cut)
KINDS = {  # block kind -> (legend name, colour): Okabe-Ito, distinct in greyscale too
    "forward": ("forward (compute + in-stage comm.)", "#56B4E9"),
    "backward": ("backward (compute + in-stage comm.)", "#0072B2"),
    "send": ("send to the next / previous stage", "#E69F00"),
    "sync": ("gradient sync (once per step)", "#CC79A7"),
    "idle": ("bubble (stage idle)", "#e5e7eb"),
}


@dataclass(frozen=True)
class Block:
    """One interval of a stage's timeline (seconds from the step's start)."""

    stage: int
    kind: str  # forward | backward | send | sync | idle
    microbatch: int | None  # 0-based; None for sync and idle
    start: float
    end: float


@dataclass(frozen=True)
class Schedule:
    """The replayed 1F1B step: every block, and when the last stage work (sync included) ends."""

    blocks: tuple[Block, ...]
    end_s: float
    stages: int
    microbatches: int


def stage_label(st: StageInfo) -> str:
    """``stage 0 · layers 0–3 · host 0`` (hosts as a range when several)."""
    hosts = st.hosts
    where = (
        f"host {hosts[0]}"
        if len(hosts) == 1
        else f"hosts {hosts[0]}–{hosts[-1]}"
        if hosts
        else "no host"
    )
    layers = f" · layers {st.layers[0]}–{st.layers[1]}" if st.layers is not None else ""
    return f"stage {st.index}{layers} · {where}"


def _durations(pi: PipelineInfo) -> list[tuple[float, float, float, float]]:
    """Per stage: forward, backward, forward send, backward send (seconds per micro-batch)."""
    p = len(pi.stages)
    out = []
    for i, st in enumerate(pi.stages):
        work = max(st.microbatch_s - st.send_s, 0.0)
        if p == 1:
            fs = bs = 0.0
        elif i == 0:
            fs, bs = st.send_s, 0.0  # the first stage only sends forward
        elif i == p - 1:
            fs, bs = 0.0, st.send_s  # the last stage only sends gradients back
        else:
            fs = bs = st.send_s / 2
        out.append((work * FORWARD_SHARE, work * (1 - FORWARD_SHARE), fs, bs))
    return out


def schedule_1f1b(pi: PipelineInfo) -> Schedule:
    """Replay one step of ``pi`` under 1F1B (see the module docstring), idle gaps included.

    A forward of micro-batch j on stage i starts when stage i is free and stage i-1's forward
    of j and its send are done; a backward when stage i+1's backward of j and its send are.
    """
    p, m = len(pi.stages), pi.microbatches
    dur = _durations(pi)
    orders: list[list[tuple[str, int]]] = []  # per stage: ("F"|"B", micro-batch) in 1F1B order
    for i in range(p):
        warm = min(p - i - 1, m)
        seq = [("F", j) for j in range(warm)]
        for j in range(m - warm):
            seq += [("F", warm + j), ("B", j)]
        seq += [("B", j) for j in range(m - warm, m)]
        orders.append(seq)
    done: dict[tuple[str, int, int], float] = {}  # (F|B, stage, mb) -> when its send is done
    free = [0.0] * p
    nxt = [0] * p
    blocks: list[Block] = []
    remaining = p * 2 * m
    while remaining:
        progressed = False
        for i in range(p):
            while nxt[i] < len(orders[i]):
                kind, j = orders[i][nxt[i]]
                dep = (
                    ("F", i - 1, j)
                    if kind == "F" and i > 0
                    else ("B", i + 1, j)
                    if kind == "B" and i < p - 1
                    else None
                )
                if dep is not None and dep not in done:
                    break
                start = max(free[i], done[dep] if dep is not None else 0.0)
                f, b, fs, bs = dur[i]
                work, send = (f, fs) if kind == "F" else (b, bs)
                name = "forward" if kind == "F" else "backward"
                blocks.append(Block(i, name, j, start, start + work))
                if send > 0:
                    blocks.append(Block(i, "send", j, start + work, start + work + send))
                free[i] = done[(kind, i, j)] = start + work + send
                nxt[i] += 1
                remaining -= 1
                progressed = True
        if not progressed:  # cannot happen for 1F1B orders; guard against an endless loop
            raise RuntimeError("1F1B replay made no progress")
    ends = []
    for i, st in enumerate(pi.stages):
        if st.sync_s > 0:
            blocks.append(Block(i, "sync", None, free[i], free[i] + st.sync_s))
        ends.append(free[i] + st.sync_s)
    end = max(ends, default=0.0)
    busy: dict[int, list[Block]] = {}
    for blk in blocks:
        busy.setdefault(blk.stage, []).append(blk)
    for i in range(p):  # idle = every gap of the stage's row up to the step's end
        t = 0.0
        for blk in sorted(busy.get(i, []), key=lambda b: b.start):
            if blk.start > t + 1e-15:
                blocks.append(Block(i, "idle", None, t, blk.start))
            t = max(t, blk.end)
        if end > t + 1e-15:
            blocks.append(Block(i, "idle", None, t, end))
    return Schedule(tuple(blocks), end, p, m)


@dataclass(frozen=True)
class Cut:
    """A window of the steady state left out of the drawing: real seconds ``lo``..``hi`` are
    drawn as a gap of ``gap`` seconds; micro-batches ``first``..``last`` (0-based) lie in it."""

    lo: float
    hi: float
    gap: float
    first: int
    last: int

    def x(self, t: float) -> float:
        """Drawn position of real time ``t`` (outside the window)."""
        return t if t <= self.lo else t - (self.hi - self.lo) + self.gap


def steady_state_cut(sched: Schedule, edge: int = EDGE_MICROBATCHES) -> Cut | None:
    """The window to leave out so only the first and last ``edge`` micro-batches are drawn
    (None when the schedule is short enough to draw whole)."""
    m = sched.microbatches
    if m <= 2 * edge + 1:
        return None
    work = [b for b in sched.blocks if b.microbatch is not None]
    lo = max(b.end for b in work if b.microbatch < edge)
    hi = min(b.start for b in work if b.microbatch >= m - edge)
    if hi - lo <= 0:
        return None
    shown = lo + (sched.end_s - hi)
    return Cut(lo, hi, 0.05 * shown, edge, m - edge - 1)


def drawn_blocks(sched: Schedule, cut: Cut | None) -> list[Block]:
    """Blocks in drawn coordinates: those inside the cut dropped, those crossing it clipped."""
    if cut is None:
        return list(sched.blocks)
    out = []
    for b in sched.blocks:
        if b.start < cut.lo:
            out.append(replace(b, end=min(b.end, cut.lo)))
        if b.end > cut.hi:
            start = max(b.start, cut.hi)
            out.append(replace(b, start=cut.x(start), end=cut.x(b.end)))
    return out


def _nice_step(span: float, target: int = 8) -> float:
    raw = span / max(target, 1)
    if raw <= 0:
        return 1.0
    mag = 10 ** math.floor(math.log10(raw))
    return next(k * mag for k in (1, 2, 5, 10) if k * mag >= raw)


def _ticks(sched: Schedule, cut: Cut | None, scale: float) -> tuple[list[float], list[str]]:
    """Tick positions (drawn, in display units) labelled with real times, both sides of a cut."""
    drawn = cut.x(sched.end_s) if cut else sched.end_s  # ticks as dense as the drawing
    step = _nice_step(drawn * scale)
    vals, text = [], []
    t = 0.0
    while t <= sched.end_s * scale * 1.0001:
        real = t / scale
        if cut is None or real <= cut.lo or real >= cut.hi:
            x = (cut.x(real) if cut else real) * scale
            # a tick hugging the cut's edges would read as one number with its neighbour
            # across the gap ("3 33"): leave it out, the gap's own label names the cut
            edges = (cut.lo * scale, cut.x(cut.hi) * scale) if cut else ()
            if all(abs(x - e) >= 0.4 * step for e in edges) or x == 0:
                vals.append(x)
                text.append(f"{t:.4g}")
        t = round(t + step, 12)
    return vals, text


TWO_LINE_STAGES = 20  # up to this many stages, a row's label takes two lines (narrow margin)


def stage_tick(st: StageInfo, stages: int) -> str:
    """A row's axis label: one line for a few stages, ``stage 3<br>layers 18–23 · hosts 24–31``
    from 5 stages (half the width, so the timeline keeps the figure), ``stage 3`` past
    :data:`TWO_LINE_STAGES` (rows too thin for two lines; the hover has the rest)."""
    label = stage_label(st)
    if stages <= 4:
        return label
    head, _, rest = label.partition(" · ")
    return f"{head}<br>{rest}" if stages <= TWO_LINE_STAGES and rest else head


def edge_for(stages: int) -> int:
    """Micro-batches drawn at each end of a cut schedule: fewer when stages are many (the
    fill alone then spans ``stages`` micro-batches), so the figure stays a few hundred KB at
    most."""
    return EDGE_MICROBATCHES if stages <= 8 else max(2, 64 // stages)


def _rounder(sched: Schedule, pi: PipelineInfo, scale: float) -> Callable[[float], float]:
    """Seconds -> display units (ms or s) rounded to 4-5 significant digits of the step, so
    the figure's payload stays small."""
    span = max(sched.end_s, pi.step_time_s) * scale
    digits = max(0, 4 - math.floor(math.log10(span))) if span > 0 else 6

    def num(t: float) -> float:
        return round(t * scale, digits)

    return num


def _idle_bars(
    fig: go.Figure, sched: Schedule, cut: Cut | None, rows: int, num: Callable[[float], float]
) -> None:
    """The bubble: each of ``rows`` rows hatched underneath (both sides of a cut), so whatever
    the blocks leave uncovered reads as idle; the hover gives each stage's idle seconds."""
    idle = [0.0] * rows
    for b in sched.blocks:
        if b.kind == "idle":
            idle[b.stage] += b.end - b.start
    pieces = [(0.0, cut.lo), (cut.x(cut.hi), cut.x(sched.end_s))] if cut else [(0.0, sched.end_s)]
    name, color = KINDS["idle"]
    fig.add_bar(
        y=[i for i in range(rows) for _ in pieces],
        x=[num(b - a) for _ in range(rows) for a, b in pieces],
        base=[num(a) for _ in range(rows) for a, _ in pieces],
        orientation="h",
        name=name,
        marker=dict(
            color=color,
            line=dict(color="#9ca3af", width=0.5),
            pattern=dict(shape="/", fgcolor="#9ca3af", size=6),
        ),
        hovertext=[f"idle {fmt_seconds(t)} of the step" for t in idle for _ in pieces],
        hovertemplate="stage %{y}: %{hovertext}<extra></extra>",
        width=0.62,
        legendrank=2000,  # drawn first (underneath), listed after the work
    )


def _work_bars(
    fig: go.Figure, blocks: list[Block], num: Callable[[float], float], unit: str
) -> None:
    """One bar trace per block kind (forward, backward, send, sync) in drawn coordinates;
    forwards and backwards numbered with their micro-batch (1-based)."""
    what = {
        "forward": "forward of micro-batch %{text}",
        "backward": "backward of micro-batch %{text}",
        "send": "send to the next / previous stage",
        "sync": "gradient sync",
    }
    for kind, (name, color) in KINDS.items():
        mine = [b for b in blocks if b.kind == kind and b.end > b.start]
        if kind == "idle" or not mine:
            continue
        numbered = kind in ("forward", "backward")
        fig.add_bar(
            y=[b.stage for b in mine],  # numbers, labelled by the axis: a small payload
            x=[num(b.end - b.start) for b in mine],
            base=[num(b.start) for b in mine],
            orientation="h",
            name=name,
            marker=dict(color=color, line=dict(color="white", width=0.5)),
            text=[str(b.microbatch + 1) for b in mine] if numbered else None,
            textposition="inside" if numbered else "none",
            insidetextanchor="middle",
            textfont=dict(size=12, color="white" if kind == "backward" else "#111827"),
            hovertemplate=f"stage %{{y}}: {what[kind]}, %{{x:.3g}} {unit}<extra></extra>",
            width=0.62,
        )


def _cut_marker(fig: go.Figure, cut: Cut, scale: float, rows: int) -> None:
    """The left-out steady state: a dotted column over every row and a label naming how many
    seconds it stands for (x in display units, ``scale`` per second)."""
    x0, x1 = cut.lo * scale, (cut.lo + cut.gap) * scale
    left_out = f"{fmt_seconds(cut.hi - cut.lo)} of steady state"
    fig.add_bar(  # the gap marker: one dotted column over every row
        y=list(range(rows)),
        x=[round(x1 - x0, 6)] * rows,
        base=[round(x0, 6)] * rows,
        orientation="h",
        name=f"not drawn: {left_out}",
        marker=dict(
            color="white",
            line=dict(color="#6b7280", width=1),
            pattern=dict(shape=".", fgcolor="#6b7280", size=5),
        ),
        hovertemplate=f"left out: {left_out} (most of micro-batches "
        f"{cut.first + 1}–{cut.last + 1})<extra></extra>",
        width=0.9,
    )
    fig.add_annotation(
        x=(x0 + x1) / 2,
        y=-0.5,
        yref="y",
        yanchor="bottom",
        showarrow=False,
        text=f"⋯ {left_out} ⋯",
        font=dict(size=12, color="#374151"),
        bgcolor="white",
    )


def _step_marker(fig: go.Figure, pi: PipelineInfo, cut: Cut | None, scale: float) -> None:
    """A dashed line at the engine's step time (drawn coordinates, display units), labelled."""
    step_x = (cut.x(pi.step_time_s) if cut else pi.step_time_s) * scale
    fig.add_vline(x=step_x, line=dict(color="#111827", dash="dash", width=1.5))
    fig.add_annotation(
        x=step_x,
        y=-0.5,
        yref="y",
        xanchor="right",
        xshift=-4,  # clear of the dashed line, which would read as a letter after the "s"
        yanchor="bottom",
        showarrow=False,
        text=f"step (engine) {fmt_seconds(pi.step_time_s)}",
        font=dict(size=12),
        bgcolor="rgba(255,255,255,0.85)",
    )


def _gantt_axes(
    fig: go.Figure, sched: Schedule, pi: PipelineInfo, cut: Cut | None, scale: float,
    rows: list[str],
) -> None:
    """Time ticks labelled with real times (both sides of a cut), stages top to bottom."""
    vals, text = _ticks(sched, cut, scale)
    right = max(sched.end_s, pi.step_time_s)
    fig.update_xaxes(
        tickvals=vals,
        ticktext=text,
        range=[0, (cut.x(right) if cut else right) * scale * 1.01],
        showgrid=True,
    )
    fig.update_yaxes(
        autorange="reversed",
        tickvals=list(range(len(rows))),
        ticktext=rows,
        tickfont=dict(size=12),
        showgrid=False,
        automargin=True,
    )
    fig.update_layout(barmode="overlay", uniformtext=dict(minsize=12, mode="hide"))


def _gantt_style(
    fig: go.Figure, pi: PipelineInfo, cut: Cut | None, unit: str, rows: int
) -> go.Figure:
    """Title, axis title and a height that grows with the ``rows`` (stages); legend at the foot."""
    title = (
        f"1F1B pipeline schedule: {len(pi.stages)} stages × {pi.microbatches} micro-batches "
        f"of {pi.micro_batch_size} · bubble {100 * pi.bubble_fraction:.0f}% · "
        f"step {fmt_seconds(pi.step_time_s)}"
    )
    fig = style(
        fig,
        title,
        x=f"time in the step ({unit})" + (", steady state cut (dotted)" if cut else ""),
        height=230 + (60 if rows <= 8 else 50 if rows <= TWO_LINE_STAGES else 28) * rows,
        legend_below=True,
    )
    # the legend at the figure's foot, clear of the axis title whatever the height
    fig.update_layout(
        legend=dict(yref="container", y=0, yanchor="bottom"), margin=dict(l=10, b=120)
    )
    return fig


def gantt_figure(plan: Plan, *, edge: int | None = None) -> go.Figure:
    """The 1F1B timeline of a pipelined plan: one row per stage, forward and backward of each
    micro-batch (numbered), sends, the gradient sync, the bubble hatched; a long steady state
    is cut to the first and last ``edge`` micro-batches (default :func:`edge_for`) with a
    marked gap."""
    pi = plan.pipeline
    if pi is None:
        raise ValueError("plan: a pipelined plan (plan.pipeline is None)")
    sched = schedule_1f1b(pi)
    cut = steady_state_cut(sched, edge_for(len(pi.stages)) if edge is None else edge)
    ms = sched.end_s < 2.0
    scale, unit = (1e3, "ms") if ms else (1.0, "s")
    num = _rounder(sched, pi, scale)
    rows = [stage_tick(st, len(pi.stages)) for st in pi.stages]
    fig = go.Figure()
    blocks = drawn_blocks(sched, cut)
    _idle_bars(fig, sched, cut, len(rows), num)
    _work_bars(fig, blocks, num, unit)
    if cut is not None:
        _cut_marker(fig, cut, scale, len(rows))
    _step_marker(fig, pi, cut, scale)
    _gantt_axes(fig, sched, pi, cut, scale, rows)
    return _gantt_style(fig, pi, cut, unit, len(rows))


# ---- ops of each stage --------------------------------------------------------------------


def relabel_stages(plan: Plan, graph: OpGraph) -> Plan:
    """The plan with every pipeline stage's ops named after the layers the stage holds.

    The engine searches stages of equal shape (layer count, position) once and reuses that
    stage plan; its ops may then keep the names of the layers it was first searched on (two
    stages both naming ``L3.ln1``). The layers are identical, so are the choices and costs:
    only names and layer numbers move. A plan already named right, or one this cannot map
    onto ``graph``, is returned unchanged.
    """
    pi = plan.pipeline
    if pi is None or not plan.ops:
        return plan
    graph_names = [op.name for op in graph.ops]
    if [op.name for op in plan.ops] == graph_names:
        return plan
    relative = layer_relative_names(graph.ops)
    by_key = {(op.layer, relative[op.name]): op.name for op in graph.ops if op.layer is not None}
    out = []
    for st in pi.stages:
        ops = [op for op in plan.ops if op.stage == st.index]
        layers = [op.layer for op in ops if op.layer is not None]
        shift = st.layers[0] - min(layers) if st.layers is not None and layers else 0
        rel = layer_relative_names(ops)
        for op in ops:
            if op.layer is None or shift == 0:
                out.append(op)
                continue
            name = by_key.get((op.layer + shift, rel[op.name]))
            if name is None:
                return plan
            out.append(replace(op, name=name, layer=op.layer + shift))
    index = {n: i for i, n in enumerate(graph_names)}
    if sorted(op.name for op in out) != sorted(graph_names):
        return plan
    return replace(plan, ops=tuple(sorted(out, key=lambda op: index[op.name])))
