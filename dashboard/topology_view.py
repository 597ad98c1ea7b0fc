"""The cluster drawn as hosts (boxes) holding GPUs, their switch and NICs, under one network
switch; optionally with each link's width and colour set by a plan's traffic on it."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.colors import sample_colorscale

from dashboard.charts import LINK_COLORS, style
from taps_core.plan import Plan
from taps_core.report import fmt_bytes, fmt_seconds
from taps_core.topology import Topology

# rows inside a host box (y), from the bottom: switch, GPUs, NICs; shared gear above
ROW = {"nvswitch": 0.0, "pcie_switch": 0.0, "gpu": 1.0, "nic": 2.0}
SHARED_Y = 3.4
SYMBOL = {
    "gpu": "square",
    "nvswitch": "diamond",
    "pcie_switch": "diamond",
    "nic": "triangle-up",
    "network_switch": "hexagon",
}
DEVICE_COLOR = {
    "gpu": "#76B900",
    "nvswitch": "#374151",
    "pcie_switch": "#92400e",
    "nic": "#0072B2",
    "network_switch": "#1e3a8a",
}
DEVICE_NAME = {
    "gpu": "GPU",
    "nvswitch": "NVSwitch",
    "pcie_switch": "PCIe switch",
    "nic": "NIC",
    "network_switch": "network switch",
}
TRAFFIC_SCALE = "YlOrRd"
EDITED_COLOR = "#D55E00"  # Okabe-Ito vermillion: edited and cut links
MAX_LABELS = 150
SWITCHES = ("nvswitch", "pcie_switch", "network_switch")
TRAFFIC_BINS = 8


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


def _pair(a: str, b: str) -> frozenset[str]:
    return frozenset((a, b))


def topology_figure(
    topology: Topology,
    plan: Plan | None = None,
    *,
    title: str | None = None,
    edited: set[frozenset[str]] | frozenset = frozenset(),
    cut: tuple[tuple[str, str], ...] = (),
    selected: tuple[str, ...] | None = None,
) -> go.Figure:
    """Draw ``topology`` with every link's bandwidth labelled at its midpoint.

    The midpoints and devices carry ``customdata`` (``["link", src, dst]``, ``["device",
    name]``, ``["cut", src, dst]``) so a click selects them. ``edited`` links are drawn thick
    in vermillion, ``cut`` links dotted; ``selected`` (one of those customdata) gets a ring.
    With ``plan``, links get width and colour by their busy time.
    """
    pos = device_positions(topology)
    fig = go.Figure()
    _host_boxes(fig, topology, pos)
    traffic: dict[frozenset[str], list] = {}
    if plan is not None:
        for k in plan.links:
            entry = traffic.setdefault(_pair(k.src, k.dst), [0.0, 0.0, []])
            entry[0] += k.bytes
            entry[1] = max(entry[1], k.busy_time_s)
            entry[2].append(
                f"{k.src}→{k.dst}: {fmt_bytes(k.bytes)}, busy {fmt_seconds(k.busy_time_s)}"
            )
    busiest = max((v[1] for v in traffic.values()), default=0.0)
    kinds = {d.name: d.kind for d in topology.devices}
    segs: dict[object, tuple[list, list]] = {}
    mids: list[dict] = []
    for link in topology.links:
        (x0, y0), (x1, y1) = pos[link.src], pos[link.dst]
        t = traffic.get(_pair(link.src, link.dst))
        if _pair(link.src, link.dst) in edited:
            key: object = "edited"
        elif plan is None:
            key = link.kind
        elif t is None or busiest <= 0:
            key = "idle"
        else:
            key = min(TRAFFIC_BINS - 1, int(t[1] / busiest * TRAFFIC_BINS))
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
                edited=_pair(link.src, link.dst) in edited,
                data=["link", link.src, link.dst],
            )
        )
    for key, (xs, ys) in segs.items():
        if key == "edited":
            line = dict(color=EDITED_COLOR, width=5)
            name, legend = "edited link", True
        elif plan is None:
            line = dict(color=LINK_COLORS.get(str(key), "#555"), width=2.5)
            name, legend = f"{key} link", True
        elif key == "idle":
            line = dict(color="#d1d5db", width=1.2, dash="dot")
            name, legend = "idle link", True
        else:
            frac = (int(key) + 0.5) / TRAFFIC_BINS  # type: ignore[call-overload]
            color = sample_colorscale(TRAFFIC_SCALE, [0.15 + 0.85 * frac])[0]
            line = dict(color=color, width=1.5 + 8 * frac)
            name, legend = "busy link", False
        fig.add_scatter(
            x=xs, y=ys, mode="lines", name=name, line=line, hoverinfo="skip", showlegend=legend
        )
    if cut:
        xs, ys = [], []
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
    _midpoints(fig, mids, coloured=plan is not None and busiest > 0, busiest=busiest)
    if cut:
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
    if selected:
        spot = {tuple(m["data"][1:]): (m["x"], m["y"]) for m in mids}
        at = spot.get(tuple(selected[1:])) if selected[0] == "link" else None
        at = at or _selected_xy(selected, pos)
        if at is not None:
            fig.add_scatter(
                x=[at[0]],
                y=[at[1]],
                mode="markers",
                name="selected",
                marker=dict(size=30, symbol="circle-open", color="#111827", line=dict(width=3)),
                hoverinfo="skip",
            )
    xs = [p[0] for p in pos.values()]
    fig.update_xaxes(visible=False, range=[min(xs) - 1, max(xs) + 1])
    fig.update_yaxes(visible=False, range=[-1.2, SHARED_Y + 0.8])
    default = f"{topology.name}: {topology.nodes} host(s) × {topology.gpus_per_node} GPU(s)" + (
        ", links by plan traffic" if plan is not None else ", link bandwidths in GB/s"
    )
    fig.update_layout(clickmode="event+select", dragmode="pan")
    return style(fig, title or default, height=480, legend_title="devices / links")


def _selected_xy(
    selected: tuple[str, ...], pos: dict[str, tuple[float, float]]
) -> tuple[float, float] | None:
    if selected[0] == "device" and selected[1] in pos:
        return pos[selected[1]]
    if len(selected) == 3 and selected[1] in pos and selected[2] in pos:
        (x0, y0), (x1, y1) = pos[selected[1]], pos[selected[2]]
        return (x0 + x1) / 2, (y0 + y1) / 2
    return None


def _midpoints(fig: go.Figure, mids: list[dict], *, coloured: bool, busiest: float) -> None:
    """Clickable link midpoints labelled with bandwidth (GB/s); busy ones on the traffic scale.

    Past ``MAX_LABELS`` links only network and edited links keep their label.
    """
    many = len(mids) > MAX_LABELS
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
            text=[
                m["label"] if not many or m["edited"] or m["kind"] == "network" else "" for m in ms
            ],
            textposition="middle right",
            textfont=dict(size=12, color="#111827"),
            customdata=[m["data"] for m in ms],
            hovertext=[m["info"] for m in ms],
            hoverinfo="text",
            name="link (GB/s label; click)",
            showlegend=False,
        )
