"""Cluster topology: GPUs, switches and NICs joined by links with per-direction bandwidth.

A topology is a frozen description; :func:`to_graph` turns it into a networkx graph for routing.
GPUs are grouped into hosts (nodes). The device mesh the planner uses has two levels:
``inter`` (across hosts) and ``intra`` (GPUs inside a host); see :mod:`taps_core.mesh`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import networkx as nx
import numpy as np

from taps_core.errors import InvalidInputError, check_positive
from taps_core.limits import check, check_size

LINK_KINDS = ("nvlink", "pcie", "network")
DEVICE_KINDS = ("gpu", "nvswitch", "pcie_switch", "nic", "network_switch")
DEFAULT_EFFICIENCY = {"nvlink": 0.8, "pcie": 0.8, "network": 0.8}


@dataclass(frozen=True)
class GpuSpec:
    """One accelerator model: memory (bytes), dense peak (FLOP/s) and HBM bandwidth (bytes/s)."""

    name: str
    memory_bytes: float
    peak_flops: float
    hbm_bandwidth_Bps: float


A100_80GB = GpuSpec("A100-SXM4-80GB", 80 * 2**30, 312e12, 2.039e12)
A100_40GB_PCIE = GpuSpec("A100-PCIe-40GB", 40 * 2**30, 312e12, 1.555e12)
H100_80GB = GpuSpec("H100-SXM5-80GB", 80 * 2**30, 989e12, 3.35e12)


@dataclass(frozen=True)
class Device:
    """A vertex of the cluster graph: a GPU, a switch or a NIC; ``host`` is None for shared gear."""

    name: str
    kind: str
    host: int | None = None


@dataclass(frozen=True)
class Link:
    """A full-duplex link; ``bandwidth_Bps`` is per direction, ``latency_s`` per traversal."""

    src: str
    dst: str
    kind: str
    bandwidth_Bps: float
    latency_s: float


@dataclass(frozen=True)
class Topology:
    """A whole cluster. Build one with a preset, :func:`build_cluster` or :func:`from_dict`."""

    name: str
    gpu: GpuSpec
    devices: tuple[Device, ...]
    links: tuple[Link, ...]
    efficiency: tuple[tuple[str, float], ...] = tuple(DEFAULT_EFFICIENCY.items())
    compute_efficiency: float = 0.5
    gpus: tuple[str, ...] = field(init=False)
    host_count: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        gpus = sorted(
            (d for d in self.devices if d.kind == "gpu"),
            key=lambda d: d.host if d.host is not None else -1,
        )
        # stable sort keeps the file's order of GPUs within a host: that order is the local rank
        object.__setattr__(self, "gpus", tuple(d.name for d in gpus))
        object.__setattr__(self, "host_count", len({d.host for d in gpus}))

    @property
    def nodes(self) -> int:
        """Number of hosts."""
        return self.host_count

    @property
    def gpus_per_node(self) -> int:
        """GPUs in each host (validated equal for every host)."""
        return len(self.gpus) // max(self.nodes, 1)

    @property
    def num_gpus(self) -> int:
        return len(self.gpus)

    def efficiency_of(self, kind: str) -> float:
        """Fraction of a link kind's peak bandwidth that collectives reach."""
        return dict(self.efficiency).get(kind, 1.0)

    def link(self, src: str, dst: str) -> Link:
        """The link joining two devices, in either direction."""
        for link in self.links:
            if {link.src, link.dst} == {src, dst}:
                return link
        raise InvalidInputError("link", f"{src}-{dst}", "an existing link between two devices")

    def with_link(
        self,
        src: str,
        dst: str,
        *,
        bandwidth_Bps: float | None = None,
        latency_s: float | None = None,
    ) -> Topology:
        """A copy with one link's bandwidth or latency changed (e.g. a degraded NIC)."""
        old = self.link(src, dst)
        new = replace(
            old,
            bandwidth_Bps=old.bandwidth_Bps if bandwidth_Bps is None else bandwidth_Bps,
            latency_s=old.latency_s if latency_s is None else latency_s,
        )
        links = tuple(new if link == old else link for link in self.links)
        return validate(replace(self, links=links))

    def without_link(self, src: str, dst: str) -> Topology:
        """A copy with one link removed (e.g. a cut NVLink bridge); must stay connected."""
        old = self.link(src, dst)
        return validate(replace(self, links=tuple(k for k in self.links if k != old)))


