"""Many hosts: the cluster drawn with one marker per host and device kind and one line per
host and link class (:func:`aggregated_figure`), which ``topology_figure`` in
:mod:`dashboard.topology_view` switches to when one label per link would not fit."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go

from dashboard.charts import LINK_COLORS
from dashboard.graph_view import DEFAULT_WIDTH_PX, _Boxes, _Frame, text_width_px
from dashboard.topology_common import (
    DEVICE_COLOR,
    DEVICE_NAME,
    EDITED_COLOR,
    KIND_NAMES,
    ROW,
    SHARED_Y,
    SYMBOL,
    TRAFFIC_SCALE,
    _bin_color,
    _class_of,
    _ends,
    _line_key,
    _link_traffic,
    _pair,
    _selected_ring,
    _signature,
    _topology_style,
    class_legend,
    link_groups,
)
from taps_core.cluster.topology import Topology
from taps_core.plan.records import Plan
from taps_core.plan.report import fmt_bytes, fmt_seconds

BENDS = (0.0, 0.3, -0.3, 0.45, -0.45)  # sideways offsets (host widths) of classes that meet


@dataclass(frozen=True)
class _Columns:
    """Where the aggregated drawing puts a device: its host's column (x = 0, 1, ... in host
    order) at its kind's row; shared gear above, 2 columns apart around the middle."""

    hosts: tuple[int, ...]
    col: dict[int, float]
    shared_x: dict[str, float]
    center: float

    def at(self, host: int | None, kind: str, name: str | None = None) -> tuple[float, float]:
        if host is None:
            return self.shared_x.get(name or "", self.center), SHARED_Y
        return self.col[host], ROW.get(kind, 2.0)


def _columns(topology: Topology) -> _Columns:
    """The host columns and shared-gear positions of ``topology`` (see :class:`_Columns`)."""
    hosts = sorted({d.host for d in topology.devices if d.host is not None})
    center = (len(hosts) - 1) / 2
    shared = [d.name for d in topology.devices if d.host is None]
    shared_x = {n: center + (j - (len(shared) - 1) / 2) * 2.0 for j, n in enumerate(shared)}
    return _Columns(tuple(hosts), {h: float(i) for i, h in enumerate(hosts)}, shared_x, center)


def _class_bends(usual: dict[tuple, tuple[int, float, float]]) -> dict[tuple, float]:
    """A sideways bend (host widths, one of :data:`BENDS`) per link class inside a host, the
    first that meets no other class's rows; classes leaving the host get 0.3 (unused)."""
    bend: dict[tuple, float] = {}
    taken_y: list[tuple[float, float, float]] = []
    for cls in sorted(usual, key=lambda c: (c[3] != "same", c)):
        ya, yb = ROW.get(cls[0], 2.0), (ROW.get(cls[1], 2.0) if cls[3] != "shared" else SHARED_Y)
        lo, hi = min(ya, yb), max(ya, yb) + (0.01 if ya == yb else 0.0)
        for off in BENDS:
            if cls[3] != "same" or all(
                o != off or hi <= l2 or h2 <= lo for o, l2, h2 in taken_y
            ):
                bend[cls] = off if cls[3] == "same" and (off or ya != yb) else (off or 0.3)
                taken_y.append((bend[cls], lo, hi))
                break
    return bend


def _agg_host_boxes(cols: _Columns, width_px: int) -> tuple[list[dict], list[dict], float]:
    """A box per host column and the name of every k-th host (k doubling until the names fit
    side by side); with the pixels each host's column gets in a ``width_px`` wide figure."""
    hosts = cols.hosts
    per_host_px = (width_px - 190) / max(len(hosts) + 1, 2)
    step = 1
    while step * per_host_px < text_width_px(f"host {hosts[-1]}", 12, bold=True) + 8:
        step *= 2
    shapes = [
        dict(type="rect", x0=cols.col[h] - 0.42, x1=cols.col[h] + 0.42, y0=-0.55, y1=2.55,
             line=dict(color="#6b7280", width=1 if len(hosts) > 32 else 1.5),
             fillcolor="rgba(243,244,246,0.6)", layer="below")
        for h in hosts
    ]
    labels = [
        dict(x=cols.col[h], y=-0.6, yanchor="top", text=f"<b>host {h}</b>", showarrow=False,
             font=dict(size=12))
        for i, h in enumerate(hosts) if i % step == 0
    ]
    return shapes, labels, per_host_px


