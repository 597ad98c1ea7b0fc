"""The cluster drawn as hosts (boxes) holding GPUs, their switch and NICs, under one network
switch; optionally with each link's width and colour set by a plan's traffic on it. Past a few
hosts the hosts are drawn in blocks of alike hosts and the links per block and class, labelled
with their count per host and bandwidth (:mod:`dashboard.topology_aggregated`)."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from dashboard.charts import LINK_COLORS
from dashboard.graph_view import DEFAULT_WIDTH_PX, _Boxes, text_width_px
from dashboard.topology_aggregated import aggregated_figure
from dashboard.topology_common import (
    DEVICE_COLOR,
    DEVICE_NAME,
    EDITED_COLOR,
    ROW,
    SHARED_Y,
    SYMBOL,
    TRAFFIC_SCALE,
    _bin_color,
    _line_key,
    _link_traffic,
    _pair,
    _selected_ring,
    _topology_style,
    class_legend,
    link_groups,
)
from taps_core.cluster.topology import Topology
from taps_core.plan.records import Plan

MAX_LABELS = 150
SWITCHES = ("nvswitch", "pcie_switch", "network_switch")
AGGREGATE_HOSTS = 8  # past this many hosts (or fewer, when labels would not fit), links are
# drawn per host and link class


def device_positions(topology: Topology) -> dict[str, tuple[float, float]]:
    """x, y of every device: hosts side by side, each a column block of its own width."""
    hosts = sorted({d.host for d in topology.devices if d.host is not None})
    per_host: dict[int, dict[str, list[str]]] = {h: {} for h in hosts}
    shared: list[str] = []
    for d in topology.devices:
        if d.host is None:
            shared.append(d.name)
        else:
            per_host[d.host].setdefault(d.kind, []).append(d.name)
    width = max((len(v) for rows in per_host.values() for v in rows.values()), default=1)
    gap = 1.5
    pos: dict[str, tuple[float, float]] = {}
    for i, h in enumerate(hosts):
        left = i * (width + gap)
        for kind, names in per_host[h].items():
            step = width / len(names)
            for j, name in enumerate(names):
                pos[name] = (left + (j + 0.5) * step - 0.5, ROW.get(kind, 2.0))
    total = max(len(hosts) * (width + gap) - gap, 1.0)
    for j, name in enumerate(shared):
        pos[name] = ((j + 0.5) * total / len(shared) - 0.5, SHARED_Y)
    return pos


def _host_boxes(fig: go.Figure, topology: Topology, pos: dict[str, tuple[float, float]]) -> None:
    """One box and label per host (set in one go: add_shape one by one is quadratic)."""
    by_host: dict[int, list[float]] = {}
    for d in topology.devices:
        if d.host is not None:
            by_host.setdefault(d.host, []).append(pos[d.name][0])
    shapes, labels = [], []
    for h, xs in sorted(by_host.items()):
        shapes.append(
            dict(
                type="rect",
                x0=min(xs) - 0.6,
                x1=max(xs) + 0.6,
                y0=-0.55,
                y1=2.55,
                line=dict(color="#6b7280", width=1.5),
                fillcolor="rgba(243,244,246,0.6)",
                layer="below",
            )
        )
        labels.append(
            dict(
                x=(min(xs) + max(xs)) / 2,
                y=-0.6,
                yanchor="top",
                text=f"<b>host {h}</b>",
                showarrow=False,
                font=dict(size=13 if len(by_host) <= 16 else 12),
            )
        )
    fig.update_layout(shapes=shapes, annotations=labels)


def labels_fit(topology: Topology, width_px: int = DEFAULT_WIDTH_PX) -> bool:
    """Whether one bandwidth label per link fits side by side: the fullest row of devices (the
    most of one kind in a host, times the hosts) at ~40 px a label ("300" and its square), and
    at most :data:`AGGREGATE_HOSTS` hosts."""
    per_host: dict[tuple[int, str], int] = {}
    for d in topology.devices:
        if d.host is not None:
            per_host[(d.host, d.kind)] = per_host.get((d.host, d.kind), 0) + 1
    widest = max(per_host.values(), default=1)
    return topology.nodes <= AGGREGATE_HOSTS and widest * topology.nodes * 40 <= width_px - 100


def topology_figure(
    topology: Topology,
    plan: Plan | None = None,
    *,
    title: str | None = None,
    edited: set[frozenset[str]] | frozenset = frozenset(),
    cut: tuple[tuple[str, str], ...] = (),
    selected: tuple[str, ...] | None = None,
    aggregate: bool | None = None,
) -> go.Figure:
    """Draw ``topology`` with every link's bandwidth labelled at its midpoint.

    The midpoints and devices carry ``customdata`` (``["link", src, dst]``, ``["device",
    name]``, ``["cut", src, dst]``) so a click selects them. ``edited`` links are drawn thick
    in vermillion, ``cut`` links dotted; ``selected`` (one of those customdata) gets a ring.
    With ``plan``, links get width and colour by their busy time.

    ``aggregate`` (default: when one label per link would not fit, :func:`labels_fit`) draws
    hosts in blocks and one line per block and link class instead of every link (see
    :func:`aggregated_figure`).
    """
    if aggregate or (aggregate is None and not labels_fit(topology)):
        return aggregated_figure(
            topology, plan, title=title, edited=edited, cut=cut, selected=selected
        )
    pos = device_positions(topology)
    fig = go.Figure()
    _host_boxes(fig, topology, pos)
    traffic = _link_traffic(plan)
    busiest = max((v[1] for v in traffic.values()), default=0.0)
    segs, mids = _link_segments(topology, pos, traffic, busiest, edited, planned=plan is not None)
    _link_lines(fig, segs, planned=plan is not None)
    if cut:
        _cut_lines(fig, cut, pos)
    coloured = plan is not None and busiest > 0
    _drop_crowded_labels(mids, pos, topology, right_px=130 if coloured else 30)
    _midpoints(fig, mids, coloured=coloured, busiest=busiest)
    if cut:
        _cut_markers(fig, cut, pos)
    _device_markers(fig, topology, pos)
    if selected:
        spot = {tuple(m["data"][1:]): (m["x"], m["y"]) for m in mids}
        at = spot.get(tuple(selected[1:])) if selected[0] == "link" else None
        at = at or _selected_xy(selected, pos)
        if at is not None:
            _selected_ring(fig, at)
    usual = link_groups(topology)[1]
    class_legend(fig, usual, coloured=plan is not None)
    xs = [p[0] for p in pos.values()]
    default = f"{topology.name}: {topology.nodes} host(s) × {topology.gpus_per_node} GPU(s)" + (
        ", links by plan traffic" if plan is not None else ", link bandwidths in GB/s"
    )
    extra = 22 * (len(usual) + 2)  # legend rows under the plot; the plot keeps its 330 px
    return _topology_style(  # margins: the frame the labels were laid out in
        fig, title or default, x=(min(xs) - 1, max(xs) + 1), y=(-1.2, SHARED_Y + 0.8),
        height=480 + extra, margin=dict(r=130 if coloured else 30, b=60 + extra),
    )


def _link_segments(
    topology: Topology, pos: dict[str, tuple[float, float]], traffic: dict[frozenset[str], list],
    busiest: float, edited: set[frozenset[str]] | frozenset, *, planned: bool,
) -> tuple[dict[object, tuple[list, list]], list[dict]]:
    """Every link as a segment of its line trace (:func:`_line_key`), and its midpoint record
    (position, busy seconds, hover, GB/s label, click data), set near a switch's far end."""
    kinds = {d.name: d.kind for d in topology.devices}
    segs: dict[object, tuple[list, list]] = {}
    mids: list[dict] = []
    for link in topology.links:
        (x0, y0), (x1, y1) = pos[link.src], pos[link.dst]
        t = traffic.get(_pair(link.src, link.dst))
        is_edited = _pair(link.src, link.dst) in edited
        key = _line_key(is_edited, link.kind, t[1] if t is not None else None, busiest,
                        planned=planned)
        xs, ys = segs.setdefault(key, ([], []))
        xs += [x0, x1, None]
        ys += [y0, y1, None]
        info = (
            f"<b>{link.src} – {link.dst}</b> ({link.kind})<br>"
            f"{link.bandwidth_Bps / 1e9:.3g} GB/s per direction, "
            f"latency {link.latency_s * 1e6:.3g} µs<br><i>click to select</i>"
        )
        if t is not None:
            info += "<br>" + "<br>".join(t[2])
        # the label sits near the spread-out end: links fan into a switch, midpoints crowd
        t_ = 0.5
        if kinds.get(link.dst) in SWITCHES and kinds.get(link.src) not in SWITCHES:
            t_ = 0.22
        elif kinds.get(link.src) in SWITCHES and kinds.get(link.dst) not in SWITCHES:
            t_ = 0.78
        mids.append(
            dict(
                x=x0 + t_ * (x1 - x0),
                y=y0 + t_ * (y1 - y0),
                busy=t[1] if t else 0.0,
                info=info,
                label=f"{link.bandwidth_Bps / 1e9:.3g}",
                kind=link.kind,
                edited=is_edited,
                data=["link", link.src, link.dst],
            )
        )
    return segs, mids


