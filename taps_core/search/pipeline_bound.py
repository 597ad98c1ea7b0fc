"""Proven lower bounds on every pipelined plan of :mod:`taps_core.search.pipeline`, per shape.

A shape is ``p`` stages (``p`` divides the hosts, 2 <= p <= the layers and ``MAX_STAGES``) and
``m`` micro-batches (``m`` divides the batch and each micro-batch still splits over a stage's
hosts); any split of the layers and any per-op plan of every stage (ZeRO-1, any recomputation,
any memory) lies inside it. Its step under 1F1B is

    (m - 1) * max_i mb_i + sum_i mb_i + max_i sync_i,   mb_i = own_i / m + send_i,

with ``own_i + sync_i = T_i``, the stage plan's own step (all ``m`` micro-batches, gradient
sync once). Keeping only stage ``s``'s terms at full weight,

    step >= T_s + m * send_s + sum_{j != s} (own_j / m + send_j).

Take ``s`` a stage with the most layers: ``k_s >= k0 = ceil(L / p)``. Its ops contain those of a
stage of ``k0`` middle layers (the ops left out cost at least their compute floor, every cost is
non-negative and the edges kept are the same), so ``T_s >= T_mid(k0) + (k_s - k0) * layer floor
+ head/tail floor``, where ``T_mid(k0)`` is the exact unconstrained optimum of ``k0`` middle
layers (:func:`taps_core.search.layered.solve_problem`); every ``own_j`` is at least its compute
floor. Each extra layer on ``s`` adds its floor to ``T_s`` and takes ``1 / m`` of it from the
others, so ``k_s = k0`` gives the least bound; ``s`` may be the first, a middle or the last
stage, so the least of the three is taken. The sends (:func:`~taps_core.search.pipeline.
send_seconds`) depend on the shape only. The cheaper bound ``floor * (m + p - 1) / m`` (every
FLOP at peak, no communication) closes a shape without a solve when it already suffices.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from taps_core.cluster.links import LinkModel
from taps_core.cluster.topology import Topology, sub_topology
from taps_core.costs.collectives import TopologyCost
from taps_core.ir.graph import OpGraph
from taps_core.ir.strategies import SearchSpace
from taps_core.models import build_graph
from taps_core.search.configs import compute_bound_flops
from taps_core.search.layered import solve_problem
from taps_core.search.pipeline import (
    MAX_STAGES,
    PIPELINE_ZERO,
    layer_range,
    send_seconds,
    stage_graph,
)
from taps_core.search.problem import build_problem

MAX_STAGE_SOLVES = 24  # shapes given the exact stage bound; the rest keep the compute bound


@dataclass(frozen=True)
class ShapeBound:
    """A proven lower bound (seconds) on every pipelined plan of ``stages`` x
    ``microbatches``; ``how`` is "compute floor" or "stage optimum"."""

    stages: int
    microbatches: int
    bound_s: float
    how: str


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
    layers = span[1] - span[0] + 1
    batch = cfg.batch_size
    out = []
    for p in range(2, min(topology.nodes, MAX_STAGES, layers) + 1):
        if topology.nodes % p:
            continue
        hosts = topology.nodes // p
        out += [
            (p, m) for m in range(1, batch + 1)
            if batch % m == 0 and (batch // m) % hosts == 0
        ]
    return out


def pipeline_bounds(
    graph: OpGraph,
    topology: Topology,
    *,
    cutoff_s: float,
    links: LinkModel | None = None,
    space: SearchSpace = SearchSpace(),
    max_stage_solves: int = MAX_STAGE_SOLVES,
) -> PipelineBounds:
    """Bounds on every pipeline shape of ``graph`` in training (see the module doc).

    Shapes whose compute bound reaches ``cutoff_s`` (seconds) are closed by it; of the others,
    the ``max_stage_solves`` with the least compute bound get the exact stage bound (a fixed
    count, not a clock, so the answer never depends on the machine)."""
    links = links or LinkModel(topology)
    found: list[ShapeBound] = []
    pending: list[tuple[float, int, int]] = []
    floor_s = _compute_s(graph, topology, topology.num_gpus)
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
        bound = stage_bound(graph, topology, links, p, m, space, cutoff_s)
        found.append(ShapeBound(p, m, max(cheap, bound), "stage optimum"))
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
) -> float:
    """The proven bound (seconds) on every plan of ``p`` stages x ``m`` micro-batches: the
    stage with the most layers paces it (module doc), and so do the first and the last stage,
    each holding at least one layer; the largest of the three. The last two are skipped once
    the first reaches ``cutoff_s``."""
    span = layer_range(graph)
    assert span is not None
    first, last = span
    layers = last - first + 1
    k0 = -(-layers // p)
    cfg = graph.meta["config"]
    micro = build_graph(cfg.with_workload(batch_size=cfg.batch_size // m))
    hosts = topology.nodes // p
    sub = sub_topology(topology, tuple(range(hosts)))
    gpus = sub.num_gpus
    comm = TopologyCost(LinkModel(sub))

    def optimum(a: int, b: int, head: bool, tail: bool) -> float:
        part = stage_graph(micro, a, b, head=head, tail=tail)
        problem = build_problem(part, sub, "train", comm, space=space, microbatches=m)
        return solve_problem(problem.restricted(PIPELINE_ZERO[0])).cost

    middle = stage_graph(micro, first, first + k0 - 1, head=False, tail=False)
    t_mid = optimum(first, first + k0 - 1, False, False)
    # compute floors (seconds, all m micro-batches) of k0 layers and of the ops outside them
    layer_s = _compute_s(middle, sub, gpus) * m
    head_s = _compute_s(_outside(micro, before=True), sub, gpus) * m
    tail_s = _compute_s(_outside(micro, before=False), sub, gpus) * m
    total_s = _compute_s(micro, sub, gpus) * m
    send = _sends(micro, topology, links, p, span)
    one_s = layer_s / k0  # one layer's floor

    def paced(s: int, t_s: float, own_s: float) -> float:
        """The bound when stage ``s`` (plan at least ``t_s``, its ops' floor ``own_s``)
        paces the pipeline and the others run at their compute floor."""
        return t_s + m * send[s] + max((total_s - own_s) / m, 0.0) + sum(send) - send[s]

    most = min(
        paced(s, t_mid + extra, layer_s + extra)
        for s in sorted({0, p - 1, *_cheapest_middle(send)})
        for extra in [(head_s if s == 0 else 0.0) + (tail_s if s == p - 1 else 0.0)]
    )
    if most >= cutoff_s:
        return most
    ends = (
        paced(0, optimum(first, first, True, False), one_s + head_s),
        paced(p - 1, optimum(last, last, False, True), one_s + tail_s),
    )
    return max(most, *ends)


def _cheapest_middle(send: list[float]) -> list[int]:
    """The middle stage with the fewest send seconds (the least bound among middles)."""
    middles = range(1, len(send) - 1)
    return [min(middles, key=lambda i: send[i])] if len(send) > 2 else []


def _compute_s(graph: OpGraph, topology: Topology, gpus: int) -> float:
    """Training compute floor (seconds): forward and backward of every compute-bound FLOP of
    ``graph`` at peak x efficiency, spread over ``gpus``."""
    rate = topology.gpu.peak_flops * topology.compute_efficiency * gpus
    return 3.0 * compute_bound_flops(graph) / rate


def _outside(micro: OpGraph, *, before: bool) -> OpGraph:
    """The ops before the first layer (``before``) or after the last, as a graph."""
    positions = [i for i, op in enumerate(micro.ops) if op.layer is not None]
    lo, hi = positions[0], positions[-1]
    ops = tuple(op for i, op in enumerate(micro.ops) if (i < lo if before else i > hi))
    return OpGraph(micro.name, micro.tensors, ops, micro.batch_letter, micro.meta)


def _sends(
    micro: OpGraph, topology: Topology, links: LinkModel, p: int, span: tuple[int, int]
) -> list[float]:
    """Seconds per micro-batch each stage spends sending (forward to the next, the gradient
    back to the previous), as :func:`~taps_core.search.pipeline._put_together` adds them."""
    hosts = topology.nodes // p
    last = [op for op in micro.ops if op.layer == span[0]][-1]
    nbytes = float(micro.tensors[last.output].nbytes)
    send = [0.0] * p
    for i in range(p - 1):
        src = tuple(range(i * hosts, (i + 1) * hosts))
        dst = tuple(range((i + 1) * hosts, (i + 2) * hosts))
        send[i] += send_seconds(links, src, dst, nbytes)[0]
        send[i + 1] += send_seconds(links, dst, src, nbytes)[0]
    return send
