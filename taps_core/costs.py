"""Per-op costs (compute, in-op communication, memory) and resharding costs between ops.

Training runs forward, then two backward einsums per forward one (input and weight gradients):
a letter absent from input X and split leaves dX as a partial sum, all-reduced over that split.
For a weight this is the data-parallel gradient sync; for an activation, Megatron's backward
all-reduce. Between ops, a tensor whose producer layout differs from its consumer's is resharded
level by level (slice, all-gather or all-to-all); in training its gradient takes the way back.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from taps_core.collectives import CommCost, Phase, all_gather, all_reduce, all_to_all
from taps_core.graph import MEMORY_BOUND_KINDS, OpGraph, OpSpec, TensorSpec
from taps_core.strategies import LEVELS, Layout, Strategy
from taps_core.topology import Topology

MODES = ("train", "infer")
STAT_BYTES = 8  # a norm all-reduces two fp32 statistics per row


@dataclass(frozen=True)
class Memory:
    """Bytes per device held for one op: parameters, gradients, optimizer state, activations."""

    parameters: float = 0.0
    gradients: float = 0.0
    optimizer: float = 0.0
    activations: float = 0.0

    @property
    def total(self) -> float:
        return self.parameters + self.gradients + self.optimizer + self.activations

    def __add__(self, other: Memory) -> Memory:
        return Memory(
            self.parameters + other.parameters,
            self.gradients + other.gradients,
            self.optimizer + other.optimizer,
            self.activations + other.activations,
        )


@dataclass(frozen=True)
class OpCost:
    """One op under one strategy: compute seconds, communication phases, memory per device."""

    compute_s: float
    phases: tuple[tuple[str, Phase], ...]  # (label, phase): label says fwd / grad of which tensor
    memory: Memory


def shard(tensor: TensorSpec, letters: str, strategy: Strategy) -> float:
    """Bytes of ``tensor`` held per device when indexed by ``letters`` under ``strategy``."""
    return tensor.nbytes / math.prod(strategy.factor(ch) for ch in letters)


def optimizer_bytes_per_param(dtype_bytes: int) -> float:
    """Adam state per parameter: fp32 master copy (if low precision) plus two fp32 moments."""
    return 12.0 if dtype_bytes < 4 else 8.0


def _level_q(strategy: Strategy, letters: frozenset[str] | set[str]) -> tuple[int, int]:
    return tuple(  # type: ignore[return-value]
        math.prod(strategy.factor(ch, lv) for ch in letters) for lv in LEVELS
    )


def _moe_phases(graph: OpGraph, op: OpSpec, s: Strategy) -> tuple[Phase, ...]:
    """Token <-> expert reshuffle of a MoE dispatch (or combine, mirrored) on each level.

    Per level: tokens split and experts split -> all-to-all within groups of the smaller split;
    the split side feeding a replicated side -> all-gather; otherwise local selection.
    """
    out = graph.tensors[op.output]
    held = out.nbytes / math.prod(s.factor(ch) for ch in "bs")  # routed token bytes per device
    phases: list[Phase] = []
    for lv in LEVELS:
        tok = math.prod(s.factor(ch, lv) for ch in "bs")
        exp = s.factor("e", lv)
        slots = math.prod(s.factor(ch, lv) for ch in "ec")
        src_split, dst_split = (slots, tok) if op.kind == "moe_combine" else (tok, slots)
        if tok > 1 and exp > 1:
            phases += all_to_all(lv, min(tok, exp), held)
        elif src_split > 1 and dst_split == 1:
            phases += all_gather(lv, src_split, held * src_split)
    return tuple(phases)


def op_cost(graph: OpGraph, op: OpSpec, s: Strategy, topology: Topology, mode: str) -> OpCost:
    """Compute time, communication phases and memory of ``op`` under strategy ``s``."""
    train = mode == "train"
    passes = 3.0 if train else 1.0
    ways = s.ways()
    terms = (*op.input_letters, op.output_letters)
    names = (*op.inputs, op.output)
    local_bytes = sum(shard(graph.tensors[t], lt, s) for lt, t in zip(terms, names))
    gpu = topology.gpu
    mem_time = passes * local_bytes / gpu.hbm_bandwidth_Bps
    if op.kind in MEMORY_BOUND_KINDS:
        compute_s = mem_time
    else:
        flop_time = passes * graph.flops(op) / ways / (gpu.peak_flops * topology.compute_efficiency)
        compute_s = max(flop_time, mem_time)
    out = graph.tensors[op.output]
    out_local = shard(out, op.output_letters, s)
    phases: list[tuple[str, Phase]] = []
    if op.kind in ("moe_dispatch", "moe_combine"):
        moe = _moe_phases(graph, op, s)
        phases += [("fwd", p) for p in moe]
        if train:
            phases += [("bwd", p) for p in moe]
    else:
        q_inter, q_intra = _level_q(s, op.contracted - op.fixed)
        phases += [("fwd", p) for p in all_reduce(q_inter, q_intra, out_local)]
        if op.stat_letters:
            s_inter, s_intra = _level_q(s, op.stat_letters)
            rows = out_local * math.prod(s.factor(ch) for ch in op.stat_letters) / out.nbytes
            stat_rows = out.numel / math.prod(
                out.shape[op.output_letters.index(ch)] for ch in op.stat_letters
            )
            stats = all_reduce(s_inter, s_intra, STAT_BYTES * stat_rows * rows)
            phases += [("stats", p) for p in stats]
            if train:  # the norm's backward reduces two more per-row sums over the same split
                phases += [("stats bwd", p) for p in stats]
    memory = Memory()
    for letters, tname in zip(op.input_letters, op.inputs):
        t = graph.tensors[tname]
        held = shard(t, letters, s)
        if t.is_param:
            if not t.tied:
                elems = held / t.dtype_bytes
                memory += Memory(
                    parameters=held,
                    gradients=held if train else 0.0,
                    optimizer=elems * optimizer_bytes_per_param(t.dtype_bytes) if train else 0.0,
                )
        elif train:
            # a tensor read by k ops is saved once for backward: each reader carries 1/k of it
            readers = max(1, len(graph.consumers.get(tname, ())))
            memory += Memory(activations=held / readers)
        if train and t.requires_grad and op.kind not in ("moe_dispatch", "moe_combine"):
            absent = set(op.letters) - set(letters) - op.fixed
            g_inter, g_intra = _level_q(s, absent)
            label = "grad_sync" if t.is_param else f"grad {tname}"
            phases += [(label, p) for p in all_reduce(g_inter, g_intra, held)]
    return OpCost(compute_s, tuple(phases), memory)


# ---- resharding between ops -------------------------------------------------------------


@dataclass(frozen=True)
class LevelMove:
    """How one level's split of a tensor changes: collective, group size, bytes divisor."""

    collective: str  # none | slice | all_gather | all_to_all
    q: int
    divisor: int  # per-rank message = tensor bytes / (divisor * other level's kept split)


