"""Many hosts: the cluster drawn in blocks of alike hosts (one box per block, ``hosts 0–31``),
one marker per block and device kind and one line per block and link class, each line labelled
with its links per host and their bandwidth (``8 × 300 GB/s``) (:func:`aggregated_figure`).
``topology_figure`` in :mod:`dashboard.topology_view` switches to it when one label per link
would not fit. A block holds one host when few hosts are drawn; an edited host, a host whose
links differ from its neighbours', or one with a cut link is a block of its own, so it is named."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go

from dashboard.charts import LINK_COLORS
from dashboard.graph_view import DEFAULT_WIDTH_PX, _Boxes, _Frame, _ranges, text_width_px
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

BENDS = (0.0, 0.3, -0.3, 0.45, -0.45)  # sideways offsets (block widths) of classes that meet
BLOCK_PX = 170  # the least width of a block's column: its markers and an "8 × 300 GB/s" label
DEVICE_DX = -0.15  # the devices sit left of the block's middle: room for the labels right
BOX_TOP = 2.55  # a block's box spans the rows from y = -0.55 to here
PLOT_HEIGHT_PX = 330  # the plot area (480 px less the title and bottom margins)


@dataclass(frozen=True)
class _Columns:
    """Where the aggregated drawing puts a device: its block's column (x = 0, 1, ... in host
    order; a block is a run of consecutive hosts) at its kind's row; shared gear above, 2
    columns apart around the middle."""

    blocks: tuple[tuple[int, ...], ...]
    block_of: dict[int, int]
    shared_x: dict[str, float]
    center: float
    bend_scale: float = 1.0  # wide blocks bend their lines less (bends stay ~BLOCK_PX wide)

    def at(self, block: int | None, kind: str, name: str | None = None) -> tuple[float, float]:
        """x, y of block ``block``'s marker of ``kind`` (``None``: the shared device ``name``)."""
        if block is None:
            return self.shared_x.get(name or "", self.center), SHARED_Y
        return block + DEVICE_DX, ROW.get(kind, 2.0)

    def name(self, block: int) -> str:
        """``host 3`` or ``hosts 0–31`` (a block's hosts are consecutive)."""
        hosts = self.blocks[block]
        return f"host {hosts[0]}" if len(hosts) == 1 else f"hosts {_ranges(hosts)}"


def _host_signatures(groups: dict[tuple, list]) -> dict[int, tuple]:
    """Per host, its link classes with their counts and GB/s (:func:`_signature`): two hosts
    with equal signatures draw the same."""
    sig: dict[int, list] = {}
    for key, links in groups.items():
        (ha, _), (hb, _), _ = key
        for h in {ha, hb} - {None}:
            sig.setdefault(h, []).append((_class_of(key), _signature(links)))
    return {h: tuple(sorted(v, key=repr)) for h, v in sig.items()}


