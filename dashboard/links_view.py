"""The Links page's figures and table, legible at 1 to 128 hosts: links that carry the same load
in one bar or row ("256 × GPU–NVSwitch, hosts 0–15"), and the traffic matrix GPU x GPU, or host
x host past :data:`GPU_HEATMAP_MAX` GPUs. Every number comes from the engine
(:mod:`taps_core.plan.traffic`, ``plan.links``); this module only groups and sums them."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dashboard.charts import OP_KIND_COLORS, style, time_unit
from dashboard.graph_view import _ranges, text_width_px
from dashboard.topology_common import DEVICE_NAME, KIND_NAMES
from taps_core.cluster.topology import Topology
from taps_core.plan.records import Plan
from taps_core.plan.traffic import LinkBreakdown

GPU_HEATMAP_MAX = 64  # past this many GPUs a GPU x GPU cell is under ~10 px: sum per host
MIN_SLOTS = 4  # bars are drawn at least this narrow: a quarter of the plot's width
SAME_LOAD = 1e-6  # loads within this share of the largest one are the same load
Device = tuple[int | None, str]  # a device's host (None: shared gear) and kind


def devices_of(topology: Topology) -> dict[str, Device]:
    """Every device's host and kind by name, what link groups are described with."""
    return {d.name: (d.host, d.kind) for d in topology.devices}


@dataclass(frozen=True)
class LinkGroup:
    """Directed links of one kind, bandwidth and device-kind pair that carry the same load:
    ``index`` their positions in the list grouped, ``names`` their ``src→dst``."""

    index: tuple[int, ...]
    names: tuple[str, ...]
    kind: str
    ends: str  # "GPU→NVSwitch", or "GPU–NVSwitch" when both directions are in the group
    hosts: tuple[int, ...]

    @property
    def count(self) -> int:
        return len(self.index)

    def where(self) -> str:
        """``hosts 0–15, 112–127`` (``64 hosts`` past two runs), or ``host 3``."""
        runs = _ranges(self.hosts)
        if not self.hosts:
            return "shared gear"
        if len(self.hosts) == 1:
            return f"host {runs}"
        return f"hosts {runs}" if runs.count(",") < 2 else f"{len(self.hosts)} hosts"

    def label(self) -> str:
        """A bar's name: the link itself when alone, else ``256 × GPU–NVSwitch, hosts 0–15``."""
        if self.count == 1:
            return self.names[0]
        return f"{self.count} × {self.ends}, {self.where()}"

    def hover(self) -> str:
        """The group in words with its first links (hover text, HTML)."""
        shown = ", ".join(self.names[:4]) + (" …" if self.count > 4 else "")
        return (
            f"<b>{self.count} {KIND_NAMES.get(self.kind, self.kind)} link(s) {self.ends}</b>, "
            f"{self.where()}<br>each carries this load: {shown}"
        )


def _ends(src: Device, dst: Device, both: bool) -> str:
    """``GPU→NVSwitch``, or ``GPU–NVSwitch`` (as the topology drawing names a link class)
    when ``both`` directions are grouped."""
    a, b = (DEVICE_NAME.get(k, k) for k in (src[1], dst[1]))
    return f"{a}–{b}" if both else f"{a}→{b}"


def group_same_load(
    links: Sequence[tuple[str, str, str, float]], loads: np.ndarray, devices: Mapping[str, Device]
) -> list[LinkGroup]:
    """Group directed links ``(src, dst, kind, bandwidth_Bps)`` whose load vectors
    ``loads[:, j]`` (e.g. bytes per op kind) agree within :data:`SAME_LOAD` of the largest
    load, of the same kind, bandwidth and device kinds at their ends (either direction);
    groups in the links' order of first appearance."""
    scale = float(np.abs(loads).max(initial=0.0)) or 1.0
    rounded = np.round(loads / scale / SAME_LOAD).astype(np.int64)
    members: dict[tuple, list[int]] = {}
    for j, (src, dst, kind, bw) in enumerate(links):
        ka, kb = devices.get(src, (None, "?"))[1], devices.get(dst, (None, "?"))[1]
        key = (kind, bw, tuple(sorted((ka, kb))), tuple(rounded[:, j]))
        members.setdefault(key, []).append(j)
    groups = []
    for idx in members.values():
        src, dst = links[idx[0]][:2]
        first = (devices.get(src, (None, "?")), devices.get(dst, (None, "?")))
        both = any(devices.get(links[j][0], (None, "?"))[1] != first[0][1] for j in idx)
        hosts = {devices.get(n, (None, ""))[0] for j in idx for n in links[j][:2]}
        groups.append(LinkGroup(
            index=tuple(idx), names=tuple(f"{links[j][0]}→{links[j][1]}" for j in idx),
            kind=links[idx[0]][2], ends=_ends(*first, both),
            hosts=tuple(sorted(h for h in hosts if h is not None)),
        ))  # fmt: skip
    return groups


