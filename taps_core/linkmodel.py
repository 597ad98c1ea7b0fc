"""Link-level model: lay collectives out as flows, route them, and add up bytes per link.

A *pattern* is every group of one collective running at once: on level ``intra`` the groups
are contiguous blocks of ``q`` GPUs in every host; on level ``inter`` they are blocks of ``q``
hosts, one group per local GPU index (each GPU uses its own NIC rail where it has one).
``ring`` patterns send each rank's traffic to its ring neighbour; ``pairs`` patterns
(all-to-all) spread it evenly over the other ``q - 1`` ranks. Loads are in units of one
byte of per-rank traffic, so a pattern is routed once and scaled by any message size.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import dijkstra

from taps_core.topology import Topology

PATTERNS = ("ring", "pairs")


@dataclass(frozen=True)
class PatternCost:
    """Routed pattern: seconds per byte of per-rank traffic, per-step latency, link loads.

    ``loads[i]`` is the bytes that directed link ``i`` carries per byte each rank sends.
    """

    level: str
    q: int
    kind: str
    beta_s_per_B: float
    alpha_s: float
    loads: np.ndarray


class LinkModel:
    """Routes and caches patterns on one topology (build once per search)."""

    def __init__(self, topology: Topology) -> None:
        self.topology = topology
        names = [d.name for d in topology.devices]
        self.index = {n: i for i, n in enumerate(names)}
        # directed links: 2k is src->dst, 2k+1 is dst->src
        self.links = []
        for link in topology.links:
            self.links.append((link.src, link.dst, link))
            self.links.append((link.dst, link.src, link))
        n = len(names)
        self.link_id = np.full((n, n), -1, dtype=np.int64)
        rows, cols, weights = [], [], []
        for i, (u, v, link) in enumerate(self.links):
            a, b = self.index[u], self.index[v]
            self.link_id[a, b] = i
            rows.append(a)
            cols.append(b)
            # fewest hops first; among equal hops the faster link (tiny tie-break)
            weights.append(1.0 + 1e-3 * 1e9 / link.bandwidth_Bps)
        adj = csr_matrix((weights, (rows, cols)), shape=(n, n))
        self.gpu_idx = np.array([self.index[g] for g in topology.gpus])
        _, self.pred = dijkstra(adj, indices=self.gpu_idx, return_predecessors=True)
        self.capacity_Bps = np.array(
            [link.bandwidth_Bps * topology.efficiency_of(link.kind) for _, _, link in self.links]
        )
        self.latency_s = np.array([link.latency_s for _, _, link in self.links])
        self.is_inter = np.array([link.kind == "network" for _, _, link in self.links])
        self._cache: dict[tuple[str, int, str], PatternCost] = {}

    @property
    def mesh_shape(self) -> tuple[int, int]:
        return self.topology.nodes, self.topology.gpus_per_node

    def groups(self, level: str, q: int) -> list[list[int]]:
        """Rank lists (global GPU ranks, host-major) of every group of the pattern."""
        hosts, g = self.mesh_shape
        size = g if level == "intra" else hosts
        if q < 1 or size % q:
            raise ValueError(f"group size {q} does not divide the {level} level ({size})")
        out = []
        if level == "intra":
            for h in range(hosts):
                for start in range(0, g, q):
                    out.append([h * g + j for j in range(start, start + q)])
        else:
            for j in range(g):
                for start in range(0, hosts, q):
                    out.append([(start + i) * g + j for i in range(q)])
        return out

    def _route(
        self, src: np.ndarray, dst: np.ndarray, weight: np.ndarray
    ) -> tuple[np.ndarray, float]:
        """Add ``weight`` along every src->dst GPU path; return link loads and max path latency."""
        loads = np.zeros(len(self.links))
        latency = np.zeros(len(src))
        cur = self.gpu_idx[dst]
        rank = src
        target = self.gpu_idx[src]
        active = cur != target
        while active.any():
            prev = self.pred[rank[active], cur[active]]
            ids = self.link_id[prev, cur[active]]
            np.add.at(loads, ids, weight[active])
            latency[active] += self.latency_s[ids]
            cur = cur.copy()
            cur[active] = prev
            active = cur != target
        return loads, float(latency.max(initial=0.0))

    def pattern(self, level: str, q: int, kind: str) -> PatternCost:
        """Routed cost of every group of size ``q`` on ``level`` communicating at once."""
        key = (level, q, kind)
        if key not in self._cache:
            src, dst, w = [], [], []
            for members in self.groups(level, q):
                for i, a in enumerate(members):
                    if kind == "ring":
                        src.append(a)
                        dst.append(members[(i + 1) % q])
                        w.append(1.0)
                    else:
                        for b in members:
                            if b != a:
                                src.append(a)
                                dst.append(b)
                                w.append(1.0 / (q - 1))
            loads, alpha = self._route(np.array(src), np.array(dst), np.array(w))
            beta = float((loads / self.capacity_Bps).max(initial=0.0))
            self._cache[key] = PatternCost(level, q, kind, beta, alpha, loads)
        return self._cache[key]
