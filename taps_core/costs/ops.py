"""Per-op costs: compute, the op's own collectives, weight-gradient sync, and memory per device.

Training runs a forward pass and a backward pass (two einsums per forward one: 3x the forward
compute). What moves *between* ops (reshards, partial sums handed on, activation gradients)
is costed on the graph's edges by :mod:`taps_core.costs.reshard`; this module costs what belongs to
one op under one strategy:

- compute: a roofline per pass (FLOPs over peak x efficiency, or bytes over HBM bandwidth);
- in-op collectives: the all-reduce of partial sums (unless the strategy defers them), a norm's
  statistics, a MoE token reshuffle;
- each weight's gradient sync over the devices that hold the same shard with different data
  (data parallelism), with the ZeRO stage chosen per op (:func:`op_option`);
- memory: weights, gradients, Adam state, activations kept for backward (Korthikanti et al.
  2022 accounting; only the layer input under recomputation), KV cache in inference.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from taps_core.cluster.topology import Topology
from taps_core.costs.collectives import (
    Phase,
    all_gather,
    all_gather_levels,
    all_reduce,
    all_to_all,
    reduce_scatter_levels,
)
from taps_core.ir.graph import MEMORY_BOUND_KINDS, OpGraph, OpSpec, TensorSpec
from taps_core.ir.strategies import LEVELS, Strategy, pad_factor

MODES = ("train", "infer")
STAT_BYTES = 8  # a norm all-reduces two fp32 statistics per row
LOSS_STAT_BYTES = 12  # a vocab-split loss all-reduces the max, sum of exp, target logit (fp32)
ZERO_STAGES = (0, 1, 2, 3)


@dataclass(frozen=True)
class Memory:
    """Bytes per device: parameters, gradients, optimizer state, activations, KV cache, and
    ``transient`` buffers that live for one layer at a time (the layer ZeRO-3 has gathered,
    the activations a recomputed layer rematerialises in backward).

    In inference ``activations`` is the working set of one layer (charged 1/L per layer).
    """

    parameters: float = 0.0
    gradients: float = 0.0
    optimizer: float = 0.0
    activations: float = 0.0
    kv_cache: float = 0.0
    transient: float = 0.0

    @property
    def total(self) -> float:
        return (
            self.parameters + self.gradients + self.optimizer + self.activations + self.kv_cache
            + self.transient
        )

    def __add__(self, other: Memory) -> Memory:
        return Memory(
            self.parameters + other.parameters,
            self.gradients + other.gradients,
            self.optimizer + other.optimizer,
            self.activations + other.activations,
            self.kv_cache + other.kv_cache,
            self.transient + other.transient,
        )


@dataclass(frozen=True)
class WeightShard:
    """One weight of an op under a strategy: the shard each device holds and who shares it.

    ``group`` is the (inter, intra) data-parallel group (devices with the same shard and
    different data: the gradient is a partial sum over it); ``copies`` the GPUs of a host that
    repeat the same work, which share the sync when the group crosses hosts.
    """

    name: str
    held_bytes: float
    elements: float
    group: tuple[int, int]
    copies: int
    tied: bool

    @property
    def replicas(self) -> int:
        """Devices ZeRO shards this weight over (the group, plus host copies across hosts)."""
        spread = self.copies if self.group[0] > 1 else 1
        return self.group[0] * self.group[1] * spread


@dataclass(frozen=True)
class OpCost:
    """One op under one strategy, before the per-op levers (ZeRO stage, recomputation).

    Times in seconds, sizes in bytes per device; ``fwd``/``bwd`` are the op's own collectives of
    one forward/backward pass, labelled.
    """

    compute_fwd_s: float
    fwd: tuple[tuple[str, Phase], ...]
    bwd: tuple[tuple[str, Phase], ...]
    weights: tuple[WeightShard, ...]
    saved_bytes: float  # activations kept for backward without recomputation
    boundary_bytes: float  # of which inputs from outside the layer (kept under recomputation)
    kv_cache_bytes: float
    workspace_bytes: float  # inference: this op's share of one layer's working set
    # of ``saved_bytes``: attention scores (softmax, dropout) that selective recomputation
    # re-creates in backward instead of keeping (Korthikanti et al. 2022)
    scores_bytes: float = 0.0


@dataclass(frozen=True)
class OptionCost:
    """An op with its levers chosen: seconds per step, memory, and every phase of the step.

    ``gathered_bytes`` (ZeRO-3: the parameters and gradients of the op held whole while it
    runs) and ``rematerialized_bytes`` (recomputation: the activations its forward re-creates
    for backward) are transient: a plan holds those of one layer at a time.
    """

    time_s: float
    compute_s: float
    memory: Memory
    phases: tuple[tuple[str, Phase], ...]
    gathered_bytes: float = 0.0
    rematerialized_bytes: float = 0.0


def shard(tensor: TensorSpec, letters: str, strategy: Strategy, pad: float = 1.0) -> float:
    """Bytes of ``tensor`` held per device when indexed by ``letters`` under ``strategy``."""
    return tensor.nbytes * pad / strategy.split_ways(letters)


def optimizer_bytes_per_param(dtype_bytes: int) -> float:
    """Adam state per parameter: fp32 master copy (if low precision) plus two fp32 moments."""
    return 12.0 if dtype_bytes < 4 else 8.0


def copies_intra(strategy: Strategy, gpus_per_node: int) -> int:
    """GPUs of a host doing the same work under ``strategy`` (its intra level left unused)."""
    used = math.prod(f for _, f in strategy.intra)
    return max(1, gpus_per_node // used)


def _moe_phases(graph: OpGraph, op: OpSpec, s: Strategy) -> tuple[Phase, ...]:
    """Token <-> expert reshuffle of a MoE dispatch (or combine, mirrored) on each level.

    Per level: tokens split and experts split -> all-to-all within groups of the smaller split;
    the split side feeding a replicated side -> all-gather; tokens replicated while experts are
    split -> each device selects its experts' tokens locally (free), so a device moves only the
    tokens routed to its experts on the other level.
    """
    out = graph.tensors[op.output]
    held = out.nbytes / math.prod(s.factor(ch) for ch in "bs")
    for lv in LEVELS:
        tok = math.prod(s.factor(ch, lv) for ch in "bs")
        if tok == 1:
            held /= s.factor("e", lv)  # local selection of this level's expert share
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


def _stat_phases(graph: OpGraph, op: OpSpec, s: Strategy, out_local: float) -> tuple[Phase, ...]:
    """All-reduce of a norm's per-row statistics when its statistic letters are split."""
    out = graph.tensors[op.output]
    s_inter, s_intra = s.partial(op.stat_letters)
    rows = out_local * math.prod(s.factor(ch) for ch in op.stat_letters) / out.nbytes
    stat_rows = out.numel / math.prod(
        out.shape[op.output_letters.index(ch)] for ch in op.stat_letters
    )
    return all_reduce(s_inter, s_intra, STAT_BYTES * stat_rows * rows)


