"""The cluster drawn as hosts (boxes) holding GPUs, their switch and NICs, under one network
switch; optionally with each link's width and colour set by a plan's traffic on it."""

from __future__ import annotations

from collections import Counter

import numpy as np
import plotly.graph_objects as go
from plotly.colors import sample_colorscale

from dashboard.charts import LINK_COLORS, style
from dashboard.graph_view import DEFAULT_WIDTH_PX, _Boxes, text_width_px
from taps_core.cluster.topology import Topology
from taps_core.plan.records import Plan
from taps_core.plan.report import fmt_bytes, fmt_seconds

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
    aggregate: bool | None = None,
) -> go.Figure:
    """Draw ``topology`` with every link's bandwidth labelled at its midpoint.

    The midpoints and devices carry ``customdata`` (``["link", src, dst]``, ``["device",
    name]``, ``["cut", src, dst]``) so a click selects them. ``edited`` links are drawn thick
    in vermillion, ``cut`` links dotted; ``selected`` (one of those customdata) gets a ring.
    With ``plan``, links get width and colour by their busy time.

    ``aggregate`` (default: when one label per link would not fit, :func:`labels_fit`) draws
    one line per host and link class instead of every link (see :func:`aggregated_figure`).
    """
    if aggregate or (aggregate is None and not labels_fit(topology)):
        return aggregated_figure(
            topology, plan, title=title, edited=edited, cut=cut, selected=selected
        )
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
        elif plan is None:  # named per class with its value below (class_legend)
            line = dict(color=LINK_COLORS.get(str(key), "#555"), width=2.5)
            name, legend = f"{key} link", False
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
    coloured = plan is not None and busiest > 0
    _drop_crowded_labels(mids, pos, topology, right_px=130 if coloured else 30)
    _midpoints(fig, mids, coloured=coloured, busiest=busiest)
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
    usual = link_groups(topology)[1]
    class_legend(fig, usual, coloured=plan is not None)
    extra = 22 * (len(usual) + 2)  # legend rows under the plot; the plot keeps its 330 px
    fig = style(fig, title or default, height=480 + extra, legend_title="devices / links",
                legend_below=True)
    fig.update_layout(  # the frame the labels were laid out in
        margin=dict(r=130 if coloured else 30, b=60 + extra), legend=dict(y=-0.04, yanchor="top")
    )
    return fig


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


# ---- many hosts: one line per host and link class ---------------------------------------------

KIND_NAMES = {"nvlink": "NVLink", "pcie": "PCIe", "network": "network"}
BENDS = (0.0, 0.3, -0.3, 0.45, -0.45)  # sideways offsets (host widths) of classes that meet


def _ends(topology: Topology, a: str, b: str) -> tuple[tuple[int | None, str], ...]:
    """The (host, device kind) of both ends of a link, in a fixed order (hosts before shared
    gear, then by kind), so a link and its reverse land in the same group."""
    dev = {d.name: d for d in topology.devices}
    ends = [(dev[n].host, dev[n].kind) for n in (a, b)]
    return tuple(sorted(ends, key=lambda e: (e[0] is None, e[0] or 0, e[1])))


def _class_of(key: tuple) -> tuple:
    """A group's link class: its end kinds, link kind and reach (same host, shared, between)."""
    (ha, ka), (hb, kb), kind = key
    reach = "shared" if hb is None or ha is None else ("same" if ha == hb else "between")
    return (ka, kb, kind, reach)


def _class_name(cls: tuple, sig: tuple[int, float, float]) -> str:
    """``NVLink GPU–NVSwitch: 8 × 300 GB/s per host`` from a class and its usual signature."""
    ka, kb, kind, reach = cls
    count, lo, hi = sig
    bw = f"{lo:.3g} GB/s" if lo == hi else f"{lo:.3g}–{hi:.3g} GB/s"
    per = {"same": "per host", "shared": "per host", "between": "per host pair"}[reach]
    what = f"{KIND_NAMES.get(kind, kind)} {DEVICE_NAME.get(ka, ka)}–{DEVICE_NAME.get(kb, kb)}"
    return f"{what}: {count} × {bw} {per}"


