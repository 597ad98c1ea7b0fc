"""Proven lower bounds on every pipelined plan of :mod:`taps_core.search.pipeline`, per shape.

A shape is ``p`` stages (``p`` divides the hosts, 2 <= p <= the layers) and
``m`` micro-batches (``m`` divides the batch and each micro-batch still splits over a stage's
hosts); any split of the layers and any per-op plan of every stage (ZeRO-1, any recomputation,
any memory) lies inside it. Its step under 1F1B is

    (m - 1) * max_i mb_i + sum_i mb_i + max_i sync_i,   mb_i = own_i / m + send_i,

with ``own_i + sync_i = T_i``, the stage plan's own step (all ``m`` micro-batches, gradient
sync once). Keeping only stage ``s``'s terms at full weight, for every ``s``,

    step >= T_s + m * send_s + sum_{j != s} (own_j / m + send_j).

``T_s`` of a stage with ``k`` layers is at least the exact unconstrained optimum of a part of
its ops (dropping ops keeps the others' costs and edges, and every cost is non-negative), plus a
layer's least cost for every layer dropped; ``own_j`` is at least the cheapest options of its ops
without gradient sync. These bounds grow with ``k``, so the least over all layer splits of the
largest of them is found exactly by a threshold search (:func:`least_max_over_splits`). The
sends (:func:`~taps_core.search.sends.send_seconds`) depend on the shape only. The cheaper
bound ``floor * (m + p - 1) / m`` (every FLOP at peak, no communication) closes a shape without
a solve when it already suffices. Memory is not used, so the bound is loose where memory binds
hard (the 1T GPT), and where one stage's gradient sync is large while another paces the step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from taps_core.cluster.links import LinkModel
from taps_core.cluster.topology import Topology
from taps_core.costs.collectives import TopologyCost
from taps_core.errors import InvalidInputError
from taps_core.ir.graph import OpGraph
from taps_core.ir.strategies import SearchSpace
from taps_core.search.configs import compute_floor_s, uniform_layers
from taps_core.search.flat import micro_graph
from taps_core.search.layered import solve_problem
from taps_core.search.memory_bound import memory_of
from taps_core.search.pipeline import (
    PIPELINE_ZERO,
    all_stage_counts,
    layer_range,
    stage_graph,
    valid_microbatches,
)
from taps_core.search.pipeline_dual import dual_bound
from taps_core.search.problem import TENSOR_PREFIX, SearchProblem, build_problem
from taps_core.search.sends import (
    boundary_sends,
    send_seconds,
    stage_send_seconds,
    with_tied_exchange,
)

MAX_STAGE_SOLVES = 24  # shapes given the exact stage bound; the rest keep the compute bound
FIT_DOUBLINGS = 40  # Lagrange multipliers doubled until a stage's part fits the memory limit
FIT_BISECTIONS = 12  # then at most this many cutting-plane steps to the dual's peak


@dataclass(frozen=True)
class ShapeBound:
    """A proven lower bound (seconds) on every pipelined plan of ``stages`` x
    ``microbatches``; ``how`` is "compute floor" or "stage optimum"."""

    stages: int
    microbatches: int
    bound_s: float
    how: str
    split: tuple[int, ...] | None = None  # pipeline_dual.estimated_split, where it was computed


@dataclass(frozen=True)
class PipelineBounds:
    """Every shape's bound against a cutoff (seconds): ``open`` holds those below it."""

    shapes: tuple[ShapeBound, ...]
    cutoff_s: float

    @property
    def open(self) -> tuple[ShapeBound, ...]:
        """Shapes whose bound does not rule out beating the cutoff."""
        return tuple(s for s in self.shapes if s.bound_s < self.cutoff_s * (1 - 1e-9))

    @property
    def lower_bound_s(self) -> float:
        """A proven bound on every pipelined plan: the least shape bound (inf without shapes)."""
        return min((s.bound_s for s in self.shapes), default=math.inf)