def validate(topology: Topology) -> Topology:
    """Check names, kinds, bandwidths, connectivity and equal hosts; return the topology."""
    check_size("devices", len(topology.devices), field="devices")
    check_size("links", len(topology.links), field="links")
    names = [d.name for d in topology.devices]
    if len(set(names)) != len(names):
        dup = next(n for n, c in Counter(names).items() if c > 1)
        raise InvalidInputError("devices[].name", dup, "unique")
    for d in topology.devices:
        if d.kind not in DEVICE_KINDS:
            raise InvalidInputError(f"devices[{d.name}].kind", d.kind, f"one of {DEVICE_KINDS}")
        if d.kind == "gpu" and d.host is None:
            raise InvalidInputError(f"devices[{d.name}].host", None, "a host index for a GPU")
    if not topology.gpus:
        raise InvalidInputError("devices", "no GPU", "at least one device of kind 'gpu'")
    known = set(names)
    for link in topology.links:
        where = f"links[{link.src}-{link.dst}]"
        for end in (link.src, link.dst):
            if end not in known:
                raise InvalidInputError(f"{where}.src/dst", end, "the name of a listed device")
        if link.src == link.dst:
            raise InvalidInputError(f"{where}", link.src, "a link between two different devices")
        if link.kind not in LINK_KINDS:
            raise InvalidInputError(f"{where}.kind", link.kind, f"one of {LINK_KINDS}")
        check("bandwidth_Bps", link.bandwidth_Bps, field=f"{where}.bandwidth_Bps")
        check("latency_s", link.latency_s, field=f"{where}.latency_s")
    for kind, eff in topology.efficiency:
        if not 0 < eff <= 1:
            raise InvalidInputError(f"efficiency.{kind}", eff, "in (0, 1]")
    if not 0 < topology.compute_efficiency <= 1:
        raise InvalidInputError("compute_efficiency", topology.compute_efficiency, "in (0, 1]")
    for key in ("memory_bytes", "peak_flops", "hbm_bandwidth_Bps"):
        check(f"gpu.{key}", getattr(topology.gpu, key))
    per_host = Counter(d.host for d in topology.devices if d.kind == "gpu")
    check_size("hosts", len(per_host), field="hosts")
    check_size("gpus", sum(per_host.values()), field="GPUs")
    check_size("gpus_per_host", max(per_host.values()), field="GPUs on one host")
    if len(set(per_host.values())) > 1:
        raise InvalidInputError("devices", per_host, "the same number of GPUs on every host")
    graph = to_graph(topology)
    if not nx.is_connected(graph):
        parts = sorted(nx.connected_components(graph), key=len)
        raise InvalidInputError(
            "links", f"{sorted(parts[0])[:3]} cut off", "a connected cluster (add a link)"
        )
    return topology


def to_graph(topology: Topology) -> nx.Graph:
    """Undirected networkx graph of devices; edges carry the :class:`Link` as ``link``."""
    graph = nx.Graph()
    for d in topology.devices:
        graph.add_node(d.name, kind=d.kind, host=d.host)
    for link in topology.links:
        # routing weight: fewest hops first, then the faster link (1 GB/s = +1 hop)
        weight = 1.0 + 1e9 / link.bandwidth_Bps * 1e-3
        graph.add_edge(link.src, link.dst, link=link, weight=weight)
    return graph


def build_cluster(
    nodes: int,
    gpus_per_node: int,
    *,
    name: str | None = None,
    gpu: GpuSpec = A100_80GB,
    intra: str = "nvswitch",
    intra_bandwidth_Bps: float = 300e9,
    intra_latency_s: float = 1e-6,
    nvlink_pairs_bandwidth_Bps: float | None = None,
    pcie_bandwidth_Bps: float = 32e9,
    nics_per_node: int = 8,
    nic_bandwidth_Bps: float = 25e9,
    inter_latency_s: float = 2.5e-6,
    efficiency: dict[str, float] | None = None,
    compute_efficiency: float = 0.5,
) -> Topology:
    """Any nodes x GPUs cluster: NVSwitch or PCIe inside hosts, NICs to one network switch.

    ``intra='nvswitch'`` joins every GPU to an NVSwitch with NVLink of ``intra_bandwidth_Bps``;
    ``intra='pcie'`` joins them to a PCIe switch at ``pcie_bandwidth_Bps``, optionally with
    NVLink bridges between GPU pairs (0-1, 2-3, ...). Each GPU reaches NIC
    ``gpu * nics_per_node // gpus_per_node`` over PCIe; NICs meet at a non-blocking switch.
    """
    check("hosts", nodes, field="nodes")
    check("gpus_per_host", gpus_per_node, field="gpus_per_node")
    check("gpus", nodes * gpus_per_node, field="nodes x gpus_per_node")
    check("gpus_per_host", nics_per_node, field="nics_per_node")
    if intra not in ("nvswitch", "pcie"):
        raise InvalidInputError("intra", intra, "'nvswitch' or 'pcie'")
    if nics_per_node > gpus_per_node:
        raise InvalidInputError(
            "nics_per_node", nics_per_node, f"<= gpus_per_node ({gpus_per_node})"
        )
    for label, value in (
        ("intra_bandwidth_Bps", intra_bandwidth_Bps),
        ("pcie_bandwidth_Bps", pcie_bandwidth_Bps),
        ("nic_bandwidth_Bps", nic_bandwidth_Bps),
    ):
        check("bandwidth_Bps", value, field=label)
    devices: list[Device] = []
    links: list[Link] = []
    multi = nodes > 1
    if multi:
        devices.append(Device("net", "network_switch"))
    for h in range(nodes):
        hub = f"n{h}.nvswitch" if intra == "nvswitch" else f"n{h}.pcie"
        devices.append(Device(hub, "nvswitch" if intra == "nvswitch" else "pcie_switch", h))
        for g in range(gpus_per_node):
            gname = f"n{h}.gpu{g}"
            devices.append(Device(gname, "gpu", h))
            if intra == "nvswitch":
                links.append(Link(gname, hub, "nvlink", intra_bandwidth_Bps, intra_latency_s))
            else:
                links.append(Link(gname, hub, "pcie", pcie_bandwidth_Bps, intra_latency_s))
        if intra == "pcie" and nvlink_pairs_bandwidth_Bps:
            for g in range(0, gpus_per_node - 1, 2):
                links.append(
                    Link(
                        f"n{h}.gpu{g}",
                        f"n{h}.gpu{g + 1}",
                        "nvlink",
                        nvlink_pairs_bandwidth_Bps,
                        intra_latency_s,
                    )
                )
        if multi:
            for k in range(nics_per_node):
                nic = f"n{h}.nic{k}"
                devices.append(Device(nic, "nic", h))
                links.append(Link(nic, "net", "network", nic_bandwidth_Bps, inter_latency_s))
            if intra == "pcie":  # NICs sit on the host's PCIe switch, shared with the GPUs
                for k in range(nics_per_node):
                    links.append(
                        Link(f"n{h}.nic{k}", hub, "pcie", pcie_bandwidth_Bps, intra_latency_s)
                    )
            else:  # GPUDirect: each GPU reaches its NIC rail over its own PCIe link
                for g in range(gpus_per_node):
                    nic = f"n{h}.nic{g * nics_per_node // gpus_per_node}"
                    links.append(
                        Link(f"n{h}.gpu{g}", nic, "pcie", pcie_bandwidth_Bps, intra_latency_s)
                    )
    eff = dict(DEFAULT_EFFICIENCY if efficiency is None else efficiency)
    return validate(
        Topology(
            name=name or f"custom:{nodes}x{gpus_per_node}",
            gpu=gpu,
            devices=tuple(devices),
            links=tuple(links),
            efficiency=tuple(sorted(eff.items())),
            compute_efficiency=compute_efficiency,
        )
    )