def _signature(links: list) -> tuple[int, float, float]:
    bws = [k.bandwidth_Bps / 1e9 for k in links]
    return (len(links), min(bws), max(bws))


def link_groups(
    topology: Topology,
) -> tuple[dict[tuple, list], dict[tuple, tuple[int, float, float]]]:
    """Links grouped per host (pair) and class, and each class's usual signature (links per
    group, lowest and highest GB/s): what most hosts have."""
    groups: dict[tuple, list] = {}
    for link in topology.links:
        groups.setdefault((*_ends(topology, link.src, link.dst), link.kind), []).append(link)
    by_class: dict[tuple, Counter] = {}
    for key, links in groups.items():
        by_class.setdefault(_class_of(key), Counter())[_signature(links)] += 1
    usual = {cls: counts.most_common(1)[0][0] for cls, counts in by_class.items()}
    return groups, usual


def class_legend(fig: go.Figure, usual: dict, *, coloured: bool) -> None:
    """One legend entry per link class naming its usual value (``NVLink GPU–NVSwitch: 8 ×
    300 GB/s per host``), so the values read in a screenshot without a label on every link."""
    for cls, sig in sorted(usual.items(), key=lambda kv: (kv[0][3] != "same", kv[0])):
        fig.add_scatter(
            x=[None], y=[None], mode="lines", name=_class_name(cls, sig),
            line=dict(color="#9ca3af" if coloured else LINK_COLORS.get(cls[2], "#555"),
                      width=3),
        )


