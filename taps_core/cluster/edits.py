"""Edits of a cluster by name: a link's bandwidth or latency changed, a link cut or added, a
host added. Spelled ``a~b:bw=5:lat=2;c~d:cut;a~c:add:kind=pcie:bw=32;+host`` (GB/s, µs), the
form the dashboard keeps in its URL; each edit is applied through Topology's own checks."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from taps_core.cluster.presets import MAX_PRESET_NODES
from taps_core.cluster.topology import Link, Topology, validate
from taps_core.errors import InvalidInputError, TapsError, check_positive
from taps_core.units import GB

MAX_EDITS = 200  # edits in one spec (a URL value)
EDIT_GBPS = (0.001, 10_000.0)  # an edited or added link's bandwidth range, GB/s
EDIT_LATENCY_US = (0.0, 1e6)  # an edited or added link's latency range, µs


@dataclass(frozen=True)
class LinkEdit:
    """One edited link: new bandwidth (GB/s) and/or latency (µs), or cut; or a new link
    (``add``, of ``kind``). ``src == "+host"`` adds a copy of the last host instead."""

    src: str
    dst: str
    bandwidth_GBps: float | None = None
    latency_us: float | None = None
    cut: bool = False
    add: bool = False
    kind: str = "network"

    def text(self) -> str:
        if self.src == ADD_HOST:
            return ADD_HOST
        head = f"{self.src}~{self.dst}"
        if self.cut:
            return head + ":cut"
        parts = [head, f"add:kind={self.kind}"] if self.add else [head]
        if self.bandwidth_GBps is not None:
            parts.append(f"bw={self.bandwidth_GBps:g}")
        if self.latency_us is not None:
            parts.append(f"lat={self.latency_us:g}")
        return ":".join(parts)


ADD_HOST = "+host"
LINK_KINDS = ("nvlink", "pcie", "network")


def parse_edits(text: str) -> tuple[LinkEdit, ...]:
    """``a~b:bw=5:lat=2;c~d:cut;a~c:add:kind=pcie:bw=32;+host`` -> edits.

    InvalidInputError names the bad entry; bandwidths and latencies must be finite and in the
    editor's ranges.
    """
    out = []
    items = [s for s in (s.strip() for s in text.split(";")) if s]
    if len(items) > MAX_EDITS:
        raise InvalidInputError("edits", f"{len(items)} edits", f"at most {MAX_EDITS}")
    for item in items:
        if item == ADD_HOST:
            out.append(LinkEdit(ADD_HOST, ""))
            continue
        head, *opts = item.split(":")
        src, sep, dst = head.partition("~")
        if not sep or not src or not dst:
            raise InvalidInputError("edits", item, "'src~dst:bw=GBps:lat=us' or 'src~dst:cut'")
        kw: dict[str, Any] = {}
        for opt in opts:
            key, _, raw = opt.partition("=")
            if key in ("cut", "add") and not raw:
                kw[key] = True
            elif key == "kind" and raw in LINK_KINDS:
                kw["kind"] = raw
            elif key in ("bw", "lat"):
                try:
                    value = float(raw)
                except ValueError:
                    raise InvalidInputError(f"edits {head} {key}", raw, "a number") from None
                lo, hi = EDIT_GBPS if key == "bw" else EDIT_LATENCY_US
                if not lo <= value <= hi:
                    raise InvalidInputError(f"edits {head} {key}", raw, f"in [{lo:g}, {hi:g}]")
                kw["bandwidth_GBps" if key == "bw" else "latency_us"] = value
            else:
                raise InvalidInputError(f"edits {head}", opt, "bw=..., lat=... or cut")
        out.append(LinkEdit(src, dst, **kw))
    return tuple(out)


def with_edit(
    edits: tuple[LinkEdit, ...], new: LinkEdit | None, pair: tuple[str, str]
) -> tuple[LinkEdit, ...]:
    """``edits`` with the edit of link ``pair`` replaced by ``new`` (None: restored).

    Added hosts and links stay first, so edits of their links apply after they exist.
    """
    key = frozenset(pair)
    kept = [e for e in edits if e.add or e.src == ADD_HOST or frozenset((e.src, e.dst)) != key]
    if new is not None:
        kept.append(new)
    return tuple(sorted(kept, key=lambda e: not (e.add or e.src == ADD_HOST)))


def edits_text(edits: tuple[LinkEdit, ...]) -> str:
    return ";".join(e.text() for e in edits)


def apply_edits(topology: Topology, edits: tuple[LinkEdit, ...]) -> tuple[Topology, list[str]]:
    """Apply edits one by one; an edit the engine rejects is skipped and its error returned."""
    topology, _, errors = apply_edits_reporting(topology, edits)
    return topology, errors


def apply_edits_reporting(
    topology: Topology, edits: tuple[LinkEdit, ...]
) -> tuple[Topology, tuple[LinkEdit, ...], list[str]]:
    """:func:`apply_edits`, also returning the edits that were applied (for describing them)."""
    errors = []
    applied: list[LinkEdit] = []
    for e in edits:
        try:
            if e.src == ADD_HOST:
                topology = add_host(topology)
            elif e.add:
                topology = add_link(topology, e)
            elif e.cut:
                topology = topology.without_link(e.src, e.dst)
            else:
                bw = None if e.bandwidth_GBps is None else e.bandwidth_GBps * GB
                lat = None if e.latency_us is None else e.latency_us * 1e-6
                if bw is not None:
                    check_positive(f"link {e.src}-{e.dst} bandwidth (GB/s)", bw)
                if lat is not None:
                    check_positive(f"link {e.src}-{e.dst} latency (µs)", lat, allow_zero=True)
                topology = topology.with_link(e.src, e.dst, bandwidth_Bps=bw, latency_s=lat)
            applied.append(e)
        except TapsError as err:
            errors.append(f"edit {e.text()} skipped: {err}")
    return topology, tuple(applied), errors


def edit_words(edit: LinkEdit) -> str:
    """One edit by value, for titles: ``n0.nic0~leaf0 5 GB/s``, ``n0~n1 cut``, ``+1 host``."""
    if edit.src == ADD_HOST:
        return "+1 host"
    head = f"{edit.src}~{edit.dst}"
    if edit.cut:
        return f"{head} cut"
    values = [f"{edit.bandwidth_GBps:g} GB/s"] if edit.bandwidth_GBps is not None else []
    values += [f"{edit.latency_us:g} µs"] if edit.latency_us is not None else []
    added = f"+ {edit.kind} link " if edit.add else ""
    return f"{added}{head} {' '.join(values)}".rstrip()


def describe_edits(edits: tuple[LinkEdit, ...], most: int = 3) -> str:
    """The edits by value (the first ``most``, then how many more), for a title."""
    words = [edit_words(e) for e in edits]
    hosts = words.count("+1 host")
    words = [w for w in words if w != "+1 host"] + ([f"+{hosts} host(s)"] if hosts else [])
    if len(words) > most:
        return ", ".join(words[:most]) + f" and {len(words) - most} more edit(s)"
    return ", ".join(words)


def add_host(topology: Topology) -> Topology:
    """A copy of the last host (its devices, inner links and links to shared gear) appended."""
    last = max(d.host for d in topology.devices if d.host is not None)
    new = last + 1
    if topology.nodes >= MAX_PRESET_NODES:
        raise InvalidInputError("hosts", topology.nodes + 1, f"at most {MAX_PRESET_NODES}")
    old_prefix, new_prefix = f"n{last}.", f"n{new}."

    def rename(name: str) -> str:
        if name.startswith(old_prefix):
            return new_prefix + name[len(old_prefix) :]
        return f"{name}.h{new}"

    mine = {d.name for d in topology.devices if d.host == last}
    devices = [
        replace(d, name=rename(d.name), host=new) for d in topology.devices if d.host == last
    ]
    links = [
        replace(
            k,
            src=rename(k.src) if k.src in mine else k.src,
            dst=rename(k.dst) if k.dst in mine else k.dst,
        )
        for k in topology.links
        if k.src in mine or k.dst in mine
    ]
    return validate(
        replace(
            topology,
            devices=(*topology.devices, *devices),
            links=(*topology.links, *links),
        )
    )


def add_link(topology: Topology, e: LinkEdit) -> Topology:
    """``topology`` plus a new link ``e.src`` - ``e.dst`` (bandwidth required)."""
    names = {d.name for d in topology.devices}
    for end in (e.src, e.dst):
        if end not in names:
            raise InvalidInputError("new link end", end, "a device of the cluster")
    if e.bandwidth_GBps is None:
        raise InvalidInputError(f"new link {e.src}-{e.dst} bandwidth", None, "given (bw=GB/s)")
    if any({k.src, k.dst} == {e.src, e.dst} for k in topology.links):
        raise InvalidInputError(f"new link {e.src}-{e.dst}", "exists", "a pair not yet linked")
    lat = (e.latency_us if e.latency_us is not None else 2.0) * 1e-6
    link = Link(e.src, e.dst, e.kind, e.bandwidth_GBps * GB, lat)
    return validate(replace(topology, links=(*topology.links, link)))