def _group_info(
    key: tuple, links: list, edited: set[frozenset[str]] | frozenset, sent: float, busy: float,
    *, planned: bool,
) -> str:
    """The hover of a link group: where, how many links of which kind, the first 10 with their
    GB/s, and with a plan the bytes sent and the busiest link's busy time."""
    (ha, ka), (hb, kb), kind = key
    where = f"host {ha}" if hb in (None, ha) else f"hosts {ha}–{hb}"
    return (
        f"<b>{where}: {len(links)} {KIND_NAMES.get(kind, kind)} link(s) "
        f"{DEVICE_NAME.get(ka, ka)}–{DEVICE_NAME.get(kb, kb)}</b><br>"
        + "<br>".join(
            f"{k.src} – {k.dst}: {k.bandwidth_Bps / 1e9:.3g} GB/s"
            + (" (edited)" if _pair(k.src, k.dst) in edited else "")
            for k in links[:10]
        )
        + (f"<br>… {len(links) - 10} more" if len(links) > 10 else "")
        + (f"<br>traffic {fmt_bytes(sent)}, busiest link {fmt_seconds(busy)}"
           if planned else "")
        + "<br><i>click to select the first</i>"
    )


def _group_segments(
    topology: Topology, groups: dict[tuple, list], cut: tuple[tuple[str, str], ...],
    traffic: dict[frozenset[str], list], edited: set[frozenset[str]] | frozenset, *,
    usual: dict[tuple, tuple[int, float, float]], busiest: float, planned: bool,
) -> tuple[dict[object, tuple[list, list]], list[dict]]:
    """Every link group as a segment of its line trace (:func:`_line_key`; inside a host bent
    sideways by :func:`_class_bends`), and its midpoint record; a cut group gets a midpoint
    only. A group's label text is set only where it differs from its class's ``usual`` value."""
    cols = _columns(topology)
    dev = {d.name: d for d in topology.devices}
    bend = _class_bends(usual)
    segs: dict[object, tuple[list, list]] = {}
    mids: list[dict] = []
    for key, links in groups.items():
        (ha, ka), (hb, kb), kind = key
        cls = _class_of(key)
        names = [(k.src, k.dst) for k in links]
        shared_end = next((n for pair in names for n in pair if dev[n].host is None), None)
        x0, y0 = cols.at(ha, ka)
        x1, y1 = cols.at(hb, kb, shared_end)
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
        else:
            path = [(x0, y0), (x1, y1)]
        skey = _line_key(is_edited, kind, busy if busy > 0 else None, busiest, planned=planned)
        xs, ys = segs.setdefault(skey, ([], []))
        xs += [p[0] for p in path] + [None]
        ys += [p[1] for p in path] + [None]
        t_ = 0.5 if len(path) == 3 or cls[3] == "between" else 0.18
        if len(path) == 3:
            mx, my = path[1]
        else:
            mx, my = x0 + t_ * (x1 - x0), y0 + t_ * (y1 - y0)
        sig = _signature(links)
        text = ""
        if is_edited or sig != usual.get(cls):
            text = f"{sig[1]:.3g}" if sig[1] == sig[2] else f"{sig[1]:.3g}–{sig[2]:.3g}"
            text += "" if sig[0] == usual.get(cls, (0,))[0] else f" ×{sig[0]}"
        info = _group_info(key, links, edited, sent, busy, planned=planned)
        mids.append(dict(x=mx, y=my, busy=busy, info=info, text=text, edited=is_edited,
                         kind=kind, data=["link", links[0].src, links[0].dst], cut=None))
    return segs, mids