def aggregated_figure(
    topology: Topology,
    plan: Plan | None = None,
    *,
    title: str | None = None,
    edited: set[frozenset[str]] | frozenset = frozenset(),
    cut: tuple[tuple[str, str], ...] = (),
    selected: tuple[str, ...] | None = None,
    width_px: int = DEFAULT_WIDTH_PX,
) -> go.Figure:
    """The cluster with links aggregated: per host, one marker per device kind and one line
    per link class (to the shared switch, inside the host, or to another host).

    Each class's usual value is named once in the legend (``NVLink GPU–NVSwitch: 8 × 300 GB/s
    per host``); only a host whose class differs (an edit, a slower NIC) gets a label on its
    line, placed where it overlaps no other text. Midpoints carry the first link of their
    group as ``customdata`` (``["link", src, dst]``) and list every link on hover; with
    ``plan`` the lines are coloured by their busiest link's busy time.
    """
    hosts = sorted({d.host for d in topology.devices if d.host is not None})
    col = {h: float(i) for i, h in enumerate(hosts)}
    center = (len(hosts) - 1) / 2
    shared = [d.name for d in topology.devices if d.host is None]
    shared_x = {n: center + (j - (len(shared) - 1) / 2) * 2.0 for j, n in enumerate(shared)}
    dev = {d.name: d for d in topology.devices}
    traffic: dict[frozenset[str], tuple[float, float]] = {}
    if plan is not None:
        for k in plan.links:
            b, t = traffic.get(_pair(k.src, k.dst), (0.0, 0.0))
            traffic[_pair(k.src, k.dst)] = (b + k.bytes, max(t, k.busy_time_s))
    groups, usual = link_groups(topology)
    for a, b in cut:  # cut links are gone from the topology: mark where their group sits
        if a in dev and b in dev:
            groups.setdefault((*_ends(topology, a, b), "cut"), [])
    by_class = usual  # a sideways bend per class that meets another
    bend: dict[tuple, float] = {}
    taken_y: list[tuple[float, float, float]] = []
    for cls in sorted(by_class, key=lambda c: (c[3] != "same", c)):
        ya, yb = ROW.get(cls[0], 2.0), (ROW.get(cls[1], 2.0) if cls[3] != "shared" else SHARED_Y)
        lo, hi = min(ya, yb), max(ya, yb) + (0.01 if ya == yb else 0.0)
        for off in BENDS:
            if cls[3] != "same" or all(
                o != off or hi <= l2 or h2 <= lo for o, l2, h2 in taken_y
            ):
                bend[cls] = off if cls[3] == "same" and (off or ya != yb) else (off or 0.3)
                taken_y.append((bend[cls], lo, hi))
                break
    busiest = max((t for _, t in traffic.values()), default=0.0)

    def at(host: int | None, kind: str, name: str | None = None) -> tuple[float, float]:
        if host is None:
            return shared_x.get(name or "", center), SHARED_Y
        return col[host], ROW.get(kind, 2.0)

    fig = go.Figure()
    # host boxes and every k-th host label (as many as fit side by side)
    per_host_px = (width_px - 190) / max(len(hosts) + 1, 2)
    step = 1
    while step * per_host_px < text_width_px(f"host {hosts[-1]}", 12, bold=True) + 8:
        step *= 2
    shapes = [
        dict(type="rect", x0=col[h] - 0.42, x1=col[h] + 0.42, y0=-0.55, y1=2.55,
             line=dict(color="#6b7280", width=1 if len(hosts) > 32 else 1.5),
             fillcolor="rgba(243,244,246,0.6)", layer="below")
        for h in hosts
    ]
    labels = [
        dict(x=col[h], y=-0.6, yanchor="top", text=f"<b>host {h}</b>", showarrow=False,
             font=dict(size=12))
        for i, h in enumerate(hosts) if i % step == 0
    ]
    # lines per class (or traffic bin), midpoints per group
    segs: dict[object, tuple[list, list]] = {}
    mids: list[dict] = []
    for key, links in groups.items():
        (ha, ka), (hb, kb), kind = key
        cls = _class_of(key)
        names = [(k.src, k.dst) for k in links]
        shared_end = next((n for pair in names for n in pair if dev[n].host is None), None)
        x0, y0 = at(ha, ka)
        x1, y1 = at(hb, kb, shared_end)
        if kind == "cut":
            ends = [(a, b) for a, b in cut if _ends(topology, a, b) == key[:2]]
            mids.append(dict(x=(x0 + x1) / 2, y=(y0 + y1) / 2, cut=ends, links=[]))
            continue
        pairs = {_pair(*n) for n in names}
        is_edited = bool(pairs & set(edited))
        busy = max((traffic.get(p, (0.0, 0.0))[1] for p in pairs), default=0.0)
        sent = sum(traffic.get(p, (0.0, 0.0))[0] for p in pairs)
        if cls[3] == "same":
            off = bend.get(cls, 0.0)
            path = [(x0, y0), (x0 + off, (y0 + y1) / 2 + (0.35 if y0 == y1 else 0.0)), (x1, y1)]
        elif cls[3] == "shared":
            path = [(x0, y0), (x1, y1)]
        else:
            path = [(x0, y0), (x1, y1)]
        if is_edited:
            skey: object = "edited"
        elif plan is None:
            skey = kind
        elif busy <= 0 or busiest <= 0:
            skey = "idle"
        else:
            skey = min(TRAFFIC_BINS - 1, int(busy / busiest * TRAFFIC_BINS))
        xs, ys = segs.setdefault(skey, ([], []))
        xs += [p[0] for p in path] + [None]
        ys += [p[1] for p in path] + [None]
        t_ = 0.5 if len(path) == 3 or cls[3] == "between" else 0.18
        if len(path) == 3:
            mx, my = path[1]
        else:
            mx, my = x0 + t_ * (x1 - x0), y0 + t_ * (y1 - y0)
        sig = _signature(links)
        where = f"host {ha}" if hb in (None, ha) else f"hosts {ha}–{hb}"
        info = (
            f"<b>{where}: {len(links)} {KIND_NAMES.get(kind, kind)} link(s) "
            f"{DEVICE_NAME.get(ka, ka)}–{DEVICE_NAME.get(kb, kb)}</b><br>"
            + "<br>".join(
                f"{k.src} – {k.dst}: {k.bandwidth_Bps / 1e9:.3g} GB/s"
                + (" (edited)" if _pair(k.src, k.dst) in edited else "")
                for k in links[:10]
            )
            + (f"<br>… {len(links) - 10} more" if len(links) > 10 else "")
            + (f"<br>traffic {fmt_bytes(sent)}, busiest link {fmt_seconds(busy)}"
               if plan is not None else "")
            + "<br><i>click to select the first</i>"
        )
        odd = is_edited or sig != usual.get(cls)
        text = ""
        if odd:
            text = f"{sig[1]:.3g}" if sig[1] == sig[2] else f"{sig[1]:.3g}–{sig[2]:.3g}"
            text += "" if sig[0] == usual.get(cls, (0,))[0] else f" ×{sig[0]}"
        mids.append(dict(x=mx, y=my, busy=busy, info=info, text=text, edited=is_edited,
                         kind=kind, data=["link", links[0].src, links[0].dst], cut=None))
    thin = min(1.0, per_host_px / 40)  # many hosts: lines thinner than a host's column
    for skey, (xs, ys) in segs.items():
        if skey == "edited":
            line, name = dict(color=EDITED_COLOR, width=max(1.5, 4 * thin)), "edited link"
        elif plan is None:
            line, name = dict(color=LINK_COLORS.get(str(skey), "#555"), width=2 * thin), ""
        elif skey == "idle":
            line, name = dict(color="#d1d5db", width=1.2 * thin, dash="dot"), "idle links"
        else:
            frac = (int(skey) + 0.5) / TRAFFIC_BINS  # type: ignore[call-overload]
            color = sample_colorscale(TRAFFIC_SCALE, [0.15 + 0.85 * frac])[0]
            line, name = dict(color=color, width=max(0.8, (1.5 + 5 * frac) * thin)), ""
        fig.add_scatter(x=xs, y=ys, mode="lines", line=line, hoverinfo="skip", name=name,
                        showlegend=bool(name))
    class_legend(fig, usual, coloured=plan is not None)  # what every host has, named once
    # labels only where a host differs from its class, where they fit
    right = 140 if plan is not None and busiest > 0 else 50  # room for the colour bar
    frame_w, frame_h = width_px - 50 - right, 480 - 150
    xr = (-1.0, len(hosts))
    yr = (-1.2, SHARED_Y + 0.8)

    def px(x: float, y: float) -> tuple[float, float]:
        return ((x - xr[0]) / (xr[1] - xr[0]) * frame_w, (y - yr[0]) / (yr[1] - yr[0]) * frame_h)

    taken = _Boxes()
    for lab in labels:
        lx, ly = px(lab["x"], lab["y"])
        w = text_width_px(lab["text"][3:-4], 12, bold=True)
        taken.add((lx - w / 2, ly - 18, lx + w / 2, ly))
    marker_px = max(4.0, min(15.0, per_host_px * 0.6))
    for h in hosts:
        for kind in {d.kind for d in topology.devices if d.host == h}:
            mx, my = px(*at(h, kind))
            taken.add((mx - marker_px / 2, my - marker_px / 2, mx + marker_px / 2,
                       my + marker_px / 2))
    texts: list[tuple[float, float, str]] = []
    for m in sorted(mids, key=lambda m: (not m.get("edited"), m["x"])):
        label = m.get("text") or ("cut" if m.get("cut") else "")
        if not label:
            continue
        mx, my = px(m["x"], m["y"])
        w = text_width_px(label, 12)
        spots = [(6.0, 0.0), (-6.0 - w, 0.0), (-w / 2, 16.0), (-w / 2, -16.0)]
        for dx, dy in spots:  # right, left, above, below the midpoint
            box = (mx + dx, my + dy - 8, mx + dx + w, my + dy + 8)
            if taken.free(box):
                taken.add(box)
                texts.append((
                    m["x"] + (dx + w / 2) / frame_w * (xr[1] - xr[0]),
                    m["y"] + dy / frame_h * (yr[1] - yr[0]),
                    label,
                ))
                break
    fig.update_layout(shapes=shapes, annotations=labels)
    links_m = [m for m in mids if not m.get("cut")]
    coloured = plan is not None and busiest > 0
    marker: dict = dict(size=max(4.0, min(11.0, per_host_px * 0.4)), symbol="square",
                        line=dict(color="white", width=1))
    if coloured:
        marker.update(
            color=np.array([m["busy"] for m in links_m]) * 1e3, colorscale=TRAFFIC_SCALE,
            cmin=0, cmax=busiest * 1e3,
            colorbar=dict(title=dict(text="busiest link<br>busy time (ms)", font=dict(size=13)),
                          tickfont=dict(size=12), len=0.8),
        )
    else:
        marker.update(color=[EDITED_COLOR if m["edited"] else LINK_COLORS.get(m["kind"], "#555")
                             for m in links_m])
    fig.add_scatter(
        x=[m["x"] for m in links_m], y=[m["y"] for m in links_m], mode="markers",
        marker=marker, customdata=[m["data"] for m in links_m],
        hovertext=[m["info"] for m in links_m], hoverinfo="text", showlegend=False,
        name="link group (click)",
    )
    cuts = [m for m in mids if m.get("cut")]
    if cuts:
        fig.add_scatter(
            x=[m["x"] for m in cuts], y=[m["y"] for m in cuts], mode="markers", name="cut link",
            marker=dict(size=12, symbol="x", color=EDITED_COLOR),
            customdata=[["cut", *m["cut"][0]] for m in cuts],
            hovertext=["<br>".join(f"{a} – {b} cut" for a, b in m["cut"]) for m in cuts],
            hoverinfo="text",
        )
    if texts:
        fig.add_scatter(
            x=[t[0] for t in texts], y=[t[1] for t in texts], text=[t[2] for t in texts],
            mode="text", textposition="middle center", textfont=dict(size=12, color="#111827"),
            hoverinfo="skip", showlegend=False,
        )
    # one marker per host and device kind
    kinds: dict[str, list[str]] = {}
    for d in topology.devices:
        kinds.setdefault(d.kind, []).append(d.name)
    for kind, names in kinds.items():
        per: dict[int | None, list[str]] = {}
        for n in names:
            per.setdefault(dev[n].host, []).append(n)
        spots = [(at(h, kind, ns[0]), ns) for h, ns in per.items()]
        fig.add_scatter(
            x=[s[0][0] for s in spots], y=[s[0][1] for s in spots], mode="markers",
            name=DEVICE_NAME.get(kind, kind) + (f" (×{max(len(ns) for _, ns in spots)} per host)"
                                                if kind in ("gpu", "nic") else ""),
            marker=dict(size=marker_px if kind != "network_switch" else 22,
                        symbol=SYMBOL.get(kind), color=DEVICE_COLOR.get(kind, "#555"),
                        line=dict(color="white", width=1 if marker_px > 6 else 0)),
            customdata=[["device", ns[0]] for _, ns in spots],
            hovertext=[f"{len(ns)} × {DEVICE_NAME.get(kind, kind)}: {ns[0]}"
                       + (f" … {ns[-1]}" if len(ns) > 1 else "") + "<br><i>click to select the "
                       "first</i>" for _, ns in spots],
            hoverinfo="text",
        )
    if selected:
        spot = next((m for m in links_m if tuple(m["data"][1:]) == tuple(selected[1:])), None)
        xy = (spot["x"], spot["y"]) if spot else None
        if xy is None and selected[0] == "device" and selected[1] in dev:
            xy = at(dev[selected[1]].host, dev[selected[1]].kind, selected[1])
        if xy is None and selected[0] == "link" and len(selected) == 3 and selected[1] in dev:
            key = (*_ends(topology, selected[1], selected[2]), None)
            spot = next((m for m in links_m if groups and m["data"][1] in dev and
                         _ends(topology, m["data"][1], m["data"][2]) == key[:2]), None)
            xy = (spot["x"], spot["y"]) if spot else None
        if xy is not None:
            fig.add_scatter(
                x=[xy[0]], y=[xy[1]], mode="markers", name="selected", hoverinfo="skip",
                marker=dict(size=30, symbol="circle-open", color="#111827", line=dict(width=3)),
            )
    fig.update_xaxes(visible=False, range=list(xr))
    fig.update_yaxes(visible=False, range=list(yr))
    default = (
        f"{topology.name}: {topology.nodes} hosts × {topology.gpus_per_node} GPUs, links drawn "
        "per host and class" + (", coloured by plan traffic" if plan is not None else "")
    )
    fig.update_layout(clickmode="event+select", dragmode="pan")
    fig = style(fig, title or default, height=480 + 22 * (len(usual) + 1),
                legend_title="devices / links", legend_below=True)
    fig.update_layout(
        margin=dict(l=50, r=right, t=90, b=60 + 22 * (len(usual) + 1)),
        legend=dict(y=-0.04, yanchor="top"),
    )
    return fig
