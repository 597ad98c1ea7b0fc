"""Per-op cost tables the search problem is built from, and the memo one search shares them in.

An op's tables (compute, in-op collectives, kept activations, weight phases and memory per ZeRO
stage, for every strategy) depend only on its signature, the layer count, the micro-batch count
and the strategy list: :class:`BuildMemo` computes each once per search and topology, and
conversion tables once per pair of layout lists (for any tensor size).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from taps_core.cluster.topology import Topology
from taps_core.costs.collectives import CommCost, Phase
from taps_core.costs.ops import gathered_bytes, op_cost, weight_memory, weight_phases, zero_stages
from taps_core.costs.reshard import Resharder
from taps_core.ir.graph import OpGraph, OpSpec
from taps_core.ir.strategies import Strategy


def op_signature(graph: OpGraph, op: OpSpec) -> tuple:
    """Everything that determines an op's strategies and costs (not its name or layer index):
    :attr:`~taps_core.ir.graph.OpGraph.signatures`, computed once per graph."""
    return graph.signatures[op.name]


@dataclass(frozen=True)
class _OpTables:
    """Per-strategy quantities of one op, reused by every op with the same signature."""

    compute: np.ndarray  # one forward pass, seconds
    fwd: np.ndarray  # in-op collectives of one forward, seconds
    bwd: np.ndarray
    saved: np.ndarray
    boundary: np.ndarray
    fixed_memory: np.ndarray  # KV cache + inference working set
    weight_time: np.ndarray  # [S, len(stages)]
    weight_memory: np.ndarray  # [S, len(stages)]
    weight_slope: np.ndarray  # [S, len(stages)]: seconds one more micro-batch adds


@dataclass
class BuildMemo:
    """What the problems one search builds on one topology with one cost model share:
    conversion tables (for any tensor size) and op tables (per op signature, layer count,
    micro-batch count and strategy list). A mutable memo owned by one search."""

    topology: Topology
    comm: CommCost
    op_tables: dict[tuple, _OpTables] = field(default_factory=dict)
    resharder: Resharder = field(init=False)

    def __post_init__(self) -> None:
        self.resharder = Resharder(self.comm, self.topology.gpus_per_node)

    def tables(
        self, graph: OpGraph, op: OpSpec, strats: list[Strategy], mode: str,
        stages: tuple[int, ...], microbatches: int,
    ) -> _OpTables:
        """:func:`_op_tables` of ``op``, computed once per distinct question."""
        key = (op_signature(graph, op), graph.num_layers, mode, stages, microbatches,
               tuple(strats))
        if key not in self.op_tables:
            self.op_tables[key] = _op_tables(graph, op, strats, self.topology, mode,
                                             self.comm.seconds, stages, microbatches)
        return self.op_tables[key]


def _op_tables(
    graph: OpGraph,
    op: OpSpec,
    strats: list[Strategy],
    topology: Topology,
    mode: str,
    seconds: Callable[[Phase], float],
    stages: tuple[int, ...],
    microbatches: int,
) -> _OpTables:
    g = topology.gpus_per_node
    costs = [op_cost(graph, op, s, topology, mode, gpus_per_node=g) for s in strats]
    # transient buffers live one layer at a time: each layer carries 1/L of them (exact for
    # layers that choose alike); an op outside the layers carries its own
    share = 1.0 / max(1, graph.num_layers) if op.layer is not None else 1.0
    memo: dict[tuple, tuple[float, float, float]] = {}
    wt = np.full((len(strats), len(stages)), np.inf)
    wm = np.full((len(strats), len(stages)), np.inf)
    slope = np.zeros((len(strats), len(stages)))
    for i, c in enumerate(costs):
        own = zero_stages(c, mode)
        for j, z in enumerate(stages):
            if z not in own:
                continue
            t = m = d = 0.0
            for w in c.weights:
                key = (w.held_bytes, w.elements, w.group, w.copies, w.tied, z)
                if key not in memo:
                    now = sum(seconds(p) for _, p in weight_phases(w, mode, z, microbatches))
                    more = sum(seconds(p) for _, p in weight_phases(w, mode, z, microbatches + 1))
                    memo[key] = (now, weight_memory(w, mode, z).total, more - now)
                dt, dm, dd = memo[key]
                t += dt
                m += dm
                d += dd
            wt[i, j], wm[i, j] = t, m + share * gathered_bytes(c, mode, z)
            slope[i, j] = d
    return _OpTables(
        np.array([c.compute_fwd_s for c in costs]),
        np.array([sum(seconds(p) for _, p in c.fwd) for c in costs]),
        np.array([sum(seconds(p) for _, p in c.bwd) for c in costs]),
        np.array([c.saved_bytes for c in costs]),
        np.array([c.boundary_bytes for c in costs]),
        np.array([c.kv_cache_bytes + c.workspace_bytes for c in costs]),
        wt,
        wm,
        slope,
    )