# ---- busiest links: bars and table -------------------------------------------------------------


def _bar_rows(
    groups: list[LinkGroup], total: np.ndarray, top: int
) -> list[tuple[str, list[LinkGroup]]]:
    """The subplots' titles and their ``top`` busiest groups by ``total`` (per link):
    intra-node links, then inter-node links (only those that carry traffic)."""
    rows = []
    for title, network in (
        ("intra-node links (NVLink / PCIe)", False), ("inter-node links (network)", True)
    ):
        gs = [g for g in groups if (g.kind == "network") == network]
        rows.append((title, sorted(gs, key=lambda g: -total[g.index[0]])[:top]))
    return [(t, gs) for t, gs in rows if gs] or [("links", [])]


def _label_drop_px(names: Sequence[str]) -> float:
    """How far (px) the longest x label reaches below its axis when rotated by 45°."""
    return max((text_width_px(n, 12) for n in names), default=0.0) * math.sqrt(0.5)


def link_bars_figure(
    br: LinkBreakdown, devices: Mapping[str, Device], *, metric: str, top: int
) -> go.Figure:
    """Busiest loads stacked by op kind, one bar per group of links with the same load (its
    name says how many: ``256 × GPU–NVSwitch, hosts 0–15``; the bar is one link's load);
    intra-node links on top, inter-node links below, ``top`` bars each. The rows sit apart by
    the top row's rotated labels; the margins grow to hold the first (plotly's automargin)."""
    if metric == "bytes":
        values, unit = br.bytes / 1e9, "GB per step, each link"
    else:
        scale, per = time_unit(float(br.busy_s.sum(axis=0).max(initial=0.0)))
        values, unit = br.busy_s * scale, f"busy time per step, each link ({per})"
    total = values.sum(axis=0)
    rows = _bar_rows(group_same_load(br.links, br.bytes, devices), total, top)
    gap = _label_drop_px([g.label() for g in rows[0][1]]) + 50 if len(rows) > 1 else 0.0
    height = 300 * len(rows) + 150 + gap
    fig = make_subplots(rows=len(rows), cols=1, subplot_titles=[t for t, _ in rows],
                        vertical_spacing=gap / (height - 150) if gap else 0.1)
    shown: set[str] = set()
    for row, (_, gs) in enumerate(rows, start=1):
        names = [g.label() for g in gs]
        cols = [g.index[0] for g in gs]  # every link of a group carries the same load
        for k, kind in enumerate(br.op_kinds):
            if not values[k, cols].any():
                continue
            fig.add_bar(
                x=names, y=values[k, cols], name=kind, legendgroup=kind,
                showlegend=kind not in shown, customdata=[g.hover() for g in gs],
                marker_color=OP_KIND_COLORS[k % len(OP_KIND_COLORS)],
                hovertemplate="%{customdata}<br>" + kind + ": %{y:.3g}<extra></extra>",
                row=row, col=1,
            )  # fmt: skip
            shown.add(kind)
        fig.update_yaxes(title_text=unit, row=row, col=1)
        # a few bars keep the width of one in MIN_SLOTS (not one bar across the whole plot)
        fig.update_xaxes(tickangle=-45, tickfont=dict(size=12), automargin=True, row=row, col=1,
                         range=[-0.5, max(len(names), MIN_SLOTS) - 0.5])
    fig.update_layout(barmode="stack")
    fig.update_annotations(font_size=14)
    what = "Bytes" if metric == "bytes" else "Busy time"
    fig = style(
        fig,
        f"{what} per link, stacked by op kind; links with the same load in one bar "
        f"(top {top} per group)",
        height=int(height),
        legend_title="op kind",
    )
    # subplot titles sit where the legend usually goes: put it on the right instead
    fig.update_layout(legend=dict(orientation="v", x=1.01, y=1, yanchor="top"), margin=dict(r=140))
    return fig


def busiest_link_groups(
    plan: Plan, devices: Mapping[str, Device], top: int | None = None
) -> list[dict[str, object]]:
    """Table rows of the plan's links, links with the same bytes and busy time in one row
    (how many, which, where; GB/s, GB and ms of each link), busiest first; ``top`` rows."""
    links = [(k.src, k.dst, k.kind, k.bandwidth_Bps) for k in plan.links]
    loads = np.array([[k.bytes for k in plan.links], [k.busy_time_s for k in plan.links]])
    loads = loads / np.maximum(loads.max(axis=1, keepdims=True), 1e-30)  # bytes and s alike
    groups = group_same_load(links, loads, devices)
    groups.sort(key=lambda g: -plan.links[g.index[0]].busy_time_s)
    rows: list[dict[str, object]] = []
    for g in groups[:top]:
        k = plan.links[g.index[0]]
        rows.append({
            "links": g.count, "ends": g.ends, "where": g.where(),
            "first link": g.names[0], "kind": k.kind,
            "bandwidth (GB/s)": k.bandwidth_Bps / 1e9, "bytes (GB)": k.bytes / 1e9,
            "busy (ms)": k.busy_time_s * 1e3,
        })  # fmt: skip
    return rows