def _link_lines(fig: go.Figure, segs: dict[object, tuple[list, list]], *, planned: bool) -> None:
    """One line trace per key: edited, link kind (named in the class legend instead), idle
    (dotted), or a traffic bin (wider and redder the busier)."""
    for key, (xs, ys) in segs.items():
        if key == "edited":
            line = dict(color=EDITED_COLOR, width=5)
            name, legend = "edited link", True
        elif not planned:  # named per class with its value below (class_legend)
            line = dict(color=LINK_COLORS.get(str(key), "#555"), width=2.5)
            name, legend = f"{key} link", False
        elif key == "idle":
            line = dict(color="#d1d5db", width=1.2, dash="dot")
            name, legend = "idle link", True
        else:
            frac, color = _bin_color(key)
            line = dict(color=color, width=1.5 + 8 * frac)
            name, legend = "busy link", False
        fig.add_scatter(
            x=xs, y=ys, mode="lines", name=name, line=line, hoverinfo="skip", showlegend=legend
        )


def _cut_lines(
    fig: go.Figure, cut: tuple[tuple[str, str], ...], pos: dict[str, tuple[float, float]]
) -> None:
    """The cut links (gone from the topology) as dotted vermillion lines between their ends."""
    xs: list[float | None] = []
    ys: list[float | None] = []
    for a, b in cut:
        if a in pos and b in pos:
            xs += [pos[a][0], pos[b][0], None]
            ys += [pos[a][1], pos[b][1], None]
    fig.add_scatter(
        x=xs,
        y=ys,
        mode="lines",
        name="cut link",
        line=dict(color=EDITED_COLOR, width=2, dash="dot"),
        hoverinfo="skip",
    )