def summed_letters(op: OpSpec, pos: int, deferred: bool = False) -> set[str]:
    """Letters summed over in the gradient of input ``pos``: every letter of the op it lacks,
    except for an additive bias (a matmul or conv input past the first two, indexed by output
    letters) of an op that reduces its own partial sums: the bias is added after the reduction
    on every device, so its gradient sums the output's gradient only (a row-parallel bias needs
    no sync over the tensor-parallel group, as in Megatron-LM). When the partial sums are handed
    on (``deferred``) the bias is added on one device of the group before they are."""
    letters = set(op.input_letters[pos])
    bias = op.kind in ("matmul", "conv") and pos >= 2 and letters <= set(op.output_letters)
    if bias and not deferred:
        return set(op.output_letters) - letters
    return set(op.letters) - letters


def op_cost(
    graph: OpGraph,
    op: OpSpec,
    s: Strategy,
    topology: Topology,
    mode: str,
    *,
    gpus_per_node: int | None = None,
) -> OpCost:
    """Compute, own collectives, weight shards and memory of ``op`` under strategy ``s``
    (``gpus_per_node`` may be passed to skip recounting the topology's hosts)."""
    train = mode == "train"
    g = topology.gpus_per_node if gpus_per_node is None else gpus_per_node
    copies = copies_intra(s, g)
    pads = [pad_factor(graph, op, s, lt) for lt in (*op.input_letters, op.output_letters)]
    terms = (*op.input_letters, op.output_letters)
    names = (*op.inputs, op.output)
    local_bytes = sum(
        shard(graph.tensors[t], lt, s, pad) for lt, t, pad in zip(terms, names, pads)
    )
    gpu = topology.gpu
    mem_time = local_bytes / gpu.hbm_bandwidth_Bps
    if op.kind in MEMORY_BOUND_KINDS:
        compute = mem_time
    else:
        flops = graph.flops(op) * pad_factor(graph, op, s, "".join(op.letters))
        compute = max(flops / s.ways() / (gpu.peak_flops * topology.compute_efficiency), mem_time)
    out = graph.tensors[op.output]
    out_local = shard(out, op.output_letters, s, pads[-1])
    fwd: list[tuple[str, Phase]] = []
    bwd: list[tuple[str, Phase]] = []
    if op.kind in ("moe_dispatch", "moe_combine"):
        moe = _moe_phases(graph, op, s)
        fwd += [("fwd", p) for p in moe]
        bwd += [("bwd", p) for p in moe]
    else:
        if not s.defer:
            q_inter, q_intra = s.partial(op.contracted - op.fixed)
            reduced = out_local
            if op.kind == "loss":  # vocab-parallel cross-entropy: 3 fp32 values per token
                reduced = out_local / out.dtype_bytes * LOSS_STAT_BYTES
            fwd += [("fwd", p) for p in all_reduce(q_inter, q_intra, reduced, copies)]
        if op.stat_letters:
            stats = _stat_phases(graph, op, s, out_local)
            fwd += [("stats", p) for p in stats]
            bwd += [("stats bwd", p) for p in stats]  # two more per-row sums in backward
    weights: list[WeightShard] = []
    saved = boundary = kv = scores_kept = 0.0
    leader = graph.siblings.get(op.name, (op.name,))[0] == op.name
    for pos, (letters, tname) in enumerate(zip(op.input_letters, op.inputs)):
        t = graph.tensors[tname]
        held = shard(t, letters, s, pads[pos])
        if t.is_param:
            absent = summed_letters(op, pos, s.defer) - op.fixed
            # split letters neither in the weight nor summed leave its gradient whole and the
            # same on those GPUs (a row-parallel bias over its TP group): copies of each other
            same = {ch for ch, _ in s.intra} - set(letters) - absent
            held_by = copies * math.prod(s.factor(ch, "intra") for ch in same)
            weights.append(
                WeightShard(tname, held, held / t.dtype_bytes, s.partial(absent), held_by, t.tied)
            )
        elif op.saves_inputs and leader:
            share = held / graph.savers(tname)
            saved += share
            producer = graph.producer.get(tname)
            if producer is None or graph.op_by_name[producer].layer != op.layer:
                boundary += share
        if op.kind == "attention" and pos > 0:
            kv += held
    if op.mask_bytes:
        saved += op.mask_bytes * out_local / out.dtype_bytes
    if op.score_bytes:
        sizes = graph.dim_sizes(op)
        scores = sizes["b"] * sizes["n"] * sizes["s"] * graph.tensors[op.inputs[1]].shape[1]
        scores_kept = op.score_bytes * scores / math.prod(s.factor(ch) for ch in "bns")
        saved += scores_kept
    layers = max(1, graph.num_layers)
    workspace = out_local / (layers if op.layer is not None else 1)
    return OpCost(
        compute,
        tuple(fwd),
        tuple(bwd) if train else (),
        tuple(weights),
        saved if train else 0.0,
        boundary if train else 0.0,
        0.0 if train else kv,
        0.0 if train else workspace,
        scores_kept if train else 0.0,
    )