# ---- traffic matrix ---------------------------------------------------------------------------


def host_matrix(
    gpus: Sequence[str], matrix: np.ndarray, devices: Mapping[str, Device]
) -> tuple[list[int], np.ndarray]:
    """The hosts in order and the bytes each host's GPUs send to each host's GPUs,
    ``matrix`` (GPU x GPU, from :func:`taps_core.plan.traffic.gpu_traffic_matrix`) summed per
    host pair; the diagonal is what stays inside a host."""
    host_of = [devices[g][0] for g in gpus]
    hosts = sorted({h for h in host_of if h is not None})
    at = {h: i for i, h in enumerate(hosts)}
    idx = np.array([at[h] for h in host_of])
    out = np.zeros((len(hosts), len(hosts)))
    np.add.at(out, (idx[:, None], idx[None, :]), matrix)
    return hosts, out


def _log_colorbar(z_gb: np.ndarray) -> tuple[np.ndarray, dict]:
    """log10 of the non-zero GB (zero: empty cell) and a colour bar ticked at powers of ten
    in GB, so the bytes between hosts show beside the far larger ones inside a host."""
    with np.errstate(divide="ignore"):
        z = np.where(z_gb > 0, np.log10(np.where(z_gb > 0, z_gb, 1.0)), np.nan)
    lo = math.floor(np.nanmin(z)) if np.isfinite(z).any() else 0
    hi = math.ceil(np.nanmax(z)) if np.isfinite(z).any() else 1
    ticks = list(range(lo, hi + 1))
    bar = dict(
        title=dict(text="GB sent<br>(log scale)", font=dict(size=13)), tickfont=dict(size=12),
        tickvals=ticks, ticktext=[f"{10.0**t:g}" for t in ticks],
    )
    return z, bar


def traffic_heatmap_figure(
    gpus: tuple[str, ...], matrix: np.ndarray, devices: Mapping[str, Device]
) -> go.Figure:
    """Bytes sent per step, GPU x GPU (row sends to column; names up to 32 GPUs, then ranks),
    or past :data:`GPU_HEATMAP_MAX` GPUs host x host (:func:`host_matrix`) on a log colour
    scale with empty cells where nothing is sent."""
    n = len(gpus)
    if n <= GPU_HEATMAP_MAX:
        return _gpu_heatmap(gpus, matrix)
    hosts, per_host = host_matrix(gpus, matrix, devices)
    z, bar = _log_colorbar(per_host / 1e9)
    fig = go.Figure(go.Heatmap(
        z=z, x=hosts, y=hosts, colorscale="Viridis", colorbar=bar, customdata=per_host / 1e9,
        hovertemplate="host %{y} → host %{x}<br>%{customdata:.3g} GB<extra></extra>",
    ))  # fmt: skip
    fig.update_yaxes(autorange="reversed", tickfont=dict(size=12))
    fig.update_xaxes(tickfont=dict(size=12))
    if len(hosts) <= 16:
        fig.update_xaxes(dtick=1)
        fig.update_yaxes(dtick=1)
    g = n // max(len(hosts), 1)
    return style(
        fig,
        "Host-to-host traffic per step: GPU-to-GPU bytes summed per host pair "
        "(the diagonal stays inside a host)",
        x=f"receiving host (its {g} GPUs summed)",
        y=f"sending host (its {g} GPUs summed)",
        height=min(900, max(760, 6 * len(hosts) + 220)),  # cells about square
    )


def _gpu_heatmap(gpus: tuple[str, ...], matrix: np.ndarray) -> go.Figure:
    """GPU x GPU bytes sent per step (row sends to column); ranks instead of names past 32."""
    n = len(gpus)
    names = n <= 32
    axis = list(gpus) if names else list(range(n))
    fig = go.Figure(
        go.Heatmap(
            z=matrix / 1e9,
            x=axis,
            y=axis,
            colorscale="Viridis",
            colorbar=dict(title=dict(text="GB sent", font=dict(size=13)), tickfont=dict(size=12)),
            hovertemplate="%{y} → %{x}<br>%{z:.3g} GB<extra></extra>",
        )
    )
    fig.update_yaxes(autorange="reversed", tickfont=dict(size=12))
    fig.update_xaxes(tickfont=dict(size=12), tickangle=-45 if names else 0)
    unit = "" if names else f" (global rank, {gpus[0]} = 0)"
    return style(
        fig,
        "GPU-to-GPU traffic per step",
        x="receiving GPU" + unit,
        y="sending GPU" + unit,
        height=min(900, max(420, 24 * n + 160)),
    )