# ---- the network knob: one host's inter-node bandwidth, read and rescaled -------------------


def node_inter_bandwidth(topology: Topology) -> float:
    """Mean over hosts of the summed bandwidth (bytes/s) of a host's network links."""
    hosts = {d.name: d.host for d in topology.devices}
    per_host: dict[int, float] = {}
    for link in topology.links:
        if link.kind != "network":
            continue
        host = hosts[link.src] if hosts[link.src] is not None else hosts[link.dst]
        if host is not None:
            per_host[host] = per_host.get(host, 0.0) + link.bandwidth_Bps
    if not per_host:
        raise InvalidInputError(
            "topology", topology.name, "a cluster with network links between hosts (nodes >= 2)"
        )
    return float(np.mean(list(per_host.values())))


def scale_inter_bandwidth(topology: Topology, node_bandwidth_Bps: float) -> Topology:
    """A copy whose network links are scaled so a host's NICs add up to ``node_bandwidth_Bps``.

    Examples
    --------
    >>> from taps_core.cluster.presets import preset
    >>> t = scale_inter_bandwidth(preset("dgx-a100:2"), 100e9)  # 8 NICs x 12.5 GB/s
    >>> round(node_inter_bandwidth(t) / 1e9, 6)
    100.0
    """
    check_positive("node_bandwidth_Bps", node_bandwidth_Bps)
    factor = node_bandwidth_Bps / node_inter_bandwidth(topology)
    links = tuple(
        replace(k, bandwidth_Bps=k.bandwidth_Bps * factor) if k.kind == "network" else k
        for k in topology.links
    )
    return validate(replace(topology, links=links))


# ---- parts of a cluster: some of its hosts, and the same device on another host ----------


def sub_topology(topology: Topology, hosts: tuple[int, ...]) -> Topology:
    """The cluster restricted to some hosts (shared switches kept)."""
    keep = {d.name for d in topology.devices if d.host is None or d.host in hosts}
    devices = tuple(d for d in topology.devices if d.name in keep)
    links = tuple(k for k in topology.links if k.src in keep and k.dst in keep)
    sub = replace(
        topology, name=f"{topology.name}[hosts {hosts[0]}-{hosts[-1]}]", devices=devices,
        links=links,
    )
    return sub


def host_renamer(topology: Topology, shift: int, g: int) -> Callable[[str], str]:
    """Map a device name of hosts 0.. to the same device on hosts shift.. (by position)."""
    if shift == 0:
        return lambda name: name
    by_host: dict[int | None, list[str]] = {}
    for d in topology.devices:
        by_host.setdefault(d.host, []).append(d.name)
    where = {}
    for host, names in by_host.items():
        if host is None:
            continue
        for pos, name in enumerate(names):
            where[name] = (host, pos)
    lookup = {(h, pos): n for n, (h, pos) in where.items()}

    def rename(name: str) -> str:
        if name not in where:
            return name  # a shared switch
        h, pos = where[name]
        return lookup.get((h + shift, pos), name)

    return rename