def scaled(phase: Phase, times: int) -> Phase:
    """A phase run ``times`` times (once per micro-batch), as one phase of the summed traffic."""
    if times == 1:
        return phase
    return Phase(
        phase.collective, phase.level, phase.q, phase.per_rank_bytes * times, phase.steps * times
    )


def zero_stages(cost: OpCost, mode: str) -> tuple[int, ...]:
    """ZeRO stages worth distinguishing for this op: 0-3 in training, 0/3 (sharded weights
    gathered before the forward) in inference; only 0 when no weight has a data-parallel
    group to shard over."""
    if not any(w.replicas > 1 and not w.tied for w in cost.weights):
        return (0,)
    return ZERO_STAGES if mode == "train" else (0, 3)


def weight_phases(
    w: WeightShard, mode: str, zero: int, microbatches: int
) -> list[tuple[str, Phase]]:
    """Gradient sync (training) and parameter gathers (ZeRO-3) of one weight for one step.

    Stage 0/1: one all-reduce of the accumulated gradient. Stage 2: a reduce-scatter per
    micro-batch and an all-gather of the updated parameters. Stage 3: parameters gathered
    before each forward and each backward, gradients reduce-scattered (1.5x stage 0's bytes).
    """
    if w.tied or w.replicas <= 1:
        return []
    gi, ga = w.group
    k = microbatches
    rs = reduce_scatter_levels(gi, ga, w.held_bytes, w.copies)
    ag = all_gather_levels(gi, ga, w.held_bytes, w.copies)
    if mode != "train":
        return [(f"zero gather {w.name}", p) for p in ag] if zero == 3 else []
    if zero <= 1:
        return [(f"grad_sync {w.name}", p) for p in all_reduce(gi, ga, w.held_bytes, w.copies)]
    if zero == 2:
        return [(f"grad_sync {w.name}", scaled(p, k)) for p in rs] + [
            (f"zero gather {w.name}", p) for p in ag
        ]
    return (
        [(f"zero gather {w.name}", scaled(p, 2 * k)) for p in ag]
        + [(f"grad_sync {w.name}", scaled(p, k)) for p in rs]
    )