def _group_lines(
    fig: go.Figure, segs: dict[object, tuple[list, list]], *, planned: bool, thin: float
) -> None:
    """One line trace per key (as :func:`_link_lines`), widths times ``thin`` (at most 1) so
    many hosts' lines stay thinner than a host's column."""
    for skey, (xs, ys) in segs.items():
        if skey == "edited":
            line, name = dict(color=EDITED_COLOR, width=max(1.5, 4 * thin)), "edited link"
        elif not planned:
            line, name = dict(color=LINK_COLORS.get(str(skey), "#555"), width=2 * thin), ""
        elif skey == "idle":
            line, name = dict(color="#d1d5db", width=1.2 * thin, dash="dot"), "idle links"
        else:
            frac, color = _bin_color(skey)
            line, name = dict(color=color, width=max(0.8, (1.5 + 5 * frac) * thin)), ""
        fig.add_scatter(x=xs, y=ys, mode="lines", line=line, hoverinfo="skip", name=name,
                        showlegend=bool(name))


def _odd_labels(
    mids: list[dict], labels: list[dict], topology: Topology, cols: _Columns, frame: _Frame, *,
    marker_px: float,
) -> list[tuple[float, float, str]]:
    """Labels (x, y, text in data coordinates) for the groups that differ from their class and
    the cut ones, each right, left, above or below its midpoint where it overlaps no host name,
    device marker (``marker_px`` wide) or earlier label; edited groups first."""
    taken = _Boxes()
    for lab in labels:
        lx, ly = frame.px(lab["x"], lab["y"])
        w = text_width_px(lab["text"][3:-4], 12, bold=True)
        taken.add((lx - w / 2, ly - 18, lx + w / 2, ly))
    for h in cols.hosts:
        for kind in {d.kind for d in topology.devices if d.host == h}:
            mx, my = frame.px(*cols.at(h, kind))
            taken.add((mx - marker_px / 2, my - marker_px / 2, mx + marker_px / 2,
                       my + marker_px / 2))
    texts: list[tuple[float, float, str]] = []
    for m in sorted(mids, key=lambda m: (not m.get("edited"), m["x"])):
        label = m.get("text") or ("cut" if m.get("cut") else "")
        if not label:
            continue
        mx, my = frame.px(m["x"], m["y"])
        w = text_width_px(label, 12)
        spots = [(6.0, 0.0), (-6.0 - w, 0.0), (-w / 2, 16.0), (-w / 2, -16.0)]
        for dx, dy in spots:  # right, left, above, below the midpoint
            box = (mx + dx, my + dy - 8, mx + dx + w, my + dy + 8)
            if taken.free(box):
                taken.add(box)
                texts.append((
                    m["x"] + (dx + w / 2) / frame.width_px * (frame.x1 - frame.x0),
                    m["y"] + dy / frame.height_px * (frame.y1 - frame.y0),
                    label,
                ))
                break
    return texts


def _group_markers(
    fig: go.Figure, mids: list[dict], texts: list[tuple[float, float, str]], *, coloured: bool,
    busiest: float, per_host_px: float,
) -> None:
    """The clickable group midpoints (on the busy-time scale in ms when ``coloured``), the cut
    groups' ``x`` markers, and the placed label texts."""
    links_m = [m for m in mids if not m.get("cut")]
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


