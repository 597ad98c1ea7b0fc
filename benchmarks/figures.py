"""Figures for docs/RESULTS.md: plotly figures written as PNG by kaleido (system chromium).

If kaleido cannot render (no browser, no kaleido), each figure is written as standalone
HTML instead and the reason is recorded, so the report can say so and link the HTML.
"""

from __future__ import annotations

import contextlib
import math
import os
import warnings
from dataclasses import dataclass
from pathlib import Path

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from benchmarks.bandwidth_sweep import SweepResult
from benchmarks.plan_quality import Breakdown, QualityRow
from benchmarks.search_speed import SpeedRow

CHROMIUM = "/usr/lib/chromium/chromium"
LABELS = {
    "taps": "TAPS (topology-aware)",
    "volume": "volume-based",
    "megatron": "Megatron-style",
    "data_parallel": "data parallel",
}
COLOURS = {
    "taps": "#1f77b4",
    "volume": "#d62728",
    "megatron": "#2ca02c",
    "data_parallel": "#9467bd",
}
WIDTH, HEIGHT = 1000, 560


@dataclass
class FigureFile:
    name: str
    path: str  # relative to the report's directory
    format: str  # png | html
    error: str = ""


class FigureWriter:
    """Writes figures under ``out_dir/figures``; one kaleido browser for the whole run."""

    def __init__(self, out_dir: Path, *, images: bool = True) -> None:
        self.out_dir = out_dir
        self.fig_dir = out_dir / "figures"
        self.fig_dir.mkdir(parents=True, exist_ok=True)
        self.images = images
        self.error = "" if images else "PNG output switched off (--no-images)"
        self.server = False
        self.files: list[FigureFile] = []

    def __enter__(self) -> FigureWriter:
        if self.images:
            if "BROWSER_PATH" not in os.environ and Path(CHROMIUM).exists():
                os.environ["BROWSER_PATH"] = CHROMIUM
            try:
                import kaleido

                kaleido.start_sync_server()
                self.server = True
            except Exception as err:  # kaleido missing or too old: try per-figure rendering
                self.error = f"kaleido server did not start: {type(err).__name__}: {err}"
        return self

    def __exit__(self, *exc: object) -> None:
        if self.server:
            import kaleido

            with contextlib.suppress(Exception):
                kaleido.stop_sync_server()

    def save(self, fig: go.Figure, name: str) -> FigureFile:
        fig.update_layout(template="plotly_white", width=WIDTH, height=HEIGHT)
        error = self.error if not self.server else ""
        if self.images:
            png = self.fig_dir / f"{name}.png"
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    fig.write_image(png, width=WIDTH, height=HEIGHT, scale=1.5)
                out = FigureFile(name, f"figures/{png.name}", "png")
                self.files.append(out)
                return out
            except Exception as err:
                error = f"kaleido could not render: {type(err).__name__}: {err}"
        html = self.fig_dir / f"{name}.html"
        fig.write_html(html, include_plotlyjs="cdn")
        out = FigureFile(name, f"figures/{html.name}", "html", error)
        self.files.append(out)
        return out


# ---- plan quality ---------------------------------------------------------------------------