def _cut_markers(
    fig: go.Figure, cut: tuple[tuple[str, str], ...], pos: dict[str, tuple[float, float]]
) -> None:
    """A clickable ``x`` labelled "cut" at each cut link's midpoint (``["cut", src, dst]``)."""
    ok = [(a, b) for a, b in cut if a in pos and b in pos]
    fig.add_scatter(
        x=[(pos[a][0] + pos[b][0]) / 2 for a, b in ok],
        y=[(pos[a][1] + pos[b][1]) / 2 for a, b in ok],
        mode="markers+text",
        text=["cut"] * len(ok),
        textposition="middle right",
        textfont=dict(size=12, color=EDITED_COLOR),
        marker=dict(size=12, symbol="x", color=EDITED_COLOR),
        customdata=[["cut", a, b] for a, b in ok],
        hovertext=[
            f"<b>{a} – {b}</b> cut<br><i>click to select, then restore</i>" for a, b in ok
        ],
        hoverinfo="text",
        showlegend=False,
    )


def _device_markers(
    fig: go.Figure, topology: Topology, pos: dict[str, tuple[float, float]]
) -> None:
    """One clickable marker trace per device kind (``["device", name]``), in legend order."""
    kinds: dict[str, list[str]] = {}
    for d in topology.devices:
        kinds.setdefault(d.kind, []).append(d.name)
    for kind, names in kinds.items():
        fig.add_scatter(
            x=[pos[n][0] for n in names],
            y=[pos[n][1] for n in names],
            mode="markers",
            name=DEVICE_NAME.get(kind, kind),
            marker=dict(
                size=15 if kind != "network_switch" else 22,
                symbol=SYMBOL.get(kind),
                color=DEVICE_COLOR.get(kind, "#555"),
                line=dict(color="white", width=1),
            ),
            customdata=[["device", n] for n in names],
            hovertext=[f"{n}<br><i>click to select</i>" for n in names],
            hoverinfo="text",
        )