def _agg_devices(fig: go.Figure, topology: Topology, cols: _Columns, marker_px: float) -> None:
    """One marker per host and device kind (clicks select the host's first of that kind)."""
    dev = {d.name: d for d in topology.devices}
    kinds: dict[str, list[str]] = {}
    for d in topology.devices:
        kinds.setdefault(d.kind, []).append(d.name)
    for kind, names in kinds.items():
        per: dict[int | None, list[str]] = {}
        for n in names:
            per.setdefault(dev[n].host, []).append(n)
        spots = [(cols.at(h, kind, ns[0]), ns) for h, ns in per.items()]
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


def _agg_selected_xy(
    selected: tuple[str, ...], mids: list[dict], topology: Topology, cols: _Columns,
    any_groups: bool,
) -> tuple[float, float] | None:
    """Where the selection's ring goes: its group's midpoint, its device's marker, or the
    midpoint of the first group between the same (host, kind) ends; None when not drawn."""
    dev = {d.name: d for d in topology.devices}
    links_m = [m for m in mids if not m.get("cut")]
    spot = next((m for m in links_m if tuple(m["data"][1:]) == tuple(selected[1:])), None)
    xy = (spot["x"], spot["y"]) if spot else None
    if xy is None and selected[0] == "device" and selected[1] in dev:
        xy = cols.at(dev[selected[1]].host, dev[selected[1]].kind, selected[1])
    if xy is None and selected[0] == "link" and len(selected) == 3 and selected[1] in dev:
        key = (*_ends(topology, selected[1], selected[2]), None)
        spot = next((m for m in links_m if any_groups and m["data"][1] in dev and
                     _ends(topology, m["data"][1], m["data"][2]) == key[:2]), None)
        xy = (spot["x"], spot["y"]) if spot else None
    return xy


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
    cols = _columns(topology)
    dev = {d.name: d for d in topology.devices}
    traffic = _link_traffic(plan)
    groups, usual = link_groups(topology)
    for a, b in cut:  # cut links are gone from the topology: mark where their group sits
        if a in dev and b in dev:
            groups.setdefault((*_ends(topology, a, b), "cut"), [])
    busiest = max((v[1] for v in traffic.values()), default=0.0)
    fig = go.Figure()
    shapes, labels, per_host_px = _agg_host_boxes(cols, width_px)
    # lines per class (or traffic bin), midpoints per group
    segs, mids = _group_segments(topology, groups, cut, traffic, edited, usual=usual,
                                 busiest=busiest, planned=plan is not None)
    thin = min(1.0, per_host_px / 40)  # many hosts: lines thinner than a host's column
    _group_lines(fig, segs, planned=plan is not None, thin=thin)
    class_legend(fig, usual, coloured=plan is not None)  # what every host has, named once
    # labels only where a host differs from its class, where they fit
    right = 140 if plan is not None and busiest > 0 else 50  # room for the colour bar
    xr, yr = (-1.0, len(cols.hosts)), (-1.2, SHARED_Y + 0.8)
    frame = _Frame(xr[0], xr[1], yr[0], yr[1], width_px - 50 - right, 480 - 150)
    marker_px = max(4.0, min(15.0, per_host_px * 0.6))
    texts = _odd_labels(mids, labels, topology, cols, frame, marker_px=marker_px)
    fig.update_layout(shapes=shapes, annotations=labels)
    coloured = plan is not None and busiest > 0
    _group_markers(fig, mids, texts, coloured=coloured, busiest=busiest, per_host_px=per_host_px)
    _agg_devices(fig, topology, cols, marker_px)
    if selected:
        xy = _agg_selected_xy(selected, mids, topology, cols, bool(groups))
        if xy is not None:
            _selected_ring(fig, xy)
    default = (
        f"{topology.name}: {topology.nodes} hosts × {topology.gpus_per_node} GPUs, links drawn "
        "per host and class" + (", coloured by plan traffic" if plan is not None else "")
    )
    rows = 22 * (len(usual) + 1)  # legend rows under the plot
    return _topology_style(
        fig, title or default, x=xr, y=yr, height=480 + rows,
        margin=dict(l=50, r=right, t=90, b=60 + rows),
    )