def reduction_heatmap(rows: list[QualityRow], modes: tuple[str, ...]) -> go.Figure:
    models = list(dict.fromkeys(r.model for r in rows))
    clusters = list(dict.fromkeys(r.cluster for r in rows))
    fig = make_subplots(
        rows=len(modes),
        cols=1,
        subplot_titles=[f"{m}ing" if m == "train" else "inference" for m in modes],
        vertical_spacing=0.12,
    )
    for i, mode in enumerate(modes, start=1):
        z, text = [], []
        for model in models:
            zr, tr = [], []
            for c in clusters:
                row = next(
                    (r for r in rows if (r.model, r.cluster, r.mode) == (model, c, mode)), None
                )
                red = row.reduction_vs.get("volume") if row else None
                if row is None or row.skipped:
                    zr.append(None)
                    tr.append("skipped")
                elif red is None:
                    zr.append(None)
                    tr.append("no fit")
                else:
                    zr.append(100 * red)
                    shown = f"{100 * red:.0f}%"
                    if not row.material:
                        shown = f"({shown})"
                    elif not row.realistic:
                        shown += "†"
                    tr.append(shown)
            z.append(zr)
            text.append(tr)
        fig.add_trace(
            go.Heatmap(
                z=z,
                x=clusters,
                y=models,
                text=text,
                texttemplate="%{text}",
                colorscale="RdYlGn",
                zmin=-100,
                zmax=100,
                zmid=0,
                colorbar={"title": "% less comm"},
                showscale=i == 1,
            ),
            row=i,
            col=1,
        )
    fig.update_layout(
        title="TAPS: communication time saved over the volume-based plan (topology-aware costs)"
        "<br><sup>(x%): communication immaterial for this scenario; x%†: TAPS leaves the nodes "
        "repeating one node's work</sup>"
    )
    return fig


def compare_time_scatter(rows: list[QualityRow]) -> go.Figure:
    fig = go.Figure()
    for model in dict.fromkeys(r.model for r in rows):
        sel = [r for r in rows if r.model == model and r.compare_s is not None]
        fig.add_trace(
            go.Scatter(
                x=[r.gpus for r in sel],
                y=[r.compare_s for r in sel],
                mode="markers",
                name=model,
                text=[r.key for r in sel],
            )
        )
    fig.update_xaxes(type="log", title="GPUs", tickvals=[8, 16, 32, 64, 128])
    fig.update_yaxes(type="log", title="compare() wall time (s): 4 searches")
    fig.update_layout(title="Planning time per scenario (TAPS + 3 baselines, memory limit)")
    return fig


def breakdown_ops(b: Breakdown, top: int = 10) -> go.Figure:
    """Communication time of the ops where TAPS saves most, both plans."""
    ops = [g for g in b.ops if g["volume_s"] or g["taps_s"]][:top][::-1]
    fig = go.Figure()
    for label in ("volume", "taps"):
        fig.add_trace(
            go.Bar(
                y=[g["op"] for g in ops],
                x=[1e3 * g[f"{label}_s"] for g in ops],
                orientation="h",
                name=LABELS[label],
                marker_color=COLOURS[label],
            )
        )
    fig.update_xaxes(title="communication time per step, summed over layers (ms)")
    fig.update_layout(barmode="group", title=f"Where the gain comes from: {b.scenario}")
    return fig


def breakdown_links(b: Breakdown) -> go.Figure:
    fig = make_subplots(
        rows=1, cols=2, subplot_titles=("bytes carried (GB)", "busiest link of the kind (ms)")
    )
    kinds = [k["kind"] for k in b.link_kinds]
    for label in ("volume", "taps"):
        fig.add_trace(
            go.Bar(
                x=kinds,
                y=[k[f"{label}_bytes"] / 1e9 for k in b.link_kinds],
                name=LABELS[label],
                marker_color=COLOURS[label],
            ),
            row=1,
            col=1,
        )
        fig.add_trace(
            go.Bar(
                x=kinds,
                y=[1e3 * k[f"{label}_busiest_s"] for k in b.link_kinds],
                name=LABELS[label],
                marker_color=COLOURS[label],
                showlegend=False,
            ),
            row=1,
            col=2,
        )
    fig.update_layout(barmode="group", title=f"Traffic per link kind: {b.scenario}")
    return fig


# ---- search speed ---------------------------------------------------------------------------


