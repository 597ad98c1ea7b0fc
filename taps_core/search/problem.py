"""Turn (model graph, topology, mode, cost model) into the pairwise problem the search solves.

Nodes:
- one *op node* per op, or per sibling group (Q/K/V, gate/up: one shared strategy, see
  :attr:`~taps_core.ir.graph.OpGraph.siblings`), named after its first op. Its strategies are the
  shardings; each strategy has *options* (the ZeRO stage), with a time and a memory each, per
  recomputation *variant* of its layer: ``KEPT`` for backward, ``FULL`` (the layer's forward
  re-run in backward, only its input kept) and, when the model keeps attention scores,
  ``SELECTIVE`` (only the attention core re-run, its scores not kept; Korthikanti et al. 2022);
- one *tensor node* per op output read by another op, whose strategies are the layouts its
  producer can emit (partial sums included when a strategy defers them).

Edges: the producer selects its layout (0 for the layout a strategy emits, +inf otherwise); each
reader pays the conversion from the tensor's layout to the layout it reads and, in training, the
way back of its (possibly partial) input gradient. A tied weight adds an edge between its owner
and its reader. Costs of identical ops and edges are computed once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property

import numpy as np

from taps_core.cluster.topology import Topology
from taps_core.costs.collectives import CommCost
from taps_core.costs.ops import keeps_scores, reruns_forward
from taps_core.costs.reshard import Resharder, plain
from taps_core.errors import InfeasibleError
from taps_core.ir.graph import OpGraph, OpSpec
from taps_core.ir.strategies import (
    Layout,
    Mesh,
    SearchSpace,
    Strategy,
    op_strategies,
    reader_layouts,
)
from taps_core.search.op_tables import BuildMemo, op_signature
from taps_core.solver.problem import CostGraph

StrategyFilter = Callable[[OpGraph, OpSpec, Strategy], bool]
TENSOR_PREFIX = "tensor:"
KEPT, FULL, SELECTIVE = 0, 1, 2  # recomputation variants of a layer (keys of option_time[n])
# the order variants are tried in: ties between equal costs go to the one recomputing less
VARIANT_ORDER = (KEPT, SELECTIVE, FULL)


@dataclass(frozen=True)
class Edge:
    """Edge ``u -> v`` with its cost matrix [S_u, S_v] for kept, fully recomputed and
    selectively recomputed layers (``selective`` None: as kept)."""

    u: str
    v: str
    keep: np.ndarray
    recompute: np.ndarray
    selective: np.ndarray | None = None

    def matrix(self, variant: int) -> np.ndarray:
        """The cost matrix in recomputation ``variant``."""
        if variant == FULL:
            return self.recompute
        if variant == SELECTIVE and self.selective is not None:
            return self.selective
        return self.keep

    def scaled(self, factor: float) -> Edge:
        """The edge with every matrix times ``factor``."""
        sel = None if self.selective is None else factor * self.selective
        return Edge(self.u, self.v, factor * self.keep, factor * self.recompute, sel)


@dataclass
class SearchProblem:
    """Strategies, options and edges of one planning run (see the module docstring).

    ``option_time[node][variant]`` and ``option_memory[node][variant]`` are arrays
    [strategies, options] of seconds and bytes per device (+inf time for an absent option),
    for each recomputation variant of the problem (:attr:`variant_keys`, the same for every
    node; an op outside the layers has the kept arrays in each);
    ``option_zero[node]`` is the ZeRO stage of each option column.
    """

    graph: OpGraph
    topology: Topology
    mesh: Mesh
    mode: str
    microbatches: int
    strategies: dict[str, list[Strategy]]
    members: dict[str, tuple[str, ...]]
    layouts: dict[str, list[Layout]]
    option_time: dict[str, dict[int, np.ndarray]]
    option_memory: dict[str, dict[int, np.ndarray]]
    option_zero: dict[str, tuple[int, ...]]
    edges: list[Edge]
    layer: dict[str, int | None]
    # per op node and strategy: seconds without weight phases (gradient sync, ZeRO gathers),
    # no recomputation: what the node costs at least under any of its options
    own_time: dict[str, np.ndarray] = field(default_factory=dict)
    # per node and recomputation variant: bytes per strategy of one micro-batch's kept
    # activations (``option_memory`` holds ``activation_copies`` of them)
    activation_bytes: dict[str, dict[int, np.ndarray]] = field(default_factory=dict)
    activation_copies: int = 1
    # per node and variant: bytes per strategy that scale with the micro-batch size (every
    # kept activation copy and the rematerialised layer), included in ``option_memory``
    batch_memory: dict[str, dict[int, np.ndarray]] = field(default_factory=dict)
    # per op node: seconds each extra micro-batch adds to each option's weight phases (the
    # ZeRO-2/3 reduce-scatters and gathers run once per micro-batch), [strategies, options]
    sync_per_microbatch: dict[str, np.ndarray] = field(default_factory=dict)
    # results that depend only on the structure (nodes, layers, layouts, edge endpoints; e.g.
    # the chain of identical layers), shared by the problems derived from this one with the
    # same structure (every ``replace`` but :meth:`subproblem`)
    structure_memo: dict[str, object] = field(default_factory=dict, compare=False, repr=False)

    @property
    def nodes(self) -> list[str]:
        """Every node, op and tensor nodes, in graph order."""
        return list(self.option_time)

    @property
    def num_strategies(self) -> int:
        return int(sum(len(v[KEPT]) for v in self.option_time.values()))

    @property
    def variant_keys(self) -> tuple[int, ...]:
        """The recomputation variants this problem prices, in :data:`VARIANT_ORDER`."""
        first = next(iter(self.option_time.values()), {KEPT: None})
        return tuple(v for v in VARIANT_ORDER if v in first)

    @cached_property
    def recompute_never_faster(self) -> bool:
        """Whether every node and edge costs at least as many seconds recomputed as kept
        (entrywise): then at memory weight 0 the recomputed variant cannot win and need not
        be solved. True for every problem built here (recomputing adds a forward pass, and
        conversions inside a layer run again), checked rather than assumed, for both the full
        and the selective variant."""
        seen: set[tuple[int, int]] = set()

        def dominated(kept: np.ndarray, again: np.ndarray) -> bool:
            key = (id(kept), id(again))
            if again is kept or key in seen:
                return True
            seen.add(key)
            return bool(np.all(again >= kept))

        again = [v for v in self.variant_keys if v != KEPT]
        return all(
            dominated(v[KEPT], v[r]) for v in self.option_time.values() for r in again
        ) and all(dominated(e.keep, e.matrix(r)) for e in self.edges for r in again)

    def node_cost(self, node: str, weight: float, recompute: int) -> tuple[np.ndarray, np.ndarray]:
        """(cost per strategy, chosen option per strategy) at ``time + weight * memory``.

        Ties between options go to the one holding less memory (ZeRO-2 over ZeRO-0 at equal
        time), then to the lower stage.
        """
        return _weighted(
            self.option_time[node][recompute], self.option_memory[node][recompute], weight
        )

    def node_costs(
        self, weight: float, recompute: int, nodes: Iterable[str] | None = None
    ) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """:meth:`node_cost` of every node (or of ``nodes``), in graph order, computed once per
        distinct pair of arrays (the nodes of identical layers share theirs)."""
        keep = self.option_time.keys() if nodes is None else set(nodes)
        memo: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}
        out = {}
        for n in self.option_time:
            if n not in keep:
                continue
            t, m = self.option_time[n][recompute], self.option_memory[n][recompute]
            key = (id(t), id(m))
            if key not in memo:
                memo[key] = _weighted(t, m, weight)
            out[n] = memo[key]
        return out

    def restricted(self, zero: int) -> SearchProblem:
        """The same problem with one ZeRO stage for every op (the plan-wide setting, as in
        DeepSpeed or Megatron's distributed optimizer): one option column per node. Ops whose
        weights have no data-parallel group to shard over keep stage 0 (ZeRO does nothing)."""
        times: dict[str, dict[int, np.ndarray]] = {}
        mems: dict[str, dict[int, np.ndarray]] = {}
        zeros: dict[str, tuple[int, ...]] = {}
        slopes: dict[str, np.ndarray] = {}
        shared = _Shared()

        def column(values: np.ndarray, times: np.ndarray, col: int | None) -> np.ndarray:
            """``values`` at the stage's column where it has one, else at stage 0."""
            if col is None:
                return values[:, :1]
            return np.where(np.isfinite(times[:, col]), values[:, col], values[:, 0])[:, None]

        for n, stages in self.option_zero.items():
            col = stages.index(zero) if zero in stages else None
            times[n], mems[n] = {}, {}
            if n in self.sync_per_microbatch:
                d, t = self.sync_per_microbatch[n], self.option_time[n][KEPT]
                slopes[n] = shared(column, d, t, col)
            for rc in self.option_time[n]:
                t, m = self.option_time[n][rc], self.option_memory[n][rc]
                times[n][rc], mems[n][rc] = shared(column, t, t, col), shared(column, m, t, col)
            zeros[n] = (zero if col is not None else 0,)
        return replace(self, option_time=times, option_memory=mems, option_zero=zeros,
                       sync_per_microbatch=slopes)

    def subproblem(self, keep: set[str]) -> SearchProblem:
        """The same problem on the nodes ``keep`` only (edges to the others dropped): each kept
        op priced as before, as in a graph of those ops alone."""
        def only(d: dict) -> dict:
            return {n: v for n, v in d.items() if n in keep}

        return replace(
            self, strategies=only(self.strategies), members=only(self.members),
            layouts=only(self.layouts), option_time=only(self.option_time),
            option_memory=only(self.option_memory), option_zero=only(self.option_zero),
            edges=[e for e in self.edges if e.u in keep and e.v in keep],
            layer=only(self.layer), own_time=only(self.own_time), structure_memo={},
            activation_bytes=only(self.activation_bytes), batch_memory=only(self.batch_memory),
            sync_per_microbatch=only(self.sync_per_microbatch),
        )

    def with_copies(self, copies: int) -> SearchProblem:
        """The same problem with ``copies`` micro-batches' activations held at once (a pipeline
        stage under 1F1B holds one per micro-batch in flight): memory moves by the kept
        activations per copy; times are unchanged."""
        extra = copies - self.activation_copies
        act = self.activation_bytes
        shared = _Shared()

        def more(m: np.ndarray, a: np.ndarray) -> np.ndarray:
            return m + extra * (a[:, None] if m.ndim == 2 else a)

        mems = {
            n: {rc: shared(more, m, act[n][rc]) for rc, m in v.items()} if n in act else v
            for n, v in self.option_memory.items()
        }
        batch = {
            n: {rc: shared(more, m, act[n][rc]) for rc, m in v.items()} if n in act else v
            for n, v in self.batch_memory.items()
        }
        return replace(self, option_memory=mems, batch_memory=batch, activation_copies=copies)

    def relaxed(self, microbatches: int, through: int | None = None) -> SearchProblem:
        """A relaxation of this step's problem at ``microbatches`` (a multiple of this one's
        count ``k0``) made without building it: for every plan valid there, its time and memory
        here are no more than there, so the Lagrangian bound of the relaxation bounds that
        problem from below (a count is pruned without its costs being computed).

        Why it holds, per plan at ``k = microbatches`` with micro-batches ``k0 / k`` this size:
        its strategies are valid here (the batch splits divide the larger micro-batch too);
        memory that scales with the micro-batch size is exactly ``k0 / k`` of this one's and
        the rest is unchanged; an op's step costs ``k`` passes of ``max(F b, a + C b)`` compute
        and ``alpha + beta b`` per collective, i.e. ``max(F B, k a + C B) + k alpha + beta B``
        for the batch ``B = k b``: at least its cost at ``k0``; conversions likewise; gradient
        syncs are exact (ZeRO-2/3's per-micro-batch phases added for the ``k - k0`` extra).

        ``through`` (a larger count) prices memory as there instead: the relaxation then bounds
        every count from ``microbatches`` to ``through`` that is a multiple of ``k0`` at once
        (with more micro-batches a plan's time only grows and its memory only shrinks)."""
        k0 = self.microbatches
        through = microbatches if through is None else through
        if microbatches < k0 or microbatches % k0 or through < microbatches:
            raise ValueError(
                f"relaxed: {microbatches} (through {through}) is not a multiple of {k0} "
                "micro-batches, or through is smaller"
            )
        extra, shrink = microbatches - k0, 1.0 - k0 / through
        shared = _Shared()

        def slower(t: np.ndarray, slope: np.ndarray) -> np.ndarray:
            return np.where(np.isfinite(t), t + extra * slope, np.inf)

        def leaner(m: np.ndarray, scaled: np.ndarray) -> np.ndarray:
            return m - shrink * scaled[:, None]

        def smaller(a: np.ndarray) -> np.ndarray:
            return (1.0 - shrink) * a

        times: dict[str, dict[int, np.ndarray]] = {}
        mems: dict[str, dict[int, np.ndarray]] = {}
        for n, by_rc in self.option_time.items():
            slope = self.sync_per_microbatch.get(n)
            times[n] = by_rc if slope is None else {
                rc: shared(slower, t, slope) for rc, t in by_rc.items()
            }
            scaled = self.batch_memory.get(n, {})
            mems[n] = {
                rc: shared(leaner, m, scaled[rc]) if rc in scaled else m
                for rc, m in self.option_memory[n].items()
            }
        act = {n: {rc: shared(smaller, a) for rc, a in v.items()}
               for n, v in self.activation_bytes.items()}
        batch = {n: {rc: shared(smaller, a) for rc, a in v.items()}
                 for n, v in self.batch_memory.items()}
        return replace(self, microbatches=microbatches, option_time=times, option_memory=mems,
                       activation_bytes=act, batch_memory=batch)

    def own_only(self) -> SearchProblem:
        """The problem priced without weight phases: each op node's strategies at ``own_time``
        (one option), tensor nodes and edges as before (activations kept, not recomputed).
        Its optimum is a lower bound on any plan's seconds minus its gradient sync."""
        times: dict[str, dict[int, np.ndarray]] = {}
        mems: dict[str, dict[int, np.ndarray]] = {}
        for n, t in self.option_time.items():
            own = self.own_time[n][:, None] if n in self.own_time else t[KEPT][:, :1]
            times[n] = dict.fromkeys(t, own)
            mems[n] = dict.fromkeys(t, np.zeros_like(own))
        edges = [Edge(e.u, e.v, e.keep, e.keep) for e in self.edges]
        zeros = {n: (0,) for n in self.option_time}
        return replace(self, option_time=times, option_memory=mems, option_zero=zeros,
                       edges=edges, activation_bytes={}, batch_memory={},
                       sync_per_microbatch={})

    def sync_time(self, node: str) -> np.ndarray:
        """Seconds of the node's weight phases (gradient sync, ZeRO gathers) per strategy and
        option, [strategies, options]: its time minus ``own_time`` (0 for tensor nodes and
        absent options)."""
        t = self.option_time[node][KEPT]
        if node not in self.own_time:
            return np.zeros_like(t)
        return np.where(np.isfinite(t), t - self.own_time[node][:, None], 0.0)

    def reweighted(self, own_weight: float, sync_weight: float) -> SearchProblem:
        """The problem at ``own_weight x (time without weight phases) + sync_weight x (weight
        phases)``, memory unchanged: what a pipeline stage costs when its per-micro-batch work
        and its once-per-step gradient sync count differently in the step (the 1F1B bound's
        multipliers, :mod:`taps_core.search.pipeline_dual`)."""
        times: dict[str, dict[int, np.ndarray]] = {}
        for n, by_rc in self.option_time.items():
            sync = self.sync_time(n)
            times[n] = {
                rc: np.where(np.isfinite(t), own_weight * (t - sync) + sync_weight * sync,
                             np.inf)
                for rc, t in by_rc.items()
            }
        edges = [e.scaled(own_weight) for e in self.edges]
        slopes = {n: sync_weight * d for n, d in self.sync_per_microbatch.items()}
        return replace(self, option_time=times, edges=edges, sync_per_microbatch=slopes)

    def min_memory(self, node: str) -> float:
        """Least memory this node can hold under any strategy, option and variant (bytes)."""
        return float(min(np.min(m) for m in self.option_memory[node].values()))

    def cost_graph(
        self, memory_weight: float = 0.0, nodes: set[str] | None = None, recompute: int = KEPT
    ) -> CostGraph:
        """The problem at ``time + memory_weight * memory`` (optionally a subgraph), with every
        layered node in the given variant."""
        costs = {n: c for n, (c, _) in self.node_costs(memory_weight, recompute, nodes).items()}
        edges = tuple(
            (e.u, e.v, e.matrix(recompute))
            for e in self.edges
            if e.u in costs and e.v in costs
        )
        return CostGraph(costs, edges)


class _Shared:
    """Arrays derived once per function and distinct source arrays (by identity, with any
    plain arguments): nodes that share arrays (identical layers) keep sharing them in a
    derived problem, whose node costs are then priced once per kind of node. Local to one
    derivation, while its source arrays are alive."""

    def __init__(self) -> None:
        self._memo: dict[tuple, np.ndarray] = {}

    def __call__(self, make: Callable[..., np.ndarray], *args: object) -> np.ndarray:
        key = (make, *(id(a) if isinstance(a, np.ndarray) else a for a in args))
        if key not in self._memo:
            self._memo[key] = make(*args)
        return self._memo[key]


def _weighted(
    time_s: np.ndarray, memory_bytes: np.ndarray, weight: float
) -> tuple[np.ndarray, np.ndarray]:
    """(cost per strategy, chosen option per strategy) at ``time + weight * memory`` of one
    node's [strategies, options] arrays; ties between options go to the one holding less
    memory, then to the lower column."""
    val = time_s + weight * memory_bytes if weight else time_s
    if val.shape[1] == 1:  # one option (no ZeRO choice): nothing to weigh against
        return val[:, 0].copy(), np.zeros(len(val), dtype=np.intp)
    best = val.min(axis=1)
    tol = 1e-12 * np.abs(best) + 1e-300
    tie = np.where(val <= (best + tol)[:, None], memory_bytes, np.inf)
    return best, tie.argmin(axis=1)


def _group_strategies(
    graph: OpGraph,
    ops: list[OpSpec],
    mesh: Mesh,
    space: SearchSpace,
    allow: StrategyFilter | None,
) -> list[Strategy]:
    """Strategies valid for every op of a sibling group, in the first op's order."""
    lists = []
    for op in ops:
        strats = op_strategies(graph, op, mesh, space)
        if allow is not None:
            strats = [s for s in strats if allow(graph, op, s)]
        lists.append(strats)
    common = set(lists[0]).intersection(*map(set, lists[1:]))
    out = [s for s in lists[0] if s in common]
    if not out:
        op = ops[0]
        sizes = ", ".join(f"{k}={v}" for k, v in graph.dim_sizes(op).items())
        raise InfeasibleError(
            f"op {op.name}: no strategy splits its dims ({sizes}) over {mesh.inter} "
            f"nodes x {mesh.intra} GPUs under these plan rules"
        )
    return out


def _sibling_groups(graph: OpGraph) -> tuple[dict[str, tuple[str, ...]], dict[str, str]]:
    """(search node -> the sibling ops it decides together, op -> its node): siblings share
    one choice (e.g. Q, K and V of a layer)."""
    members: dict[str, tuple[str, ...]] = {}
    node_of: dict[str, str] = {}
    for op in graph.ops:
        group = graph.siblings.get(op.name, (op.name,))
        members.setdefault(group[0], group)
        node_of[op.name] = group[0]
    return members, node_of


def _group_options(
    graph: OpGraph,
    ops: list[OpSpec],
    mesh: Mesh,
    mode: str,
    memo: BuildMemo,
    space: SearchSpace,
    allow: StrategyFilter | None,
    k: int,
    activation_copies: int,
    selective: bool,
) -> tuple:
    """One search node's options: (strategies, time s and memory bytes per option by
    recomputation variant (``SELECTIVE`` too when ``selective``), ZeRO stages of the columns,
    each strategy's time without gradient sync and ZeRO gathers, kept activation bytes of one
    micro-batch by variant, bytes that scale with the micro-batch size by variant, seconds per
    extra micro-batch per option), per step of ``k`` micro-batches."""
    train = mode == "train"
    stages = (0, 1, 2, 3) if train else (0, 3)
    strats = _group_strategies(graph, ops, mesh, space, allow)
    tabs = [memo.tables(graph, op, strats, mode, stages, k) for op in ops]
    compute = sum(t.compute for t in tabs)
    fwd = sum(t.fwd for t in tabs)
    bwd = sum(t.bwd for t in tabs)
    wt = sum(t.weight_time for t in tabs)
    wm = sum(t.weight_memory for t in tabs)
    slope = sum(t.weight_slope for t in tabs)
    fixed = sum(t.fixed_memory for t in tabs)
    used = [j for j in range(len(stages)) if np.isfinite(wt[:, j]).any()]
    wt, wm, slope = wt[:, used], wm[:, used], slope[:, used]
    zeros = tuple(stages[j] for j in used)
    times, mems, per_copy, batch = {}, {}, {}, {}
    # ops whose forward re-runs in each variant (selective: those keeping attention scores)
    again = {KEPT: [False] * len(ops), FULL: [True] * len(ops),
             SELECTIVE: [reruns_forward(op, False, True) for op in ops]}
    variants = ((KEPT, FULL, SELECTIVE) if selective else (KEPT, FULL)) if train else (KEPT,)
    for rc in variants:
        if rc == SELECTIVE and not any(again[SELECTIVE]):  # nothing to re-create: as kept
            times[rc], mems[rc], per_copy[rc], batch[rc] = (
                times[KEPT], mems[KEPT], per_copy[KEPT], batch[KEPT])
            continue
        passes = (4.0 if rc == FULL else 3.0) if train else 1.0
        base = k * (passes * compute + (2 if rc == FULL else 1) * fwd + bwd)
        if rc == SELECTIVE:  # the attention core's forward (and its collectives) once more
            base = base + k * sum(t.compute + t.fwd for t, re in zip(tabs, again[rc]) if re)
        per_copy[rc] = sum(_kept_bytes(t, rc, re) for t, re in zip(tabs, again[rc]))
        act = activation_copies * per_copy[rc]
        if rc != KEPT:  # what the layer re-creates in backward, one at a time (1/L each)
            remade = sum(t.saved - _kept_bytes(t, rc, re) for t, re in zip(tabs, again[rc]))
            act = act + remade / max(1, graph.num_layers)
        times[rc] = base[:, None] + wt
        if rc == KEPT:
            own = base
        batch[rc] = act + fixed
        mems[rc] = batch[rc][:, None] + wm
    if not train:
        times[FULL], mems[FULL], per_copy[FULL] = times[KEPT], mems[KEPT], per_copy[KEPT]
        batch[FULL] = batch[KEPT]
    return strats, times, mems, zeros, own, per_copy, batch, slope


def _kept_bytes(tables, variant: int, again: bool) -> np.ndarray:  # type: ignore[no-untyped-def]
    """Activation bytes per strategy an op keeps for backward in ``variant`` (``again``:
    its forward re-runs): the layer input under full recomputation, all but the attention
    scores under selective, everything when kept."""
    if not again:
        return tables.saved
    return tables.boundary if variant == FULL else tables.saved - tables.scores


def build_problem(
    graph: OpGraph,
    topology: Topology,
    mode: str,
    comm: CommCost,
    *,
    space: SearchSpace = SearchSpace(),
    allow: StrategyFilter | None = None,
    microbatches: int = 1,
    activation_copies: int = 1,
    memo: BuildMemo | None = None,
) -> SearchProblem:
    """Build node options and edges of every op (costs per micro-batch x ``microbatches``).

    ``activation_copies``: micro-batches whose activations are held at once (a pipeline
    stage under 1F1B holds several); kept activations count that many times. ``memo``: the
    tables shared by the builds of one search on this topology with this ``comm`` (each
    micro-batch count, each pipeline stage of equal width)."""
    mesh = Mesh(topology.nodes, topology.gpus_per_node)
    if memo is None:
        memo = BuildMemo(topology, comm)
    elif memo.topology is not topology or memo.comm is not comm:
        raise ValueError("build_problem: memo was made for another topology or cost model")
    resharder = memo.resharder
    train = mode == "train"
    k = microbatches
    members, node_of = _sibling_groups(graph)
    # selective recomputation is a variant of its own only where a layer keeps scores
    selective = train and keeps_scores(graph)
    variants = (KEPT, FULL, SELECTIVE) if selective else (KEPT, FULL)
    strategies: dict[str, list[Strategy]] = {}
    option_time: dict[str, dict[int, np.ndarray]] = {}
    option_memory: dict[str, dict[int, np.ndarray]] = {}
    option_zero: dict[str, tuple[int, ...]] = {}
    layer: dict[str, int | None] = {}
    own_time: dict[str, np.ndarray] = {}
    activation: dict[str, dict[int, np.ndarray]] = {}
    batch_memory: dict[str, dict[int, np.ndarray]] = {}
    sync_slope: dict[str, np.ndarray] = {}
    groups: dict[tuple, tuple] = {}
    for node, names in members.items():
        ops = [graph.op_by_name[n] for n in names]
        sig = (tuple(op_signature(graph, op) for op in ops), activation_copies)
        if sig not in groups:
            groups[sig] = _group_options(
                graph, ops, mesh, mode, memo, space, allow, k, activation_copies, selective
            )
        strats, times, mems, zeros, own, per_copy, batch, slope = groups[sig]
        own_time[node], sync_slope[node], strategies[node] = own, slope, strats
        lay = ops[0].layer
        # ops outside the layers are never recomputed: every variant is the kept one
        pick = _same if train and lay is not None else _kept_only
        activation[node], option_time[node] = pick(per_copy), pick(times)
        option_memory[node], batch_memory[node] = pick(mems), pick(batch)
        option_zero[node], layer[node] = zeros, lay
    layouts: dict[str, list[Layout]] = {}
    edges: list[Edge] = []
    emit_memo: dict[tuple, tuple[list[Layout], np.ndarray, np.ndarray]] = {}
    edge_memo: dict[tuple, tuple] = {}  # (kept, recomputed, selectively recomputed)
    for node, names in members.items():
        for name in names:
            op = graph.op_by_name[name]
            readers = list(dict.fromkeys(node_of[c] for c in graph.consumers.get(op.output, ())))
            if not readers:
                continue
            tnode = TENSOR_PREFIX + op.output
            sig = op_signature(graph, op)
            emit_key = (sig, id(strategies[node]))
            if emit_key not in emit_memo:
                emitted = [s.output_layout(op) for s in strategies[node]]
                uniq = sorted(set(emitted))
                index = {lay: i for i, lay in enumerate(uniq)}
                select = np.full((len(emitted), len(uniq)), np.inf)
                select[np.arange(len(emitted)), [index[e] for e in emitted]] = 0.0
                # one zero array per kind of tensor: nodes sharing arrays are priced once
                emit_memo[emit_key] = (uniq, select, np.zeros((len(uniq), 1)))
            uniq, select, zero = emit_memo[emit_key]
            layouts[tnode] = uniq
            option_time[tnode] = dict.fromkeys(variants, zero)
            option_memory[tnode] = dict.fromkeys(variants, zero)
            option_zero[tnode] = (0,)
            layer[tnode] = op.layer
            edges.append(Edge(node, tnode, select, select))
            tensor = graph.tensors[op.output]
            for reader in readers:
                rop = graph.op_by_name[reader]
                for pos, tname in enumerate(rop.inputs):
                    if tname != op.output:
                        continue
                    same_layer = rop.layer is not None and rop.layer == op.layer
                    key = (emit_key, op_signature(graph, rop), id(strategies[reader]), pos)
                    key = (*key, same_layer)
                    if key not in edge_memo:
                        edge_memo[key] = _read_costs(
                            resharder, tensor.nbytes, uniq, rop, pos, strategies[reader],
                            train, k, same_layer, selective,
                        )
                    edges.append(Edge(tnode, reader, *edge_memo[key]))
    edges += _tie_edges(graph, node_of, strategies, resharder, train)
    ordered = {n: option_time[n] for n in _graph_order(graph, members, layouts)}
    return SearchProblem(
        graph,
        topology,
        mesh,
        mode,
        k,
        strategies,
        members,
        layouts,
        ordered,
        {n: option_memory[n] for n in ordered},
        {n: option_zero[n] for n in ordered},
        edges,
        {n: layer[n] for n in ordered},
        own_time,
        activation,
        activation_copies,
        batch_memory,
        sync_slope,
    )


def _read_costs(
    resharder: Resharder, nbytes: float, layouts: list[Layout], reader: OpSpec, pos: int,
    strategies: list[Strategy], train: bool, k: int, same_layer: bool, selective: bool,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Seconds [layouts, reader strategies] for ``reader`` to read a tensor of ``nbytes`` at
    input ``pos`` over ``k`` micro-batches, kept / fully recomputed / selectively recomputed
    (None without that variant): a recomputed reader in the producer's layer converts its
    input again in backward; under selective recomputation only the attention core does."""
    fwd, bwd = _reader_matrices(resharder, nbytes, layouts, reader, pos, strategies, train)
    keep = k * (fwd + bwd)  # activations and their gradients move once per micro-batch
    again = k * (2 * fwd + bwd) if same_layer and train else keep
    redo = again if reruns_forward(reader, False, True) else keep
    return keep, again, redo if selective else None


def _same(by_variant: dict[int, np.ndarray]) -> dict[int, np.ndarray]:
    return by_variant


def _kept_only(by_variant: dict[int, np.ndarray]) -> dict[int, np.ndarray]:
    """Every recomputation variant as the kept one (an op that is never recomputed)."""
    return dict.fromkeys(by_variant, by_variant[KEPT])


def _graph_order(
    graph: OpGraph, members: dict[str, tuple[str, ...]], layouts: dict[str, list[Layout]]
) -> list[str]:
    """Op nodes in graph order, each followed by its members' tensor nodes."""
    out: list[str] = []
    for node, names in members.items():
        out.append(node)
        out += [
            TENSOR_PREFIX + graph.op_by_name[n].output
            for n in names
            if TENSOR_PREFIX + graph.op_by_name[n].output in layouts
        ]
    return out


def _reader_matrices(
    resharder: Resharder,
    nbytes: float,
    tensor_layouts: list[Layout],
    op: OpSpec,
    pos: int,
    strats: list[Strategy],
    train: bool,
) -> tuple[np.ndarray, np.ndarray]:
    """(forward conversion, gradient's way back) seconds, each [tensor layouts, strategies]."""
    wanted, grads = reader_layouts(op, pos, strats)
    fwd = _convert_unique(resharder, nbytes, tensor_layouts, wanted)
    if not train:
        return fwd, np.zeros_like(fwd)
    targets = [plain(t) for t in tensor_layouts]
    bwd = _convert_unique(resharder, nbytes, grads, targets).T
    return fwd, bwd


def _convert_unique(
    resharder: Resharder, nbytes: float, src: list[Layout], dst: list[Layout]
) -> np.ndarray:
    """:meth:`Resharder.convert` over the distinct layouts, expanded back to the lists."""
    us, ud = sorted(set(src)), sorted(set(dst))
    mat = resharder.convert(nbytes, us, ud)
    pos_s = {x: i for i, x in enumerate(us)}
    pos_d = {x: i for i, x in enumerate(ud)}
    ia = np.array([pos_s[x] for x in src])
    ib = np.array([pos_d[x] for x in dst])
    return mat[np.ix_(ia, ib)]


def _tie_edges(
    graph: OpGraph,
    node_of: dict[str, str],
    strategies: dict[str, list[Strategy]],
    resharder: Resharder,
    train: bool,
) -> list[Edge]:
    """Edges joining a tied weight's reader to its owner's reader: the weight is resharded to
    the reader's layout, and in training the reader's gradient is reduced into the owner's
    layout (free when both hold it the same way with the same partial sums: summed locally)."""
    edges: list[Edge] = []
    for op in graph.ops:
        for pos, tname in enumerate(op.inputs):
            t = graph.tensors[tname]
            if not t.tied:
                continue
            owner = graph.tied_owner(tname, op.name)
            if owner is None:
                continue
            oop = graph.op_by_name[owner]
            opos = oop.inputs.index(t.tied_to)
            own_w, own_g = reader_layouts(oop, opos, strategies[node_of[owner]])
            head_w, head_g = reader_layouts(op, pos, strategies[node_of[op.name]])
            fwd = _convert_unique(resharder, t.nbytes, [plain(x) for x in own_w], head_w)
            mat = fwd
            if train:
                back = _convert_unique(resharder, t.nbytes, head_g, [plain(x) for x in own_w]).T
                codes = {x: i for i, x in enumerate(dict.fromkeys([*own_g, *head_g]))}
                own_c = np.array([codes[x] for x in own_g])
                head_c = np.array([codes[x] for x in head_g])
                same = own_c[:, None] == head_c[None, :]
                mat = fwd + np.where(same, 0.0, back)
            edges.append(Edge(node_of[owner], node_of[op.name], mat, mat))
    return edges


def expanded_problem(
    problem: SearchProblem, recompute: int | Mapping[int, int] = KEPT
) -> tuple[CostGraph, dict[str, np.ndarray]]:
    """The problem with every (strategy, option) pair as its own strategy, and the memory of
    each (bytes per device): what an ILP with the exact memory constraint needs. Node ``n``'s
    expanded index ``s * options + o`` is strategy ``s`` with option ``o``; absent options
    cost +inf. Layered nodes take the ``recompute`` variant, or their layer's in a mapping
    ``{layer: variant}`` (an edge its reader's, as the search prices it)."""

    def variant(node: str) -> int:
        if isinstance(recompute, int):
            return recompute
        lay = problem.layer.get(node)
        return KEPT if lay is None else recompute[lay]

    costs: dict[str, np.ndarray] = {}
    memory: dict[str, np.ndarray] = {}
    width: dict[str, int] = {}
    for n in problem.option_time:
        t = problem.option_time[n][variant(n)]
        costs[n] = t.ravel().copy()
        memory[n] = np.where(np.isfinite(t), problem.option_memory[n][variant(n)], 0.0).ravel()
        width[n] = t.shape[1]
    edges = []
    for e in problem.edges:
        mat = e.matrix(variant(e.v))
        mat = np.repeat(np.repeat(mat, width[e.u], axis=0), width[e.v], axis=1)
        edges.append((e.u, e.v, mat))
    return CostGraph(costs, tuple(edges)), memory
