"""Per-op cost tables the search problem is built from, and the memo one search shares them in.

An op's tables (compute, in-op collectives, kept activations, weight phases and memory per ZeRO
stage, for every strategy) depend only on its signature, the layer count, the micro-batch count,
the strategy list and the host type: :class:`BuildMemo` prices each once per search and link
model, and conversion tables once per pair of layout lists (for any tensor size). What does not
depend on a bandwidth (compute, memory, the phases summed per level, group size and pattern) is
an :class:`_OpShape`, kept for the process (:data:`_SHAPES`): the builds on a stage's hosts, a
sweep's other bandwidths or the volume model price it again in a few matrix products.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from taps_core.cluster.topology import Topology
from taps_core.costs.collectives import CommCost, Phase
from taps_core.costs.ops import gathered_bytes, op_cost, weight_memory, weight_phases, zero_stages
from taps_core.costs.reshard import Resharder
from taps_core.ir.graph import OpGraph, OpSpec
from taps_core.ir.strategies import Strategy
from taps_core.memo import LruMemo

# op shapes kept per process: gpt3-175b's search on 128 hosts builds 35 (28 MB, 3 MB at most)
SHAPE_MEMO_ENTRIES, SHAPE_MEMO_BYTES = 4096, 256 * 2**20


def _shape_bytes(shape: _OpShape) -> int:
    return sum(v.nbytes for v in vars(shape).values() if isinstance(v, np.ndarray))


_SHAPES: LruMemo[_OpShape] = LruMemo(
    SHAPE_MEMO_ENTRIES, max_bytes=SHAPE_MEMO_BYTES, size=_shape_bytes
)


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
    scores: np.ndarray  # of ``saved``: attention scores selective recomputation re-creates


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
        """``op``'s tables on this memo's cost model, computed once per distinct question: its
        :class:`_OpShape` from the process memo (this question on this host type), priced."""
        key = (op_signature(graph, op), graph.num_layers, mode, stages, microbatches,
               tuple(strats))
        if key not in self.op_tables:
            topo = self.topology
            shape = _SHAPES.get_or(
                (*key, topo.gpu, topo.gpus_per_node, topo.compute_efficiency),
                lambda: _op_shape(graph, op, strats, topo, mode, stages, microbatches),
            )
            self.op_tables[key] = _priced(shape, self.comm)
        return self.op_tables[key]


def _priced(shape: _OpShape, comm: CommCost) -> _OpTables:
    """The op's tables on ``comm``: ``shape``'s summed phases at its per-step and per-byte
    coefficients."""
    coeffs = [comm.coefficients(*k) for k in shape.keys] or [(0.0, 0.0)]
    alpha, beta = (np.array(c) for c in zip(*coeffs))

    def at(sums: np.ndarray) -> np.ndarray:
        return sums[..., 0, :] @ alpha + sums[..., 1, :] @ beta

    return _OpTables(
        shape.compute, at(shape.fwd), at(shape.bwd), shape.saved, shape.boundary,
        shape.fixed_memory, np.where(shape.offered, at(shape.weight), np.inf),
        shape.weight_memory, np.where(shape.offered, at(shape.slope), 0.0), shape.scores,
    )


@dataclass(frozen=True)
class _OpShape:
    """An op's tables before a link model prices them: phases summed per (level, group size,
    pattern) of :attr:`keys` as [..., 2, K] arrays (steps, bytes per rank), per strategy (and
    ZeRO stage). Nothing here depends on a bandwidth (see the module docstring)."""

    keys: tuple[tuple[str, int, str], ...]
    compute: np.ndarray
    fwd: np.ndarray  # [S, 2, K]
    bwd: np.ndarray
    saved: np.ndarray
    boundary: np.ndarray
    fixed_memory: np.ndarray
    weight: np.ndarray  # [S, Z, 2, K]: one step's weight phases
    slope: np.ndarray  # [S, Z, 2, K]: what one more micro-batch adds
    weight_memory: np.ndarray  # [S, Z]
    offered: np.ndarray  # [S, Z] bool: the ZeRO stage applies to the strategy
    scores: np.ndarray  # [S] bytes of attention scores kept for backward


def _op_shape(
    graph: OpGraph,
    op: OpSpec,
    strats: list[Strategy],
    topology: Topology,
    mode: str,
    stages: tuple[int, ...],
    microbatches: int,
) -> _OpShape:
    g = topology.gpus_per_node
    costs = [op_cost(graph, op, s, topology, mode, gpus_per_node=g) for s in strats]
    # transient buffers live one layer at a time: each layer carries 1/L of them (exact for
    # layers that choose alike); an op outside the layers carries its own
    share = 1.0 / max(1, graph.num_layers) if op.layer is not None else 1.0
    n, z_count = len(strats), len(stages)
    # each distinct weight (shard, group, ZeRO stage) once: its phases now and with one more
    # micro-batch, and its memory; row 0 is nothing (the padding of ops with fewer weights)
    rows: list[tuple[tuple[Phase, ...], tuple[Phase, ...], float]] = [((), (), 0.0)]
    row_of: dict[tuple, int] = {}
    picks: list[list[int]] = []
    wm = np.full((n, z_count), np.inf)
    offered = np.zeros((n, z_count), dtype=bool)
    for i, c in enumerate(costs):
        own = zero_stages(c, mode)
        for j, z in enumerate(stages):
            pick: list[int] = []
            picks.append(pick)
            if z not in own:
                continue
            for w in c.weights:
                wkey = (w.held_bytes, w.elements, w.group, w.copies, w.tied, z)
                if wkey not in row_of:
                    row_of[wkey] = len(rows)
                    now = tuple(p for _, p in weight_phases(w, mode, z, microbatches))
                    # only ZeRO 2 and 3 in training move weights per micro-batch
                    more = now if mode != "train" or z < 2 else tuple(
                        p for _, p in weight_phases(w, mode, z, microbatches + 1)
                    )
                    rows.append((now, more, weight_memory(w, mode, z).total))
                pick.append(row_of[wkey])
            offered[i, j] = True
            wm[i, j] = share * gathered_bytes(c, mode, z) if z == 3 else 0.0
    fwd = [tuple(p for _, p in c.fwd) for c in costs]
    bwd = [tuple(p for _, p in c.bwd) for c in costs]
    keys: dict[tuple[str, int, str], int] = {}
    for phases in (*fwd, *bwd, *(r[0] for r in rows), *(r[1] for r in rows)):
        for p in phases:
            keys.setdefault(p.route, len(keys))
    width = max(1, len(keys))
    summed: dict[tuple[Phase, ...], np.ndarray] = {}

    def sums(phases: tuple[Phase, ...]) -> np.ndarray:
        """[2, K]: steps and bytes per rank of ``phases`` per key (strategies share them)."""
        if phases not in summed:
            out = np.zeros((2, width))
            for p in phases:
                k = keys[p.route]
                out[0, k] += p.steps
                out[1, k] += p.per_rank_bytes
            summed[phases] = out
        return summed[phases]

    now = np.array([sums(r[0]) for r in rows])
    more = np.array([sums(r[1]) for r in rows])
    memory = np.array([r[2] for r in rows])
    deepest = max((len(pk) for pk in picks), default=0)
    idx = np.zeros((n * z_count, max(1, deepest)), dtype=np.int64)
    for r, pk in enumerate(picks):
        idx[r, : len(pk)] = pk
    idx = idx.reshape(n, z_count, -1)
    return _OpShape(
        tuple(keys),
        np.array([c.compute_fwd_s for c in costs]),
        np.array([sums(f) for f in fwd]).reshape(n, 2, width),
        np.array([sums(b) for b in bwd]).reshape(n, 2, width),
        np.array([c.saved_bytes for c in costs]),
        np.array([c.boundary_bytes for c in costs]),
        np.array([c.kv_cache_bytes + c.workspace_bytes for c in costs]),
        now[idx].sum(axis=2),
        (more - now)[idx].sum(axis=2),
        np.where(offered, wm + memory[idx].sum(axis=2), np.inf),
        offered,
        np.array([c.scores_bytes for c in costs]),
    )
