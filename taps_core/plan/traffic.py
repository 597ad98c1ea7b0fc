"""Where a plan's bytes go: per-link traffic split by op kind, and GPU-to-GPU flows.

:func:`taps_core.plan.evaluate.evaluate` adds every phase's routed load into one per-link total. The
dashboard also wants *which ops* load a link and *which GPU sends to which*, so this module
replays the same phases through the same :class:`~taps_core.cluster.links.LinkModel` patterns,
keeping the op kind apart. The totals therefore match ``plan.links`` exactly.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from taps_core.cluster.links import LinkModel
from taps_core.cluster.topology import Topology, host_renamer
from taps_core.errors import InvalidInputError
from taps_core.plan.records import Plan


@dataclass(frozen=True)
class LinkBreakdown:
    """Per directed link bytes and busy seconds, one row per op kind.

    ``links[j]`` is ``(src, dst, kind, bandwidth_Bps)`` of a link that carries traffic;
    ``bytes[i, j]`` is what op kind ``op_kinds[i]`` sends over it per step and
    ``busy_s[i, j]`` that load over the link's effective capacity (bandwidth x efficiency).
    """

    links: tuple[tuple[str, str, str, float], ...]
    op_kinds: tuple[str, ...]
    bytes: np.ndarray  # (op kinds, links)
    busy_s: np.ndarray  # (op kinds, links)

    @property
    def total_bytes(self) -> np.ndarray:
        """Bytes per link over all op kinds (equals ``LinkTraffic.bytes``)."""
        return self.bytes.sum(axis=0)

    @property
    def total_busy_s(self) -> np.ndarray:
        """Busy seconds per link over all op kinds (equals ``LinkTraffic.busy_time_s``)."""
        return self.busy_s.sum(axis=0)


def _check_same_cluster(plan: Plan, topology: Topology) -> None:
    if (plan.nodes, plan.gpus_per_node) != (topology.nodes, topology.gpus_per_node):
        raise InvalidInputError(
            "topology",
            topology.name,
            f"the {plan.nodes}x{plan.gpus_per_node} cluster the plan was made for",
        )


def link_traffic_by_op_kind(
    plan: Plan, topology: Topology, links: LinkModel | None = None
) -> LinkBreakdown:
    """Split each link's traffic by the kind of op whose phases put it there.

    Parameters
    ----------
    plan : Plan
        A plan evaluated on ``topology`` (or on one with the same devices and links).
    topology : Topology
        The cluster whose links are loaded.
    links : LinkModel, optional
        A routed model of ``topology`` to reuse.

    Returns
    -------
    LinkBreakdown
        Only links with traffic, in the link model's order; op kinds in first-seen order.

    Examples
    --------
    >>> from taps_core.models import load_model_config, build_graph
    >>> from taps_core.cluster.presets import preset
    >>> from taps_core.search.planner import search
    >>> topo = preset("dgx-a100:2")
    >>> plan = search(build_graph(load_model_config("mlp-2layer")), topo)
    >>> br = link_traffic_by_op_kind(plan, topo)
    >>> bool(abs(br.total_bytes.sum() - sum(k.bytes for k in plan.links)) < 1e-3)
    True
    """
    _check_same_cluster(plan, topology)
    links = links or LinkModel(topology)
    if plan.pipeline is not None:
        return _pipeline_breakdown(plan, topology, links)
    kinds: dict[str, int] = {}
    rows: list[np.ndarray] = []
    for op in plan.ops:
        if op.kind not in kinds:
            kinds[op.kind] = len(rows)
            rows.append(np.zeros(len(links.links)))
        row = rows[kinds[op.kind]]
        for _, p in op.phases:
            row += p.per_rank_bytes * links.pattern(*p.route).loads
    load = np.array(rows) if rows else np.zeros((0, len(links.links)))
    used = np.flatnonzero(load.sum(axis=0) > 0)
    names = tuple(
        (u, v, link.kind, link.bandwidth_Bps) for u, v, link in (links.links[i] for i in used)
    )
    sel = load[:, used]
    return LinkBreakdown(names, tuple(kinds), sel, sel / links.capacity_Bps[used])


def _pipeline_breakdown(plan: Plan, topology: Topology, links: LinkModel) -> LinkBreakdown:
    """Per-op-kind link loads of a pipelined plan: each stage's plan on its own hosts, moved to
    them, plus the sends between stages as their own kind."""
    assert plan.pipeline is not None
    index = {(u, v): i for i, (u, v, _) in enumerate(links.links)}
    g = topology.gpus_per_node
    kinds: dict[str, int] = {}
    rows: list[np.ndarray] = []

    def row(kind: str) -> np.ndarray:
        if kind not in kinds:
            kinds[kind] = len(rows)
            rows.append(np.zeros(len(links.links)))
        return rows[kinds[kind]]

    for st in plan.pipeline.stages:
        sub = links.first_hosts(len(st.hosts))
        part = link_traffic_by_op_kind(st.plan, sub.topology, sub)
        rename = host_renamer(topology, st.hosts[0], g)
        for j, (u, v, _, _) in enumerate(part.links):
            i = index.get((rename(u), rename(v)))
            if i is None:
                continue
            for k, kind in enumerate(part.op_kinds):
                row(kind)[i] += part.bytes[k, j]
    for kind, flows in (("pipeline send", plan.pipeline.p2p_flows),
                        ("tied embedding sync", plan.pipeline.tied_flows)):
        if flows:
            src = np.array([a for a, _, _ in flows])
            dst = np.array([b for _, b, _ in flows])
            w = np.array([x for _, _, x in flows])
            loads, _ = links._route(src, dst, w)
            row(kind)[:] += loads
    load = np.array(rows) if rows else np.zeros((0, len(links.links)))
    used = np.flatnonzero(load.sum(axis=0) > 0)
    names = tuple(
        (u, v, link.kind, link.bandwidth_Bps) for u, v, link in (links.links[i] for i in used)
    )
    sel = load[:, used]
    return LinkBreakdown(names, tuple(kinds), sel, sel / links.capacity_Bps[used])


def gpu_traffic_matrix(
    plan: Plan, topology: Topology, links: LinkModel | None = None
) -> tuple[tuple[str, ...], np.ndarray]:
    """Bytes each GPU sends to each other GPU over one step, ``matrix[src, dst]``.

    Ring collectives send a rank's traffic to its ring neighbour; all-to-all spreads it evenly
    over the group (the same flows the link model routes). The matrix sums to the plan's
    ``comm_bytes``.
    """
    _check_same_cluster(plan, topology)
    links = links or LinkModel(topology)
    n = topology.num_gpus
    matrix = np.zeros((n, n))
    if plan.pipeline is not None:
        g = topology.gpus_per_node
        for st in plan.pipeline.stages:
            sub = links.first_hosts(len(st.hosts))
            _, part = gpu_traffic_matrix(st.plan, sub.topology, sub)
            base = st.hosts[0] * g
            k = part.shape[0]
            matrix[base : base + k, base : base + k] += part
        for a, b, nbytes in (*plan.pipeline.p2p_flows, *plan.pipeline.tied_flows):
            matrix[a, b] += nbytes
        return topology.gpus, matrix
    # (level, q, pattern) -> unit flow matrix: bytes src->dst per byte each rank sends
    unit: dict[tuple[str, int, str], np.ndarray] = {}
    for op in plan.ops:
        for _, p in op.phases:
            key = p.route
            if key not in unit:
                flows = np.zeros((n, n))
                for members in links.groups(p.level, p.q):
                    q = len(members)
                    for i, a in enumerate(members):
                        if p.pattern == "ring":
                            flows[a, members[(i + 1) % q]] += 1.0
                        else:
                            for b in members:
                                if b != a:
                                    flows[a, b] += 1.0 / (q - 1)
                unit[key] = flows
            matrix += p.per_rank_bytes * unit[key]
    return topology.gpus, matrix
