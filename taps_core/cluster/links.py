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

from taps_core.cluster.topology import Topology, sub_topology

PATTERNS = ("ring", "pairs")
PRED_ELEMENTS = 1 << 26  # shortest-path tree entries kept at once (int32: 256 MiB)


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
    """Routes and caches patterns on one topology (build once per search).

    Memory grows with the links, not with GPUs squared: directed links are found by a sorted
    key lookup, and shortest-path trees are computed from the source GPUs a pattern needs, in
    batches of at most ``PRED_ELEMENTS`` predecessor entries. When every GPU's tree fits in
    that budget (all presets do), the trees are kept for the next patterns.
    """

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
        self._n = n
        rows = np.array([self.index[u] for u, _, _ in self.links], dtype=np.int64)
        cols = np.array([self.index[v] for _, v, _ in self.links], dtype=np.int64)
        # fewest hops first; among equal hops the faster link (tiny tie-break)
        weights = [1.0 + 1e-3 * 1e9 / link.bandwidth_Bps for _, _, link in self.links]
        self._adj = csr_matrix((weights, (rows, cols)), shape=(n, n))
        # (a * n + b) -> directed link id; a repeated pair maps to its last link, as before
        keys = rows * n + cols
        order = np.argsort(keys, kind="stable")
        self._keys = keys[order]
        self._ids = order
        self.gpu_idx = np.array([self.index[g] for g in topology.gpus])
        self._pred: np.ndarray | None = None  # [GPU rank, device] trees of every GPU (cached)
        self.capacity_Bps = np.array(
            [link.bandwidth_Bps * topology.efficiency_of(link.kind) for _, _, link in self.links]
        )
        self.latency_s = np.array([link.latency_s for _, _, link in self.links])
        self.is_inter = np.array([link.kind == "network" for _, _, link in self.links])
        self._cache: dict[tuple[str, int, str], PatternCost] = {}
        self._stages: dict[int, LinkModel] = {}

    def first_hosts(self, hosts: int) -> LinkModel:
        """The link model of this cluster's first ``hosts`` hosts (a pipeline stage's own
        cluster; stages of equal width are priced on the first), built once and kept, so every
        stage of a search routes each of its patterns once."""
        if hosts == self.topology.nodes:
            return self
        if hosts not in self._stages:
            self._stages[hosts] = LinkModel(sub_topology(self.topology, tuple(range(hosts))))
        return self._stages[hosts]

    def link_ids(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Directed link ids of the device pairs ``a[i] -> b[i]`` (which must be linked)."""
        keys = a.astype(np.int64) * self._n + b
        return self._ids[np.searchsorted(self._keys, keys, side="right") - 1]

    def _trees(self, ranks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Shortest-path predecessors from the GPUs ``ranks``: (trees, row of each rank)."""
        if self._pred is None and len(self.gpu_idx) * self._n <= PRED_ELEMENTS:
            _, self._pred = dijkstra(self._adj, indices=self.gpu_idx, return_predecessors=True)
        if self._pred is not None:
            return self._pred, ranks
        _, pred = dijkstra(self._adj, indices=self.gpu_idx[ranks], return_predecessors=True)
        return pred, np.arange(len(ranks))

    @property
    def mesh_shape(self) -> tuple[int, int]:
        return self.topology.nodes, self.topology.gpus_per_node

    def groups(self, level: str, q: int) -> list[list[int]]:
        """Rank lists (global GPU ranks, host-major) of every group of the pattern."""
        return self._group_array(level, q).tolist()

    def _group_array(self, level: str, q: int) -> np.ndarray:
        """[groups, q] global GPU ranks of every group of the pattern: on ``intra``, blocks of
        ``q`` GPUs in each host; on ``inter``, blocks of ``q`` hosts per local GPU index."""
        hosts, g = self.mesh_shape
        size = g if level == "intra" else hosts
        if q < 1 or size % q:
            raise ValueError(f"group size {q} does not divide the {level} level ({size})")
        if level == "intra":
            return np.arange(hosts * g).reshape(hosts * g // q, q)
        # [local index j, block, member i] -> (block * q + i) * g + j
        host = np.arange(hosts).reshape(hosts // q, q)
        return (host[None, :, :] * g + np.arange(g)[:, None, None]).reshape(-1, q)

    def _route(
        self, src: np.ndarray, dst: np.ndarray, weight: np.ndarray
    ) -> tuple[np.ndarray, float]:
        """Add ``weight`` along every src->dst GPU path; return link loads and max path latency.

        Flows are walked back from their destinations in batches of source GPUs whose trees
        fit in ``PRED_ELEMENTS`` numbers.
        """
        loads = np.zeros(len(self.links))
        latency = np.zeros(len(src))
        sources = np.unique(src)
        batch = max(1, PRED_ELEMENTS // max(self._n, 1))
        for start in range(0, len(sources), batch):
            group = sources[start : start + batch]
            pred, rows = self._trees(group)
            at = np.searchsorted(group, src)  # position of each flow's source in the group
            mine = (at < len(group)) & (group[np.minimum(at, len(group) - 1)] == src)
            flows = np.flatnonzero(mine)
            cur = self.gpu_idx[dst[flows]]
            target = self.gpu_idx[src[flows]]
            tree = rows[at[flows]]
            active = cur != target
            while active.any():
                prev = pred[tree[active], cur[active]]
                ids = self.link_ids(prev, cur[active])
                np.add.at(loads, ids, weight[flows[active]])
                latency[flows[active]] += self.latency_s[ids]
                cur = cur.copy()
                cur[active] = prev
                active = cur != target
        return loads, float(latency.max(initial=0.0))

    def pattern(self, level: str, q: int, kind: str) -> PatternCost:
        """Routed cost of every group of size ``q`` on ``level`` communicating at once."""
        key = (level, q, kind)
        if key not in self._cache:
            members = self._group_array(level, q)
            if kind == "ring":  # each rank to its ring neighbour
                src, dst = members.ravel(), np.roll(members, -1, axis=1).ravel()
                w = np.ones(len(src))
            else:  # each rank to every other member, 1/(q-1) each, pairs in (a, b) order
                a = np.repeat(members, q, axis=1).ravel()
                b = np.tile(members, (1, q)).ravel()
                src, dst = a[a != b], b[a != b]
                w = np.full(len(src), 1.0 / (q - 1))
            loads, alpha = self._route(src, dst, w)
            beta = float((loads / self.capacity_Bps).max(initial=0.0))
            self._cache[key] = PatternCost(level, q, kind, beta, alpha, loads)
        return self._cache[key]