def _blocks(
    hosts: list[int], signature: dict[int, tuple], marked: set[int], max_blocks: int
) -> tuple[tuple[int, ...], ...]:
    """Consecutive hosts in blocks: chunks of a power-of-two size (the smallest giving at most
    ``max_blocks``), each split where the hosts' signatures change and around a ``marked``
    (edited) host; the unsplit chunks when splitting would give more than twice as many."""
    size = 1
    while -(-len(hosts) // size) > max(max_blocks, 1):
        size *= 2
    chunks = [tuple(hosts[i : i + size]) for i in range(0, len(hosts), size)]
    split: list[tuple[int, ...]] = []
    for chunk in chunks:
        run: list[int] = []
        for h in chunk:
            prev = run[-1] if run else None
            if prev is not None and (
                h in marked or prev in marked or signature.get(h) != signature.get(prev)
            ):
                split.append(tuple(run))
                run = []
            run.append(h)
        split.append(tuple(run))
    return tuple(split) if len(split) <= 2 * max(max_blocks, 1) else tuple(chunks)


def _columns(
    topology: Topology, groups: dict[tuple, list], marked: set[int], *, plot_px: float
) -> _Columns:
    """The block columns (as many as fit ``plot_px`` at :data:`BLOCK_PX` each) and the
    shared-gear positions of ``topology`` (see :class:`_Columns`)."""
    hosts = sorted({d.host for d in topology.devices if d.host is not None})
    blocks = _blocks(hosts, _host_signatures(groups), marked, int(plot_px // BLOCK_PX))
    center = (len(blocks) - 1) / 2
    shared = [d.name for d in topology.devices if d.host is None]
    shared_x = {n: center + (j - (len(shared) - 1) / 2) * 2.0 for j, n in enumerate(shared)}
    block_of = {h: i for i, b in enumerate(blocks) for h in b}
    scale = 0.8 * min(1.0, BLOCK_PX / (plot_px / (len(blocks) + 0.2)))
    return _Columns(blocks, block_of, shared_x, center, scale)


def _block_groups(groups: dict[tuple, list], cols: _Columns) -> dict[tuple, list[tuple]]:
    """The host-level group keys (:func:`link_groups`) of every block group: the same key with
    each host replaced by its block."""
    out: dict[tuple, list[tuple]] = {}
    for key in groups:
        (ha, ka), (hb, kb), kind = key
        ba = cols.block_of.get(ha) if ha is not None else None
        bb = cols.block_of.get(hb) if hb is not None else None
        out.setdefault(((ba, ka), (bb, kb), kind), []).append(key)
    return out


def _class_bends(usual: dict[tuple, tuple[int, float, float]]) -> dict[tuple, float]:
    """A sideways bend (block widths, one of :data:`BENDS`) per link class inside a host, the
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


def _block_name(cols: _Columns, block: int, marked: set[int], width_px: float) -> list[str]:
    """The lines under a block: its name, and for a block of several hosts some of which are
    edited (when too many are edited for each to be a block) which ones, or how many when
    their numbers do not fit ``width_px``."""
    hosts = cols.blocks[block]
    edits = [h for h in hosts if h in marked]
    if not edits or len(hosts) == 1:
        return [cols.name(block)]
    which = f"edited: host{'s' if len(edits) > 1 else ''} {_ranges(edits)}"
    if text_width_px(which, 12) > width_px:
        which = f"{len(edits)} hosts edited"
    return [cols.name(block), which]


def _block_boxes(
    cols: _Columns, frame: _Frame, marked: set[int]
) -> tuple[list[dict], list[dict], _Boxes]:
    """A box per block (a stack of boxes for several hosts), the names under them (``hosts
    0–31``, :func:`_block_name`) and the pixel boxes they take. Blocks with edited hosts are
    drawn and named in vermillion and named first, then the others left to right where they
    fit beside the names placed."""
    edited_blocks = {cols.block_of[h] for h in marked if h in cols.block_of}
    shapes = []
    for i, hosts in enumerate(cols.blocks):
        # a block of several hosts is a stack of boxes: two outlines peek out behind it
        for k in (2, 1) if len(hosts) > 1 else ():
            shapes.append(dict(type="rect", x0=i - 0.42 + 0.025 * k, x1=i + 0.42 + 0.025 * k,
                               y0=-0.55 + 0.07 * k, y1=BOX_TOP + 0.07 * k, layer="below",
                               line=dict(color="#9ca3af", width=1), fillcolor="white"))
        shapes.append(dict(type="rect", x0=i - 0.42, x1=i + 0.42, y0=-0.55, y1=BOX_TOP,
                           line=dict(color=EDITED_COLOR if i in edited_blocks else "#6b7280",
                                     width=2 if i in edited_blocks else 1.5),
                           fillcolor="rgb(246,247,249)", layer="below"))
    taken = _Boxes()
    labels = []
    column_px = frame.width_px / (frame.x1 - frame.x0)
    for i in sorted(range(len(cols.blocks)), key=lambda i: (i not in edited_blocks, i)):
        lines = _block_name(cols, i, marked, column_px)
        cx, cy = frame.px(i, -0.6)
        w = max(text_width_px(t, 12, bold=True) for t in lines)
        box = (cx - w / 2 - 4, cy - 18 * len(lines), cx + w / 2 + 4, cy)
        if not taken.free(box):
            continue
        taken.add(box)
        color = EDITED_COLOR if i in edited_blocks else "#111827"
        labels.append(dict(x=i, y=-0.6, yanchor="top", text="<br>".join(
            f"<b>{t}</b>" if j == 0 else t for j, t in enumerate(lines)),
            showarrow=False, font=dict(size=12, color=color)))
    return shapes, labels, taken


def _group_label(sigs: list[tuple[int, float, float]]) -> str:
    """``8 × 300 GB/s``: a block group's links per host (per host pair between hosts) and their
    bandwidth, ranges (``7–8 × 5–25 GB/s``) where its hosts differ."""
    counts = sorted({s[0] for s in sigs})
    lo, hi = min(s[1] for s in sigs), max(s[2] for s in sigs)
    n = f"{counts[0]}" if len(counts) == 1 else f"{counts[0]}–{counts[-1]}"
    bw = f"{lo:.3g}" if lo == hi else f"{lo:.3g}–{hi:.3g}"
    return f"{n} × {bw} GB/s"


def _drop_units_if_narrow(mids: list[dict], room_px: float) -> None:
    """Labels without `` GB/s`` (the title names the unit) when one would not fit the
    ``room_px`` right of its line inside a block's column: many blocks, narrow columns."""
    if any(text_width_px(m.get("text") or "", 12) > room_px for m in mids):
        for m in mids:
            if m.get("text"):
                m["text"] = m["text"].removesuffix(" GB/s")


def _group_info(
    where: str, kinds: tuple[str, str, str], links: list, per_host: str,
    edited: set[frozenset[str]] | frozenset, sent: float, busy: float, *, planned: bool,
) -> str:
    """The hover of a link group: where, how many links of which kind (``per_host``), the
    first 10 with their GB/s, and with a plan the bytes sent and the busiest link's busy time."""
    ka, kb, kind = kinds
    return (
        f"<b>{where}: {len(links)} {KIND_NAMES.get(kind, kind)} link(s) "
        f"{DEVICE_NAME.get(ka, ka)}–{DEVICE_NAME.get(kb, kb)}</b> ({per_host})<br>"
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


def _group_path(
    cols: _Columns, key: tuple, shared_end: str | None, bend: dict[tuple, float]
) -> tuple[list[tuple[float, float]], tuple[float, float]]:
    """A block group's line (inside a block bent sideways by :func:`_class_bends`; to the shared
    switch up out of the box; to another block over the boxes) and where its midpoint marker
    sits."""
    (ba, ka), (bb, kb), kind = key
    x0, y0 = cols.at(ba, ka)
    x1, y1 = cols.at(bb, kb, shared_end)
    reach = "shared" if ba is None or bb is None else ("same" if ba == bb else "between")
    if reach == "same":
        off = bend.get((ka, kb, kind, "same"), 0.0) * cols.bend_scale
        mid = (x0 + off, (y0 + y1) / 2 + (0.35 if y0 == y1 else 0.0))
        return [(x0, y0), mid, (x1, y1)], mid
    if reach == "shared" and y0 >= max(ROW.values()):  # up out of the box, then to the switch
        return [(x0, y0), (x0, BOX_TOP), (x1, y1)], (x0, (y0 + BOX_TOP) / 2)
    if reach == "between":  # over the boxes between them, not through them
        up = (BOX_TOP + SHARED_Y) / 2
        path = [(x0, y0), (x0 + 0.2, up), (x1 + 0.2, up), (x1, y1)]
        return path, ((x0 + x1) / 2 + 0.2, up)
    return [(x0, y0), (x1, y1)], (x0 + 0.18 * (x1 - x0), y0 + 0.18 * (y1 - y0))


def _group_segments(
    topology: Topology, cols: _Columns, groups: dict[tuple, list], cut: tuple[tuple[str, str], ...],
    traffic: dict[frozenset[str], list], edited: set[frozenset[str]] | frozenset, *,
    usual: dict[tuple, tuple[int, float, float]], busiest: float, planned: bool,
) -> tuple[dict[object, tuple[list, list]], list[dict]]:
    """Every block group as a segment of its line trace (:func:`_line_key`) and its midpoint
    record with its label (:func:`_group_label`); a block pair with cut links gets a midpoint
    only."""
    dev = {d.name: d for d in topology.devices}
    bend = _class_bends(usual)
    segs: dict[object, tuple[list, list]] = {}
    mids: list[dict] = []
    for key, host_keys in _block_groups(groups, cols).items():
        (ba, ka), (bb, kb), kind = key
        links = [k for hk in host_keys for k in groups[hk]]
        shared_end = next((n for k in links for n in (k.src, k.dst) if dev[n].host is None),
                          None)
        path, (mx, my) = _group_path(cols, key, shared_end, bend)
        if kind == "cut":  # halfway between the ends, off the groups' own midpoints
            ends = [(a, b) for a, b in cut if _block_ends(cols, dev, a, b) == key[:2]]
            (x0, y0), (x1, y1) = (cols.at(*e, n) for e, n in zip(key[:2], ends[0]))
            mids.append(dict(x=(x0 + x1) / 2, y=(y0 + y1) / 2, cut=ends, links=[]))
            continue
        pairs = {_pair(k.src, k.dst) for k in links}
        is_edited = bool(pairs & set(edited))
        busy = max((traffic.get(p, (0.0, 0.0))[1] for p in pairs), default=0.0)
        sent = sum(traffic.get(p, (0.0, 0.0))[0] for p in pairs)
        skey = _line_key(is_edited, kind, busy if busy > 0 else None, busiest, planned=planned)
        xs, ys = segs.setdefault(skey, ([], []))
        xs += [p[0] for p in path] + [None]
        ys += [p[1] for p in path] + [None]
        text = _group_label([_signature(groups[hk]) for hk in host_keys])
        where = " and ".join(cols.name(b) for b in dict.fromkeys((ba, bb)) if b is not None)
        reach = "per host pair" if None not in (ba, bb) and ba != bb else "per host"
        info = _group_info(where, (ka, kb, kind), links, f"{text} {reach}", edited, sent, busy,
                           planned=planned)
        mids.append(dict(x=mx, y=my, busy=busy, info=info, text=text, edited=is_edited,
                         kind=kind, data=["link", links[0].src, links[0].dst], cut=None,
                         block=ba if bb in (None, ba) else None))
    return segs, mids


def _group_lines(
    fig: go.Figure, segs: dict[object, tuple[list, list]], *, planned: bool, thin: float
) -> None:
    """One line trace per key (as :func:`_link_lines`), widths times ``thin`` (at most 1) so
    many blocks' lines stay thinner than a block's column."""
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


def _place_labels(
    mids: list[dict], taken: _Boxes, topology: Topology, cols: _Columns, frame: _Frame, *,
    marker_px: float,
) -> list[tuple[float, float, str]]:
    """Labels (x, y, text in data coordinates) for every group and the cut ones, each right,
    left, above or below its midpoint where it overlaps nothing ``taken`` (the block names),
    no device marker (``marker_px`` wide) and no earlier label: inside its block's column (box
    and half the gaps beside it) if it can, else inside the plot; edited groups first, then
    left to right."""
    kinds = {d.kind for d in topology.devices if d.host is not None}
    for b in range(len(cols.blocks)):
        for kind in kinds:
            mx, my = frame.px(*cols.at(b, kind))
            taken.add((mx - marker_px / 2, my - marker_px / 2, mx + marker_px / 2,
                       my + marker_px / 2))
    texts: list[tuple[float, float, str]] = []
    for m in sorted(mids, key=lambda m: (not m.get("edited"), m["x"])):
        label = m.get("text") or ("cut" if m.get("cut") else "")
        if not label:
            continue
        mx, my = frame.px(m["x"], m["y"])
        w = text_width_px(label, 12)
        home = m.get("block")  # inside its own block's column if it can, else in the plot
        lo, hi = (0.0, frame.width_px) if home is None else (
            frame.px(home - 0.5, 0)[0], frame.px(home + 0.5, 0)[0])
        boxes = [(dx, dy, (mx + dx, my + dy - 8, mx + dx + w, my + dy + 8))
                 for dx, dy in ((6.0, 0.0), (-6.0 - w, 0.0), (-w / 2, 16.0), (-w / 2, -16.0))]
        fits = [b for b in boxes if b[2][0] >= lo and b[2][2] <= hi] + [
            b for b in boxes if b[2][0] >= 0 and b[2][2] <= frame.width_px]
        for dx, dy, box in fits:  # right, left, above, below the midpoint
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
    busiest: float, per_block_px: float,
) -> None:
    """The clickable group midpoints (on the busy-time scale in ms when ``coloured``), the cut
    groups' ``x`` markers, and the placed label texts."""
    links_m = [m for m in mids if not m.get("cut")]
    marker: dict = dict(size=max(4.0, min(11.0, per_block_px * 0.4)), symbol="square",
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
    """One marker per block and device kind (clicks select the block's first of that kind)."""
    kinds: dict[str, dict[int | None, list[str]]] = {}
    for d in topology.devices:
        block = cols.block_of.get(d.host) if d.host is not None else None
        kinds.setdefault(d.kind, {}).setdefault(block, []).append(d.name)
    for kind, per in kinds.items():
        spots = [(cols.at(b, kind, ns[0]), b, ns) for b, ns in per.items()]
        per_host = Counter(d.host for d in topology.devices if d.kind == kind).most_common(1)
        fig.add_scatter(
            x=[s[0][0] for s in spots], y=[s[0][1] for s in spots], mode="markers",
            name=DEVICE_NAME.get(kind, kind) + (f" (×{per_host[0][1]} per host)"
                                                if kind in ("gpu", "nic") else ""),
            marker=dict(size=marker_px if kind != "network_switch" else 22,
                        symbol=SYMBOL.get(kind), color=DEVICE_COLOR.get(kind, "#555"),
                        line=dict(color="white", width=1 if marker_px > 6 else 0)),
            customdata=[["device", ns[0]] for _, _, ns in spots],
            hovertext=[(f"{cols.name(b)}: " if b is not None else "")
                       + f"{len(ns)} × {DEVICE_NAME.get(kind, kind)}: {ns[0]}"
                       + (f" … {ns[-1]}" if len(ns) > 1 else "") + "<br><i>click to select the "
                       "first</i>" for _, b, ns in spots],
            hoverinfo="text",
        )


def _block_ends(
    cols: _Columns, dev: dict, a: str, b: str
) -> tuple[tuple[int | None, str], tuple[int | None, str]]:
    """The (block, device kind) of both ends of a link in the order of a group key: blocks
    before shared gear, then by kind."""
    ends = [(cols.block_of.get(dev[n].host) if dev[n].host is not None else None, dev[n].kind)
            for n in (a, b)]
    first, second = sorted(ends, key=lambda e: (e[0] is None, e[0] or 0, e[1]))
    return first, second


def _agg_selected_xy(
    selected: tuple[str, ...], mids: list[dict], topology: Topology, cols: _Columns
) -> tuple[float, float] | None:
    """Where the selection's ring goes: its group's midpoint, its device's marker, or the
    midpoint of the first group between the same (block, kind) ends; None when not drawn."""
    dev = {d.name: d for d in topology.devices}
    links_m = [m for m in mids if not m.get("cut")]
    spot = next((m for m in links_m if tuple(m["data"][1:]) == tuple(selected[1:])), None)
    if spot:
        return spot["x"], spot["y"]
    if selected[0] == "device" and selected[1] in dev:
        d = dev[selected[1]]
        return cols.at(cols.block_of.get(d.host) if d.host is not None else None, d.kind, d.name)
    if len(selected) == 3 and selected[1] in dev and selected[2] in dev:
        ends = _block_ends(cols, dev, selected[1], selected[2])
        pool = [m for m in mids if m.get("cut")] if selected[0] == "cut" else links_m
        spot = next((m for m in pool if _block_ends(
            cols, dev, *(m["cut"][0] if m.get("cut") else m["data"][1:])) == ends), None)
        return (spot["x"], spot["y"]) if spot else None
    return None


def _blocks_words(blocks: tuple[tuple[int, ...], ...]) -> str:
    """How the title names the blocks: ``in 4 blocks of 32 alike hosts`` (``of up to`` when
    their sizes differ), or ``, one box per host``."""
    sizes = {len(b) for b in blocks}
    if max(sizes) == 1:
        return ", one box per host"
    up_to = "up to " if len(sizes) > 1 else ""
    return f" in {len(blocks)} blocks of {up_to}{max(sizes)} alike hosts"


def _marked_hosts(
    topology: Topology, edited: set[frozenset[str]] | frozenset, cut: tuple[tuple[str, str], ...]
) -> set[int]:
    """The hosts an edited or cut link touches: each is drawn as a block of its own."""
    host = {d.name: d.host for d in topology.devices}
    names = {n for pair in edited for n in pair} | {n for pair in cut for n in pair}
    return {host[n] for n in names if host.get(n) is not None}


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
    """The cluster with hosts in blocks and links aggregated: per block, one marker per device
    kind and one line per link class (to the shared switch, inside the host, or to another
    block), labelled with its links per host and their GB/s (``8 × 300 GB/s``).

    As many blocks as fit ``width_px`` at :data:`BLOCK_PX` each (one host each when they all
    fit); an edited host, a host whose links differ, or one with a cut link is a block of its
    own, so its label names it. Each class's usual value is also named in the legend
    (``NVLink GPU–NVSwitch: 8 × 300 GB/s per host``). Midpoints carry the first link of their
    group as ``customdata`` (``["link", src, dst]``) and list every link on hover; with
    ``plan`` the lines are coloured by their busiest link's busy time.
    """
    dev = {d.name: d for d in topology.devices}
    traffic = _link_traffic(plan)
    groups, usual = link_groups(topology)
    busiest = max((v[1] for v in traffic.values()), default=0.0)
    right = 140 if plan is not None and busiest > 0 else 50  # room for the colour bar
    cols = _columns(topology, groups, _marked_hosts(topology, edited, cut),
                    plot_px=width_px - 50 - right)
    for a, b in cut:  # cut links are gone from the topology: mark where their group sits
        if a in dev and b in dev:
            groups.setdefault((*_ends(topology, a, b), "cut"), [])
    n = len(cols.blocks)
    xr, yr = (-0.6, n - 0.4), (-1.2, SHARED_Y + 0.8)
    frame = _Frame(xr[0], xr[1], yr[0], yr[1], width_px - 50 - right, PLOT_HEIGHT_PX)
    per_block_px = frame.width_px / (xr[1] - xr[0])
    fig = go.Figure()
    shapes, labels, taken = _block_boxes(cols, frame, _marked_hosts(topology, edited, cut))
    segs, mids = _group_segments(topology, cols, groups, cut, traffic, edited, usual=usual,
                                 busiest=busiest, planned=plan is not None)
    _group_lines(fig, segs, planned=plan is not None, thin=min(1.0, per_block_px / 40))
    class_legend(fig, usual, coloured=plan is not None)  # what every host has, named once
    marker_px = max(4.0, min(15.0, per_block_px * 0.6))
    _drop_units_if_narrow(mids, per_block_px * (0.5 - DEVICE_DX) - 6)
    texts = _place_labels(mids, taken, topology, cols, frame, marker_px=marker_px)
    fig.update_layout(shapes=shapes, annotations=labels)
    _group_markers(fig, mids, texts, coloured=plan is not None and busiest > 0, busiest=busiest,
                   per_block_px=per_block_px)
    _agg_devices(fig, topology, cols, marker_px)
    if selected:
        xy = _agg_selected_xy(selected, mids, topology, cols)
        if xy is not None:
            _selected_ring(fig, xy)
    default = f"{topology.name}: {topology.nodes} hosts × {topology.gpus_per_node} GPUs" + (
        _blocks_words(cols.blocks) + "; labels: links per host × GB/s"
    )
    rows = 22 * (len(usual) + 1)  # legend rows under the plot
    return _topology_style(
        fig, title or default, x=xr, y=yr, height=480 + rows,
        margin=dict(l=50, r=right, t=90, b=60 + rows),
    )