def _speed_lines(
    rows: list[SpeedRow], x_of: str, group_of: str, groups: list[int], title: str, x_title: str
) -> go.Figure:
    fig = go.Figure()
    palette = [
        "#1f77b4",
        "#ff7f0e",
        "#2ca02c",
        "#d62728",
        "#9467bd",
        "#8c564b",
        "#e377c2",
        "#7f7f7f",
    ]
    for i, g in enumerate(groups):
        sel = sorted((r for r in rows if getattr(r, group_of) == g), key=lambda r: getattr(r, x_of))
        colour = palette[i % len(palette)]
        name = f"{g} GPUs" if group_of == "gpus" else f"{g} layers"
        fig.add_trace(
            go.Scatter(
                x=[getattr(r, x_of) for r in sel],
                y=[r.dp_s for r in sel],
                mode="lines+markers",
                name=f"DP, {name}",
                line={"color": colour},
            )
        )
        done = [r for r in sel if r.ilp_finished]
        if done:
            fig.add_trace(
                go.Scatter(
                    x=[getattr(r, x_of) for r in done],
                    y=[r.ilp_s for r in done],
                    mode="lines+markers",
                    name=f"ILP, {name}",
                    line={"color": colour, "dash": "dot"},
                    marker={"symbol": "square"},
                )
            )
    fig.update_xaxes(type="log", title=x_title)
    fig.update_yaxes(type="log", title="solve time (s)")
    fig.update_layout(title=title)
    return fig


def speed_vs_layers(rows: list[SpeedRow]) -> go.Figure:
    gpus = sorted({r.gpus for r in rows})
    show = [g for g in gpus if g in (8, 16, 128, 1024)] or gpus
    fig = _speed_lines(
        rows,
        "layers",
        "gpus",
        show,
        "Search time vs layers: DP (solid) and ILP (dotted, where it finished)",
        "transformer layers",
    )
    fig.update_xaxes(tickvals=sorted({r.layers for r in rows}))
    return fig


def speed_vs_gpus(rows: list[SpeedRow]) -> go.Figure:
    layers = sorted({r.layers for r in rows})
    fig = _speed_lines(
        rows,
        "gpus",
        "layers",
        layers,
        "Search time vs GPUs: DP (solid) and ILP (dotted, where it finished)",
        "GPUs (dgx-a100 nodes x 8)",
    )
    fig.update_xaxes(tickvals=sorted({r.gpus for r in rows}))
    return fig


# ---- bandwidth sweep ------------------------------------------------------------------------


def sweep_lines(s: SweepResult) -> go.Figure:
    fig = go.Figure()
    xs = [p.nic_Bps / 1e9 for p in s.points]
    for label in LABELS:
        ys = [p.comm_s.get(label) for p in s.points]
        if all(y is None for y in ys):
            continue
        fig.add_trace(
            go.Scatter(
                x=xs, y=ys, mode="lines+markers", name=LABELS[label], line={"color": COLOURS[label]}
            )
        )
    for ch in (c for c in s.changes if not (c.tie or c.missed_s or c.rearranged)):
        mid = math.sqrt(ch.low_Bps * ch.high_Bps) / 1e9
        fig.add_vline(x=mid, line_dash="dot", line_color="grey")
    fig.add_vline(x=25, line_dash="dash", line_color="black")
    # annotations on a log axis take log10 coordinates (add_vline's own label gets this wrong)
    fig.add_annotation(
        x=math.log10(25),
        y=1,
        yref="paper",
        text="dgx-a100 (25 GB/s)",
        showarrow=False,
        xanchor="left",
        yanchor="bottom",
    )
    fig.update_xaxes(
        type="log",
        title="NIC bandwidth per direction (GB/s), 8 NICs per node",
        range=[math.log10(min(xs)) - 0.05, math.log10(max(xs)) + 0.05],
    )
    fig.update_yaxes(type="log", title="communication time per step (s)")
    fig.update_layout(
        title=f"{s.model}, {s.mode}, {s.nodes} nodes: comm time vs NIC bandwidth "
        "(dotted: TAPS's plan changes structure)"
    )
    return fig
