"""What both topology drawings share (:mod:`dashboard.topology_view` draws every link,
:mod:`dashboard.topology_aggregated` one line per host and link class): where each device kind
sits and how it looks, the traffic colour scale, links grouped into classes, and the marks and
frame both figures draw the same way."""

from __future__ import annotations

from collections import Counter

import plotly.graph_objects as go
from plotly.colors import sample_colorscale

from dashboard.charts import LINK_COLORS, style
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
TRAFFIC_BINS = 8
KIND_NAMES = {"nvlink": "NVLink", "pcie": "PCIe", "network": "network"}


def _pair(a: str, b: str) -> frozenset[str]:
    """A link's ends as an unordered key (a link and its reverse are one link)."""
    return frozenset((a, b))


def _link_traffic(plan: Plan | None) -> dict[frozenset[str], list]:
    """Per link (either direction): ``[bytes, longest busy time (s), a hover line per
    direction]`` from the plan's link records; empty without a plan."""
    traffic: dict[frozenset[str], list] = {}
    if plan is not None:
        for k in plan.links:
            entry = traffic.setdefault(_pair(k.src, k.dst), [0.0, 0.0, []])
            entry[0] += k.bytes
            entry[1] = max(entry[1], k.busy_time_s)
            entry[2].append(
                f"{k.src}→{k.dst}: {fmt_bytes(k.bytes)}, busy {fmt_seconds(k.busy_time_s)}"
            )
    return traffic


def _line_key(
    edited: bool, kind: str, busy: float | None, busiest: float, *, planned: bool
) -> object:
    """The line trace a link (group) joins: ``"edited"``, its link kind without a plan,
    ``"idle"`` without traffic (``busy`` None), else a bin of :data:`TRAFFIC_BINS` by busy time."""
    if edited:
        return "edited"
    if not planned:
        return kind
    if busy is None or busiest <= 0:
        return "idle"
    return min(TRAFFIC_BINS - 1, int(busy / busiest * TRAFFIC_BINS))


def _bin_color(key: object) -> tuple[float, str]:
    """A traffic bin's middle (share of the busiest link's busy time) and its colour."""
    frac = (int(key) + 0.5) / TRAFFIC_BINS  # type: ignore[call-overload]
    return frac, sample_colorscale(TRAFFIC_SCALE, [0.15 + 0.85 * frac])[0]


def _selected_ring(fig: go.Figure, xy: tuple[float, float]) -> None:
    """A dark ring around the selected device or link midpoint (data coordinates)."""
    fig.add_scatter(
        x=[xy[0]], y=[xy[1]], mode="markers", name="selected", hoverinfo="skip",
        marker=dict(size=30, symbol="circle-open", color="#111827", line=dict(width=3)),
    )


def _topology_style(
    fig: go.Figure, title: str, *, x: tuple[float, float], y: tuple[float, float], height: int,
    margin: dict,
) -> go.Figure:
    """Hidden axes over ``x`` and ``y`` (data), click-to-select and pan, the dashboard look with
    the legend under the plot; ``height`` and ``margin`` in pixels."""
    fig.update_xaxes(visible=False, range=list(x))
    fig.update_yaxes(visible=False, range=list(y))
    fig.update_layout(clickmode="event+select", dragmode="pan")
    fig = style(fig, title, height=height, legend_title="devices / links", legend_below=True)
    fig.update_layout(margin=margin, legend=dict(y=-0.04, yanchor="top"))
    return fig


def _ends(
    topology: Topology, a: str, b: str, dev: dict | None = None
) -> tuple[tuple[int | None, str], ...]:
    """The (host, device kind) of both ends of a link, in a fixed order (hosts before shared
    gear, then by kind), so a link and its reverse land in the same group. ``dev`` (devices by
    name) saves rebuilding it for every link of a large cluster."""
    dev = dev if dev is not None else {d.name: d for d in topology.devices}
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
    """A link group's count and its lowest and highest bandwidth (GB/s)."""
    bws = [k.bandwidth_Bps / 1e9 for k in links]
    return (len(links), min(bws), max(bws))


def link_groups(
    topology: Topology,
) -> tuple[dict[tuple, list], dict[tuple, tuple[int, float, float]]]:
    """Links grouped per host (pair) and class, and each class's usual signature (links per
    group, lowest and highest GB/s): what most hosts have."""
    groups: dict[tuple, list] = {}
    dev = {d.name: d for d in topology.devices}
    for link in topology.links:
        groups.setdefault((*_ends(topology, link.src, link.dst, dev), link.kind), []).append(link)
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