def level_move(src: tuple[int, ...], dst: tuple[int, ...]) -> LevelMove:
    """Classify the change of one level's per-position split factors from src to dst."""
    if src == dst:
        return LevelMove("none", 1, 1)
    if all(t % s == 0 for s, t in zip(src, dst)):
        return LevelMove("slice", 1, 1)
    ps, pt = math.prod(src), math.prod(dst)
    common = math.prod(math.gcd(s, t) for s, t in zip(src, dst))
    if all(s % t == 0 for s, t in zip(src, dst)):
        return LevelMove("all_gather", ps // pt, pt)
    if ps == pt:
        return LevelMove("all_to_all", ps // common, ps)
    # gather down to the common split, then slice locally
    return LevelMove("all_gather", ps // common, common)


FREE_MOVES = ("none", "slice")


def _other_split(level: int, src: Layout, dst: Layout) -> int:
    """Ways the *other* level splits the tensor while ``level``'s collective runs.

    Free moves (slices) go first; of two collectives, the intra-node one runs first, on the
    tensor still split the source's way across nodes; the inter-node one then sees the
    destination's intra-node split.
    """
    other = 1 - level
    other_free = level_move(src[other], dst[other]).collective in FREE_MOVES
    if level == LEVELS.index("intra") and not other_free:
        return math.prod(src[other])
    return math.prod(dst[other])


def reshard_phases(nbytes: float, src: Layout, dst: Layout) -> tuple[Phase, ...]:
    """Collectives that turn a tensor of ``nbytes`` from layout ``src`` into ``dst``."""
    phases: list[Phase] = []
    for i, lv in enumerate(LEVELS):
        move = level_move(src[i], dst[i])
        size = nbytes / (move.divisor * _other_split(i, src, dst))
        if move.collective == "all_gather":
            phases += all_gather(lv, move.q, size)
        elif move.collective == "all_to_all":
            phases += all_to_all(lv, move.q, size)
    return tuple(phases)


class Resharder:
    """Vectorised resharding costs for one comm model, with per-level tables cached.

    The cost of a move decomposes by level: ``steps * alpha + bytes * beta`` where the bytes
    are the tensor's size over this level's divisor and the other level's current split (see
    :func:`_other_split`), so a matrix over many layouts is a few table look-ups.
    """

    def __init__(self, comm: CommCost) -> None:
        self.comm = comm
        self._level: dict[
            tuple[int, tuple[int, ...], tuple[int, ...]], tuple[float, float, bool]
        ] = {}

    def _entry(self, lv: int, a: tuple[int, ...], b: tuple[int, ...]) -> tuple[float, float, bool]:
        """(latency seconds, seconds per tensor byte before the other level's split, free?)."""
        key = (lv, a, b)
        if key not in self._level:
            move = level_move(a, b)
            if move.collective in ("all_gather", "all_to_all"):
                pattern = "pairs" if move.collective == "all_to_all" else "ring"
                alpha, beta = self.comm.coefficients(LEVELS[lv], move.q, pattern)
                frac = (move.q - 1) / move.q / move.divisor
                self._level[key] = ((move.q - 1) * alpha, frac * beta, False)
            else:
                self._level[key] = (0.0, 0.0, True)
        return self._level[key]

    def one_way(self, nbytes: float, src: list[Layout], dst: list[Layout]) -> np.ndarray:
        """Matrix [len(src), len(dst)] of seconds to move a tensor of ``nbytes`` forward
        (the same phases as :func:`reshard_phases`, vectorised over layouts)."""
        tables = []
        for lv in range(2):
            ua = sorted({a[lv] for a in src})
            ub = sorted({b[lv] for b in dst})
            ia = np.array([ua.index(a[lv]) for a in src])
            ib = np.array([ub.index(b[lv]) for b in dst])
            ent = [[self._entry(lv, a, b) for b in ub] for a in ua]
            pick = np.ix_(ia, ib)
            lat = np.array([[e[0] for e in row] for row in ent])[pick]
            beta = np.array([[e[1] for e in row] for row in ent])[pick]
            free = np.array([[e[2] for e in row] for row in ent])[pick]
            p_src = np.array([math.prod(a) for a in ua], dtype=float)[ia]
            p_dst = np.array([math.prod(b) for b in ub], dtype=float)[ib]
            tables.append((lat, beta, free, p_src, p_dst))
        inter, intra = LEVELS.index("inter"), LEVELS.index("intra")
        i_lat, i_beta, i_free, i_src, i_dst = tables[inter]
        a_lat, a_beta, _, _, a_dst = tables[intra]
        # inter-node phase sees the destination's intra split (intra ran first or was free)
        total = i_lat + i_beta * nbytes / a_dst[None, :]
        # intra-node phase sees the source's inter split unless the inter move is a free slice
        other = np.where(i_free, i_dst[None, :], i_src[:, None])
        return total + a_lat + a_beta * nbytes / other

    def matrix(
        self, nbytes: float, src: list[Layout], dst: list[Layout], *, train: bool
    ) -> np.ndarray:
        """Seconds to reshard every src layout into every dst layout; in training the
        gradient also goes back from dst to src."""
        fwd = self.one_way(nbytes, src, dst)
        return fwd + self.one_way(nbytes, dst, src).T if train else fwd