def shapes(graph: OpGraph, topology: Topology) -> list[tuple[int, int]]:
    """Every (stages, micro-batches) of the pipeline space for ``graph`` on ``topology``."""
    span = layer_range(graph)
    cfg = graph.meta.get("config")
    if span is None or cfg is None or not hasattr(cfg, "with_workload"):
        return []
    counts = all_stage_counts(topology.nodes, span[1] - span[0] + 1)
    return [
        (p, m) for p in sorted(counts)
        for m in valid_microbatches(cfg.batch_size, topology.nodes // p)
    ]


def pipeline_bounds(
    graph: OpGraph,
    topology: Topology,
    *,
    cutoff_s: float,
    links: LinkModel | None = None,
    space: SearchSpace = SearchSpace(),
    max_stage_solves: int = MAX_STAGE_SOLVES,
    memory_limit_bytes: float | None = None,
) -> PipelineBounds:
    """Bounds on every pipeline shape of ``graph`` in training (see the module doc).

    Shapes whose compute bound reaches ``cutoff_s`` (seconds) are closed by it; of the others,
    the ``max_stage_solves`` with the least compute bound get the exact stage bound (a fixed
    count, not a clock, so the answer never depends on the machine); every stage's plan must
    fit ``memory_limit_bytes`` per GPU (default: the GPU's memory). The model must be a stack
    of identical layers (the bound extends one layer's costs to the others)."""
    if not uniform_layers(graph):
        raise InvalidInputError("graph", graph.name, "a stack of identical layers")
    links = links or LinkModel(topology)
    limit = topology.gpu.memory_bytes if memory_limit_bytes is None else memory_limit_bytes
    found: list[ShapeBound] = []
    pending: list[tuple[float, int, int]] = []
    floor_s = compute_floor_s(graph, topology, "train")
    for p, m in shapes(graph, topology):
        cheap = floor_s * (m + p - 1) / m
        if cheap >= cutoff_s * (1 - 1e-9):
            found.append(ShapeBound(p, m, cheap, "compute floor"))
        else:
            pending.append((cheap, p, m))
    pending.sort()
    for i, (cheap, p, m) in enumerate(pending):
        if i >= max_stage_solves:
            found.append(ShapeBound(p, m, cheap, "compute floor"))
            continue
        bound, memory_bound = stage_bound(graph, topology, links, p, m, space, cutoff_s,
                                          limit)
        split = None
        if bound < cutoff_s * (1 - 1e-9) and not memory_bound:
            # memory does not bind: the multipliers' bound charges pacing and sync together
            dual = dual_bound(graph, links, p, m, space)
            bound, split = max(bound, dual.bound_s), dual.split
        found.append(ShapeBound(p, m, max(cheap, bound), "stage optimum", split))
    found.sort(key=lambda s: (s.stages, s.microbatches))
    return PipelineBounds(tuple(found), cutoff_s)


def stage_bound(
    graph: OpGraph,
    topology: Topology,
    links: LinkModel,
    p: int,
    m: int,
    space: SearchSpace = SearchSpace(),
    cutoff_s: float = math.inf,
    memory_limit_bytes: float = math.inf,
) -> tuple[float, bool]:
    """(bound, whether memory raised it): the proven bound (seconds) on every plan of ``p``
    stages x ``m`` micro-batches whose stages fit ``memory_limit_bytes`` per GPU.

    Every stage ``s`` paces the step from below (module doc): ``step >= g_s(k_s)`` with
    ``g_s(k) = T_s(k) + m * send_s + (floor of the other stages) / m + their sends``, where
    ``T_s(k)`` is a lower bound on stage ``s``'s plan with ``k`` layers, non-decreasing in
    ``k`` by at least a layer's floor. So ``step >= min over splits of max_s g_s(k_s)``,
    found exactly by a threshold search. ``T`` comes from five exact unconstrained optima
    (``k0`` middle layers; one and ``k0`` layers with the first stage's ops and with the
    last's), all subproblems of one problem built per shape, extended by a layer's least
    cost per extra layer. When the one-solve bound (the stage with the most layers
    paces it) already reaches ``cutoff_s``, it is returned. The others' floor is their ops'
    cheapest options without gradient sync (at least their compute). Where the unconstrained
    optima do not fit, each stage's ``T`` also takes its Lagrangian bound at the stage's
    micro-batches in flight (:func:`_fitting_rows`)."""
    span = layer_range(graph)
    assert span is not None
    first, last = span
    layers = last - first + 1
    k0 = -(-layers // p)
    micro = micro_graph(graph, m)
    hosts = topology.nodes // p
    sub_links = links.first_hosts(hosts)
    sub = sub_links.topology
    comm = TopologyCost(sub_links)

    # one problem: k0 layers with the ops before and after the layers, tied weights held as
    # their own copies (as separate first and last stages hold them); its parts, solved as
    # subproblems, bound the first, middle and last stages
    part = _untied(stage_graph(micro, first, first + k0 - 1, head=True, tail=True))
    problem = build_problem(part, sub, "train", comm, space=space, microbatches=m).restricted(
        PIPELINE_ZERO[0]
    )
    side = _sides(problem, part)
    t_mid = _least_cost(problem, side, {"layer"})
    # floors (seconds, all m micro-batches) without gradient sync, each an exact optimum of
    # its part alone (the edges between parts dropped) and at least its compute: a stage's
    # first layer, each later layer with the edges in from the layer before, the ops before
    # and after the layers
    own = problem.own_only()
    middle = stage_graph(micro, first, first + k0 - 1, head=False, tail=False)
    bare_s = max(_least_cost(own, side, {first}),
                 compute_floor_s(middle, sub, "train") * m / k0)
    in_s = bare_s if k0 < 2 else max(bare_s, solve_problem(
        own.subproblem(_with_inputs(own, side, first + 1))).cost)
    head_s = max(_least_cost(own, side, {"head"}),
                 compute_floor_s(_outside(micro, before=True), sub, "train") * m)
    tail_s = max(_least_cost(own, side, {"tail"}),
                 compute_floor_s(_outside(micro, before=False), sub, "train") * m)

    def own_s(k: np.ndarray | float) -> np.ndarray | float:
        """The floor of ``k`` layers of one stage without gradient sync (seconds)."""
        return bare_s + (np.asarray(k) - 1) * in_s

    total_s = p * bare_s + (layers - p) * in_s + head_s + tail_s
    cheapest = _cheapest_layer_s(problem, first)
    lone_s = max(bare_s, cheapest)  # T's least seconds for a stage's first layer
    grow_s = max(in_s, cheapest)  # and for each layer after it
    send = _sends(micro, links, p, span)
    tied_s = _tied_floor_s(micro, topology, links, p)
    # the last stage's plans priced with the tied exchange its head's shard makes (the first
    # stage's rows take the exchange's floor: its size is the last stage's choice)
    paid = with_tied_exchange(problem, micro, links, topology.nodes // p, p)

    def paced(s: int, t_s: np.ndarray | float, own_s: np.ndarray | float) -> np.ndarray:
        """The bound when stage ``s`` (plan at least ``t_s``, its ops' floor ``own_s``)
        paces the pipeline and the others run at their compute floor."""
        rest = np.maximum((total_s - np.asarray(own_s)) / m, 0.0)
        return np.asarray(t_s) + m * send[s] + rest + sum(send) - send[s]

    quick = min(
        float(paced(s, t_mid + extra, own_s(k0) + extra)) + (tied_s if s in (0, p - 1) else 0.0)
        for s in sorted({0, p - 1, *_cheapest_middle(send)})
        for extra in [(head_s if s == 0 else 0.0) + (tail_s if s == p - 1 else 0.0)]
    )
    if quick >= cutoff_s:
        return quick, False
    ks = np.arange(1, layers - p + 2, dtype=float)
    mid = np.where(ks >= k0, t_mid + (ks - k0) * grow_s, lone_s + (ks - 1) * grow_s)

    def ends(t_one: float, t_k0: float, extra_s: float) -> np.ndarray:
        """Lower bounds on a first or last stage of each layer count (seconds)."""
        grown = np.where(ks >= k0, t_k0 + (ks - k0) * grow_s, 0.0)
        return np.maximum.reduce([mid + extra_s, t_one + (ks - 1) * grow_s, grown])

    # the last layer here is not the model's: the ops after the layers stay unlinked to it,
    # which leaves edges out (a lower bound still)
    top = first + k0 - 1
    head_one = _least_cost(problem, side, {"head", first})
    head_k0 = _least_cost(problem, side, {"head", "layer"})
    tail_one = _least_cost(paid, side, {"tail", top})
    tail_k0 = _least_cost(paid, side, {"tail", "layer"})
    t_rows = [ends(head_one, head_k0, head_s)] + [mid] * (p - 2) + [
        ends(tail_one, tail_k0, tail_s + tied_s)]

    def split_bound() -> float:
        rows = [paced(0, t_rows[0], own_s(ks) + head_s) + tied_s]
        rows += [paced(i, t_rows[i], own_s(ks)) for i in range(1, p - 1)]
        rows.append(paced(p - 1, t_rows[-1], own_s(ks) + tail_s))
        return float(least_max_over_splits(np.array(rows), layers))

    bound = split_bound()
    if bound >= cutoff_s or not math.isfinite(memory_limit_bytes):
        return max(quick, bound), False
    fitting = _fitting_stage_rows(problem, paid, side, p, m, memory_limit_bytes, ks, k0, first,
                                  grow_s)
    t_rows = [np.maximum(t, f) for t, f in zip(t_rows, fitting)]
    fitted = split_bound()
    return max(quick, fitted), fitted > bound


def _fitting_stage_rows(
    problem: SearchProblem,
    paid: SearchProblem,
    side: dict[str, str | int],
    p: int,
    m: int,
    limit_bytes: float,
    ks: np.ndarray,
    k0: int,
    first: int,
    grow_s: float,
) -> list[np.ndarray]:
    """Per stage, lower bounds (seconds, per layer count ``ks``) on its plans that fit
    ``limit_bytes`` with its micro-batches in flight under 1F1B (``p - i`` for stage ``i``, at
    most ``m``): the first stage's part with ``min(p, m)`` copies, the last's (``paid``: it
    pays the tied exchange) with 1, middle stages the bound of the next fewer power-of-2
    copies computed (fewer copies need less memory, so their bound is no higher)."""
    top = first + k0 - 1
    parts = {0: ({"head", first}, {"head", "layer"}, problem, min(p, m))}
    classes = sorted({min(m, 1 << (p - i).bit_length() - 1) for i in range(1, p - 1)})
    for c in classes:
        parts[("mid", c)] = ({first}, {"layer"}, problem, c)
    parts[p - 1] = ({"tail", top}, {"tail", "layer"}, paid, 1)
    fitting = {
        key: _fitting_rows(prob, side, one, full, copies, limit_bytes, ks, k0, first, grow_s)
        for key, (one, full, prob, copies) in parts.items()
    }
    rows = []
    for i in range(p):
        if i in fitting:
            rows.append(fitting[i])
        else:
            c = max(c for c in classes if c <= min(p - i, m))
            rows.append(fitting[("mid", c)])
    return rows


def _fitting_rows(
    problem: SearchProblem,
    side: dict[str, str | int],
    one: set[str | int],
    full: set[str | int],
    copies: int,
    limit_bytes: float,
    ks: np.ndarray,
    k0: int,
    first: int,
    grow_s: float,
) -> np.ndarray:
    """Lower bounds (seconds) on a stage's plan with ``ks`` layers that fits ``limit_bytes``
    with ``copies`` micro-batches in flight: the Lagrangian ``min (time + lam * memory) -
    lam * limit`` of its parts (``one``: its first layer with its other ops, ``full``: ``k0``
    layers), maximised over ``lam`` for ``full`` by cutting planes on the supergradient
    (memory minus limit), exact once the supporting lines meet on the dual. Up to ``k0``
    layers: ``one``'s value plus a layer's least ``time + lam * memory`` per further layer
    (transient buffers count 1/k0 of a layer each, below their peak); beyond: ``full``'s
    value plus ``grow_s`` per layer (memory left out). +inf where even the leanest plan of
    ``full`` cannot fit (no stage of that many layers can)."""
    lean = problem.with_copies(copies)
    small = lean.subproblem(_picked(side, one))
    whole = lean.subproblem(_picked(side, full))
    layer_nodes = _picked(side, {first})

    def value(lam: float) -> tuple[float, float]:
        sol = solve_problem(whole, lam)
        return sol.cost - lam * limit_bytes, memory_of(whole, sol) - limit_bytes

    g0, over = value(0.0)
    if over <= 0:  # the fastest plan fits: memory adds nothing
        return np.zeros_like(ks)
    best_g, best_lam = g0, 0.0
    lo = (0.0, g0, over)  # (multiplier, dual value, supergradient > 0): memory still over
    hi_lam = max(g0, 1e-12) / limit_bytes
    for _ in range(FIT_DOUBLINGS):
        g, over = value(hi_lam)
        if g > best_g:
            best_g, best_lam = g, hi_lam
        if over <= 0:
            hi = (hi_lam, g, over)
            break
        lo, hi_lam = (hi_lam, g, over), 2 * hi_lam
    else:
        return np.where(ks >= k0, np.inf, 0.0)  # k0 layers never fit
    # the dual is concave and piecewise linear: where the supporting lines at ``lo`` and
    # ``hi`` meet lies its peak or a new line; stop when the value there reaches the lines
    for _ in range(FIT_BISECTIONS):
        (la, ga, sa), (lb, gb, sb) = lo, hi
        if sa <= sb:
            break
        lam = min(max((gb - ga + sa * la - sb * lb) / (sa - sb), la), lb)
        top = ga + sa * (lam - la)  # no multiplier's value exceeds this
        g, over = value(lam)
        if g > best_g:
            best_g, best_lam = g, lam
        if g >= top - 1e-12 * max(1.0, abs(top)):
            break  # the peak: best_g is the dual's maximum
        lo, hi = ((lam, g, over), hi) if over > 0 else (lo, (lam, g, over))
    lam = best_lam
    head = solve_problem(small, lam).cost - lam * limit_bytes
    per_layer = sum(
        min(float((lean.option_time[n][rc] + lam * lean.option_memory[n][rc]).min())
            for rc in lean.option_time[n])
        for n in layer_nodes
    )
    few = np.where(ks <= k0, head + (ks - 1) * per_layer, -np.inf)
    return np.maximum(few, np.where(ks >= k0, best_g + (ks - k0) * grow_s, -np.inf))


def _untied(graph: OpGraph) -> OpGraph:
    """``graph`` with every tied weight held as its own copy."""
    tensors = {
        n: replace(t, tied=False, tied_to="") if t.tied else t for n, t in graph.tensors.items()
    }
    return OpGraph(graph.name, tensors, graph.ops, graph.batch_letter, graph.meta)


def _sides(problem: SearchProblem, graph: OpGraph) -> dict[str, str | int]:
    """Each node's part: "head" (before the layers), "tail" (after them) or its layer."""
    start = min(i for i, op in enumerate(graph.ops) if op.layer is not None)
    order = {op.name: i for i, op in enumerate(graph.ops)}
    out: dict[str, str | int] = {}
    for n, lay in problem.layer.items():
        if lay is not None:
            out[n] = lay
        else:
            op = (problem.members.get(n) or (n.removeprefix(TENSOR_PREFIX),))[0]
            out[n] = "head" if order[op] < start else "tail"
    return out


def _picked(side: dict[str, str | int], parts: set[str | int]) -> set[str]:
    """The nodes of ``parts`` ("head", "tail", "layer" for every layer, or one layer)."""
    return {
        n for n, s in side.items()
        if s in parts or ("layer" in parts and not isinstance(s, str))
    }


def _least_cost(
    problem: SearchProblem, side: dict[str, str | int], parts: set[str | int]
) -> float:
    """The exact unconstrained optimum (seconds) of the nodes of ``parts``: the same ops priced
    as in a stage graph of their own."""
    return solve_problem(problem.subproblem(_picked(side, parts))).cost


def _with_inputs(problem: SearchProblem, side: dict[str, str | int], layer: int) -> set[str]:
    """The nodes of ``layer`` and the tensor nodes of the layer before that they read."""
    nodes = _picked(side, {layer})
    feeding = {
        e.u for e in problem.edges
        if e.v in nodes and e.u.startswith(TENSOR_PREFIX) and side.get(e.u) == layer - 1
    }
    return nodes | feeding


def least_max_over_splits(g: np.ndarray, layers: int) -> float:
    """``min over k_1 + ... + k_p = layers, k_i >= 1`` of ``max_i g[i, k_i - 1]``, for rows
    ``g`` non-decreasing in ``k``: the least value ``t`` at which every stage can take a
    layer and the stages together can take all of them (each up to the last ``k`` with
    ``g[i, k - 1] <= t``)."""
    values = np.unique(g)
    lo, hi = 0, len(values) - 1
    while lo < hi:
        mid = (lo + hi) // 2
        take = (g <= values[mid]).sum(axis=1)
        if take.min() >= 1 and take.sum() >= layers:
            hi = mid
        else:
            lo = mid + 1
    return float(values[lo])


def _cheapest_layer_s(problem: SearchProblem, layer: int) -> float:
    """Seconds one layer's ops take at least: each op node's cheapest option (any strategy,
    recomputation or ZeRO option), edges left out (they cost no less than zero)."""
    return sum(
        min(float(t.min()) for t in problem.option_time[n].values())
        for n, lay in problem.layer.items()
        if lay == layer
    )


def _cheapest_middle(send: list[float]) -> list[int]:
    """The middle stage with the fewest send seconds (the least bound among middles)."""
    middles = range(1, len(send) - 1)
    return [min(middles, key=lambda i: send[i])] if len(send) > 2 else []


def _outside(micro: OpGraph, *, before: bool) -> OpGraph:
    """The ops before the first layer (``before``) or after the last, as a graph."""
    positions = [i for i, op in enumerate(micro.ops) if op.layer is not None]
    lo, hi = positions[0], positions[-1]
    ops = tuple(op for i, op in enumerate(micro.ops) if (i < lo if before else i > hi))
    return OpGraph(micro.name, micro.tensors, ops, micro.batch_letter, micro.meta)


def _tied_floor_s(micro: OpGraph, topology: Topology, links: LinkModel, p: int) -> float:
    """Seconds the first and last stage at least spend exchanging a tied embedding's gradient
    once per step (:func:`~taps_core.search.sends.tied_exchange`): each GPU's shard holds at
    least 1/G of it, so together they send at least the whole tensor both ways; 0 untied."""
    tied = [t.nbytes for t in micro.tensors.values() if t.tied]
    if not tied:
        return 0.0
    hosts = topology.nodes // p
    first, last = tuple(range(hosts)), tuple(range((p - 1) * hosts, p * hosts))
    nbytes = float(min(tied))
    return max(send_seconds(links, first, last, nbytes)[0],
               send_seconds(links, last, first, nbytes)[0])


def _sends(micro: OpGraph, links: LinkModel, p: int, span: tuple[int, int]) -> list[float]:
    """Seconds per micro-batch each stage spends sending (forward to the next, the gradient
    back to the previous): the same helpers as the pipeline's own step
    (:func:`~taps_core.search.sends.boundary_sends`), so bound and plan agree."""
    last = [op for op in micro.ops if op.layer == span[0]][-1]
    nbytes = float(micro.tensors[last.output].nbytes)
    return stage_send_seconds(boundary_sends(links, p, [nbytes] * (p - 1)))