def _drop_crowded_labels(
    mids: list[dict], pos: dict[str, tuple[float, float]], topology: Topology, *,
    right_px: float, width_px: int = DEFAULT_WIDTH_PX,
) -> None:
    """Blank the bandwidth labels that would overlap another label, a device or a host name
    (in pixels of a ``width_px`` wide figure; the hover still gives every value). Edited and
    network links are placed first, then the rest from left to right."""
    xs = [p[0] for p in pos.values()]
    x0, x1 = min(xs) - 1, max(xs) + 1
    y0, y1 = -1.2, SHARED_Y + 0.8
    w_px, h_px = width_px - 70 - right_px, 480 - 90 - 60

    def px(x: float, y: float) -> tuple[float, float]:
        return (x - x0) / (x1 - x0) * w_px, (y - y0) / (y1 - y0) * h_px

    taken = _Boxes()
    kinds = {d.name: d.kind for d in topology.devices}
    for name, (x, y) in pos.items():
        r = 11 if kinds.get(name) == "network_switch" else 8
        cx, cy = px(x, y)
        taken.add((cx - r, cy - r, cx + r, cy + r))
    for m in mids:
        cx, cy = px(m["x"], m["y"])
        taken.add((cx - 6, cy - 6, cx + 6, cy + 6))
    by_host: dict[int, list[float]] = {}
    for d in topology.devices:
        if d.host is not None:
            by_host.setdefault(d.host, []).append(pos[d.name][0])
    for h, hx in by_host.items():  # the host names under the boxes
        cx, cy = px((min(hx) + max(hx)) / 2, -0.6)
        w = text_width_px(f"host {h}", 13, bold=True)
        taken.add((cx - w / 2, cy - 20, cx + w / 2, cy))
    many = len(mids) > MAX_LABELS
    order = sorted(mids, key=lambda m: (not m["edited"], m["kind"] != "network", m["x"]))
    for m in order:
        if many and not (m["edited"] or m["kind"] == "network"):
            m["label"] = ""
        if not m["label"]:
            continue
        cx, cy = px(m["x"], m["y"])
        w = text_width_px(m["label"], 12)
        box = (cx + 7, cy - 8, cx + 7 + w, cy + 8)
        if taken.free(box):
            taken.add(box)
        else:
            m["label"] = ""


def _selected_xy(
    selected: tuple[str, ...], pos: dict[str, tuple[float, float]]
) -> tuple[float, float] | None:
    """A selected device's position or a selected (cut) link's midpoint; None when not drawn."""
    if selected[0] == "device" and selected[1] in pos:
        return pos[selected[1]]
    if len(selected) == 3 and selected[1] in pos and selected[2] in pos:
        (x0, y0), (x1, y1) = pos[selected[1]], pos[selected[2]]
        return (x0 + x1) / 2, (y0 + y1) / 2
    return None


def _midpoints(fig: go.Figure, mids: list[dict], *, coloured: bool, busiest: float) -> None:
    """Clickable link midpoints labelled with bandwidth (GB/s); busy ones on the traffic scale.

    Labels blanked by :func:`_drop_crowded_labels` stay blank (their value is in the hover).
    """
    for busy in (False, True):
        ms = [m for m in mids if (coloured and m["busy"] > 0) == busy]
        if not ms:
            continue
        marker: dict = dict(size=11, symbol="square", line=dict(color="white", width=1))
        if busy:
            marker.update(
                color=np.array([m["busy"] for m in ms]) * 1e3,
                colorscale=TRAFFIC_SCALE,
                cmin=0,
                cmax=busiest * 1e3,
                colorbar=dict(
                    title=dict(text="link busy<br>time (ms)", font=dict(size=13)),
                    tickfont=dict(size=12),
                    len=0.8,
                ),
            )
        else:
            marker.update(
                color=[
                    EDITED_COLOR if m["edited"] else LINK_COLORS.get(m["kind"], "#555") for m in ms
                ]
            )
        fig.add_scatter(
            x=[m["x"] for m in ms],
            y=[m["y"] for m in ms],
            mode="markers+text",
            marker=marker,
            text=[m["label"] for m in ms],
            textposition="middle right",
            textfont=dict(size=12, color="#111827"),
            customdata=[m["data"] for m in ms],
            hovertext=[m["info"] for m in ms],
            hoverinfo="text",
            name="link (GB/s label; click)",
            showlegend=False,
        )