def weight_memory(w: WeightShard, mode: str, zero: int) -> Memory:
    """Parameters, gradients and Adam state of one weight per device at a ZeRO stage."""
    if w.tied:
        return Memory()
    r = w.replicas
    params = w.held_bytes / (r if zero >= 3 else 1)
    if mode != "train":
        return Memory(parameters=params)
    opt = w.elements * optimizer_bytes_per_param(round(w.held_bytes / w.elements))
    return Memory(
        parameters=params,
        gradients=w.held_bytes / (r if zero >= 2 else 1),
        optimizer=opt / (r if zero >= 1 else 1),
    )


def reruns_forward(op: OpSpec, recompute: bool, selective: bool) -> bool:
    """Whether ``op``'s forward runs again in backward: every op of a recomputed layer, and
    under selective recomputation the ops that keep attention scores (the attention core)."""
    return recompute or (selective and op.score_bytes > 0)


def keeps_scores(graph: OpGraph) -> bool:
    """Whether a layer of ``graph`` keeps attention scores for backward: then selective
    recomputation differs from none (not with fused attention)."""
    return any(reruns_forward(op, False, True) and op.layer is not None for op in graph.ops)


def op_option(
    cost: OpCost,
    mode: str,
    *,
    zero: int = 0,
    recompute: bool = False,
    selective: bool = False,
    microbatches: int = 1,
    activation_copies: int = 1,
    seconds: Callable[[Phase], float] | None = None,
) -> OptionCost:
    """An op's step cost with its levers: ZeRO ``zero``, ``recompute`` (the layer's forward is
    re-run in backward: 4 passes, forward collectives twice, only the layer input kept),
    ``selective`` (selective recomputation: only an op that keeps attention scores re-runs,
    keeping its inputs but not the scores) and ``microbatches`` (costs were built for one
    micro-batch; the step runs that many)."""
    k = microbatches
    train = mode == "train"
    again = train and (recompute or (selective and cost.scores_bytes > 0))
    passes = (4.0 if again else 3.0) if train else 1.0
    compute = passes * cost.compute_fwd_s * k
    phases: list[tuple[str, Phase]] = [(lbl, scaled(p, k)) for lbl, p in cost.fwd]
    if again:
        phases += [(f"recompute {lbl}", scaled(p, k)) for lbl, p in cost.fwd]
    phases += [(lbl, scaled(p, k)) for lbl, p in cost.bwd]
    kept = cost.saved_bytes
    if again:
        kept = cost.boundary_bytes if recompute else cost.saved_bytes - cost.scores_bytes
    memory = Memory(
        activations=activation_copies * kept + cost.workspace_bytes,
        kv_cache=cost.kv_cache_bytes,
    )
    for w in cost.weights:
        phases += weight_phases(w, mode, zero, k)
        memory += weight_memory(w, mode, zero)
    comm = 0.0
    if seconds is not None:
        comm = sum(seconds(p) for _, p in phases)
    remat = cost.saved_bytes - kept if again else 0.0
    return OptionCost(
        compute + comm, compute, memory, tuple(phases), gathered_bytes(cost, mode, zero), remat
    )


def gathered_bytes(cost: OpCost, mode: str, zero: int) -> float:
    """Bytes ZeRO-3 adds while the op runs: its sharded parameters gathered whole and, in
    training, their gradient before it is reduce-scattered (0 below stage 3)."""
    if zero < 3:
        return 0.0
    buffers = 2 if mode == "train" else 1
    return sum(
        buffers * w.held_bytes * (1 - 1 / w.replicas)
        for w in cost.weights
        if not w.tied and w.replicas > 1
    )
