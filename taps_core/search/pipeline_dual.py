"""A Lagrangian lower bound on every pipelined plan of one shape: the 1F1B step's maxima
relaxed by multipliers, so each stage is bounded on its own.

Under 1F1B (:func:`~taps_core.search.pipeline.one_f_one_b_busy`) a shape's step is

    (m - 1) * max_i a_i + sum_i a_i + max_i y_i,   a_i = own_i / m + send_i,

with ``own_i`` a stage's seconds without gradient sync over the ``m`` micro-batches and ``y_i``
its sync (plus the tied embedding's exchange on the first and last stage). A maximum is at
least any weighted mean, so for weights ``theta`` and ``phi`` on the simplex

    step >= sum_i (c_i / m) * own_i + phi_i * y_i + c_i * send_i,   c_i = (m - 1) theta_i + 1,

which splits by stage: each stage's plan is charged ``own + r_i * sync`` (``r_i = m phi_i /
c_i``), scaled by ``c_i / m``. That least charge ``G(k, r)`` of a stage of ``k`` layers is an
exact optimum over every per-op plan (any recomputation per layer, memory left out, so it is a
lower bound), found by a chain of one layer's min-plus matrix (the layers are identical). As
a function of ``r`` it is concave (a minimum of lines) and non-decreasing (sync >= 0), so its
value at a few ratios bounds it at every other: from below by the chord between the nearest
two, and by the last value beyond them. The bound is the best over a deterministic family of
weights of the least, over every layer split, of the sum: a maximum over multipliers of a
minimum over splits, below the minimum over splits of the step (weak duality).

Where one stage paces the step and another's sync dominates it (small models with a large
vocabulary), the corner bound of :mod:`taps_core.search.pipeline_bound` charges each stage only
its own sync; the weights here charge both at once.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from taps_core.cluster.links import LinkModel
from taps_core.costs.collectives import TopologyCost
from taps_core.ir.graph import OpGraph
from taps_core.ir.strategies import SearchSpace
from taps_core.search.flat import micro_graph
from taps_core.search.pipeline import (
    PIPELINE_ZERO,
    layer_range,
    stage_graph,
)
from taps_core.search.problem import KEPT, TENSOR_PREFIX, SearchProblem, build_problem
from taps_core.search.sends import (
    boundary_sends,
    stage_send_seconds,
    tied_exchange_extra,
)
from taps_core.solver.elimination import reduce_to
from taps_core.solver.problem import CostGraph

# sync ratios r at which every stage kind's least charge is solved exactly (in units of the
# micro-batch count m for the last ones): chords between them bound every other ratio
RATIOS = (0.0, 0.25, 0.5, 1.0, 2.0)
RATIOS_OF_M = (0.25, 1.0)
WEIGHT_STEPS = (0.0, 0.25, 0.5, 0.75, 1.0)  # grid of each multiplier's share (see _weights)


@dataclass(frozen=True)
class StageCharges:
    """Least charges ``own + r * sync`` (seconds) of a stage with ``k`` layers, for k = 1 ..
    ``len(row)``, at each sync ratio of ``ratios``: rows [ratios, k] per stage kind
    (``first`` holds the ops before the layers, ``last`` those after, with the tied exchange
    its head's shard makes at weight ``tied_weight`` x r, ``middle`` neither)."""

    ratios: np.ndarray
    first: np.ndarray
    middle: np.ndarray
    last: np.ndarray

    def at(self, kind: str, r: float) -> np.ndarray:
        """A lower bound on the least charge of ``kind`` at ratio ``r`` for every ``k``: the
        chord of the nearest solved ratios (a concave function lies above its chords), the
        last solved value beyond them (non-decreasing)."""
        rows = getattr(self, kind)
        hi = int(np.searchsorted(self.ratios, r, side="left"))
        if hi >= len(self.ratios):
            return rows[-1]
        if self.ratios[hi] == r or hi == 0:
            return rows[hi]
        lo = hi - 1
        w = (r - self.ratios[lo]) / (self.ratios[hi] - self.ratios[lo])
        return (1 - w) * rows[lo] + w * rows[hi]


@dataclass(frozen=True)
class DualBound:
    """The bound (seconds) and a layer split worth planning (:func:`estimated_split`)."""

    bound_s: float
    split: tuple[int, ...] | None


def dual_bound(
    graph: OpGraph,
    topology_links: LinkModel,
    p: int,
    m: int,
    space: SearchSpace = SearchSpace(),
) -> DualBound:
    """A proven lower bound (seconds) on the step of every plan of ``p`` stages x ``m``
    micro-batches of ``graph`` (identical layers; any split, any per-op plan per stage, memory
    left out) on the cluster of ``topology_links`` (see the module docstring); -inf when the
    model has fewer than three layers (no middle layer to chain)."""
    span = layer_range(graph)
    if span is None or span[1] - span[0] + 1 < max(3, p):
        return DualBound(-math.inf, None)
    layers = span[1] - span[0] + 1
    micro = micro_graph(graph, m)
    links = topology_links
    sub = links.first_hosts(links.topology.nodes // p)
    charges = stage_charges(micro, links, sub, p, m, space, layers - p + 1)
    last = [op for op in micro.ops if op.layer == span[0]][-1]
    sends = stage_send_seconds(
        boundary_sends(links, p, [float(micro.tensors[last.output].nbytes)] * (p - 1))
    )
    best = max(_weighted(charges, theta, phi, sends, m, layers) for theta, phi in _weights(p))
    return DualBound(best, estimated_split(charges, sends, m, layers))


def _weights(p: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """The multipliers tried: ``theta`` and ``phi`` each a mix of the uniform weights with
    all of a share on the first, on the last or on the middle stages, on the grid of
    :data:`WEIGHT_STEPS` (a fixed family: the bound never depends on a clock)."""
    uniform = np.full(p, 1.0 / p)
    corners = [np.eye(p)[0], np.eye(p)[-1]]
    if p > 2:
        mid = np.zeros(p)
        mid[1:-1] = 1.0 / (p - 2)
        corners.append(mid)
    mixes = [uniform] + [
        (1 - t) * uniform + t * c for c in corners for t in WEIGHT_STEPS if t > 0
    ]
    return list(itertools.product(mixes, mixes))


def _weighted(
    charges: StageCharges,
    theta: np.ndarray,
    phi: np.ndarray,
    sends: list[float],
    m: int,
    layers: int,
) -> float:
    """The relaxed step at multipliers ``theta``, ``phi`` (module docstring), least over every
    layer split: the middle stages share one weight (the family keeps them equal), so they
    split their layers evenly under the convex minorant of their charge (a lower bound)."""
    p = len(theta)
    c = (m - 1) * theta + 1.0
    ratio = m * phi / c
    first = c[0] / m * charges.at("first", ratio[0])
    last = c[-1] / m * charges.at("last", ratio[-1])
    sent = float(np.dot(c, sends))
    ks = np.arange(1, len(first) + 1)
    if p == 2:
        # k layers on the first stage, the rest on the last
        k = ks[ks < layers]
        return float((first[k - 1] + last[layers - k - 1]).min()) + sent
    mid = c[1] / m * _convex_minorant(charges.at("middle", ratio[1]))
    # middle stages together: n = p - 2 of them take K layers, as evenly as possible
    n = p - 2
    total = np.full(layers + 1, np.inf)
    for big in range(n, layers - 1):
        q, rest = divmod(big, n)
        if rest and q >= len(mid):
            continue  # some middle stage would take more layers than any stage can
        total[big] = (n - rest) * mid[q - 1] + (rest * mid[q] if rest else 0.0)
    best = math.inf
    for kf in range(1, layers - n):
        kl = np.arange(1, layers - n - kf + 1)
        value = first[kf - 1] + last[kl - 1] + total[layers - kf - kl]
        best = min(best, float(value.min()))
    return best + sent


def estimated_split(
    charges: StageCharges, sends: list[float], m: int, layers: int
) -> tuple[int, ...]:
    """The layer split whose 1F1B step is least when each stage's plan is taken as its
    optimum of own + sync (what a stage's exact search minimises): its own seconds estimated
    by the optimum without sync, its sync by the difference (an estimate to choose a split to
    plan in full, not a bound). The middle stages share their layers evenly."""
    p = len(sends)
    est = {}
    for kind in ("first", "middle", "last"):
        own, both = charges.at(kind, 0.0), charges.at(kind, 1.0)
        est[kind] = (own / m, np.maximum(both - own, 0.0))

    def step(ks: tuple[int, ...]) -> float:
        kinds = ["first"] + ["middle"] * (p - 2) + ["last"]
        a = [est[kd][0][k - 1] + sends[i] for i, (kd, k) in enumerate(zip(kinds, ks))]
        y = [est[kd][1][k - 1] for kd, k in zip(kinds, ks)]
        return (m - 1) * max(a) + sum(a) + max(y)

    n = p - 2
    splits = []
    for kf in range(1, layers - n):
        for kl in range(1, layers - n - kf + 1):
            if n == 0 and kf + kl != layers:
                continue
            q, rest = divmod(layers - kf - kl, n) if n else (0, 0)
            splits.append((kf, *(q + (1 if i < rest else 0) for i in range(n)), kl))
    return min(splits, key=step)


def _convex_minorant(values: np.ndarray) -> np.ndarray:
    """The greatest convex function below ``values`` (indexed 0..n-1): evenly shared layers
    minimise a sum of it, and it is below every sum of ``values`` (a lower bound)."""
    n = len(values)
    hull: list[int] = []
    for i in range(n):
        while len(hull) >= 2:
            a, b = hull[-2], hull[-1]
            # b lies on or above the chord from a to i: drop it
            if (values[b] - values[a]) * (i - a) >= (values[i] - values[a]) * (b - a):
                hull.pop()
            else:
                break
        hull.append(i)
    return np.interp(np.arange(n), hull, values[hull])


def stage_charges(
    micro: OpGraph,
    links: LinkModel,
    sub: LinkModel,
    p: int,
    m: int,
    space: SearchSpace,
    max_layers: int,
) -> StageCharges:
    """Every stage kind's least charge ``own + r * sync`` for 1 .. ``max_layers`` layers at
    each ratio of :data:`RATIOS` and :data:`RATIOS_OF_M` x ``m``, from two problems built on a
    stage's cluster ``sub``: three layers without the ops before them but with those after
    (the first layer with a free entry, the middle one chained, the ops after the layers), and
    the ops before the layers with two (the first one's exit is the second's entry)."""
    span = layer_range(micro)
    assert span is not None
    l0, top = span
    # the ops after the layers read the model's last layer: the body holds the last three
    body = _problem(stage_graph(micro, top - 2, top, head=False, tail=True), sub, m, space)
    head = _problem(stage_graph(micro, l0, l0 + 1, head=True, tail=False), sub, m, space)
    tied = tied_exchange_extra(body, micro, links, sub.topology.nodes, p)
    ratios = np.array(sorted({*RATIOS, *(x * m for x in RATIOS_OF_M)}))
    rows: dict[str, list[np.ndarray]] = {"first": [], "middle": [], "last": []}
    for r in ratios:
        first, middle, last = _kinds_at(body, head, tied, float(r), top - 2, l0, max_layers)
        rows["first"].append(first)
        rows["middle"].append(middle)
        rows["last"].append(last)
    return StageCharges(ratios, *(np.array(rows[k]) for k in ("first", "middle", "last")))


def _problem(graph: OpGraph, sub: LinkModel, m: int, space: SearchSpace) -> SearchProblem:
    """A stage graph's problem at the pipeline's ZeRO stage, ``m`` micro-batches."""
    return build_problem(
        graph, sub.topology, "train", TopologyCost(sub), space=space, microbatches=m
    ).restricted(PIPELINE_ZERO[0])


def _kinds_at(
    body: SearchProblem,
    head: SearchProblem,
    tied: tuple[str, np.ndarray] | None,
    r: float,
    l0: int,
    first_layer: int,
    max_layers: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(first, middle, last) least charges at ratio ``r`` for 1 .. ``max_layers`` layers: the
    vector over the first layer's exit layouts (free entry, or after the ops before the
    layers) carried through ``k - 1`` chained layers, then left free or fed to the ops after.
    ``body`` holds layers ``l0 .. l0 + 2`` and the ops after them, ``head`` the ops before
    the layers and layers ``first_layer`` and the next."""
    body_r, head_r = body.reweighted(1.0, r), head.reweighted(1.0, r)
    exits = {lay: _exit(body_r, lay) for lay in (l0, l0 + 1, l0 + 2)}
    free_entry = _best(body_r, _layer_nodes(body_r, l0), (exits[l0],))
    chain = _best(body_r, _layer_nodes(body_r, l0 + 1) | {exits[l0]}, (exits[l0], exits[l0 + 1]))
    ops_after = {n for n, lay in body_r.layer.items() if lay is None}
    extra = None if tied is None else (tied[0], r * tied[1])
    after = _best(body_r, ops_after | {exits[l0 + 2]}, (exits[l0 + 2],), extra)
    ops_before = {n for n, lay in head_r.layer.items() if lay is None}
    headed = _best(head_r, ops_before | _layer_nodes(head_r, first_layer),
                   (_exit(head_r, first_layer),))
    kinds = []
    for start, end in ((headed, None), (free_entry, None), (free_entry, after)):
        vec, row = start, []
        for _ in range(max_layers):
            row.append(float((vec if end is None else vec + end).min()))
            vec = (vec[:, None] + chain).min(axis=0)
        kinds.append(np.array(row))
    return kinds[0], kinds[1], kinds[2]


def _layer_nodes(problem: SearchProblem, layer: int) -> set[str]:
    return {n for n, lay in problem.layer.items() if lay == layer}


def _exit(problem: SearchProblem, layer: int) -> str:
    """The tensor node of ``layer`` read outside it (the residual stream it hands on); in the
    last layer of a stage, the one no op of the layer reads (the stage's output)."""
    inside = _layer_nodes(problem, layer)
    tensors = [n for n in inside if n.startswith(TENSOR_PREFIX)]
    read_by: dict[str, set[str]] = {n: set() for n in tensors}
    for e in problem.edges:
        if e.u in read_by:
            read_by[e.u].add(e.v)
    outward = [n for n in tensors if read_by[n] - inside]
    if len(outward) == 1:
        return outward[0]
    unread = [n for n in tensors if not read_by[n]]
    if len(unread) == 1 and not outward:
        return unread[0]
    raise ValueError(f"layer {layer} has no single exit tensor")


def _best(
    problem: SearchProblem,
    nodes: set[str],
    keep: tuple[str, ...],
    extra: tuple[str, np.ndarray] | None = None,
) -> np.ndarray:
    """The least cost of ``nodes`` over the kept nodes' strategies (a vector, or a matrix for
    two), each layer in its cheapest recomputation variant; ``extra`` adds seconds per
    strategy to one node."""
    layered = any(problem.layer.get(n) is not None for n in nodes)
    variants = problem.variant_keys if layered else (KEPT,)
    best = None
    for rc in variants:
        graph = problem.cost_graph(0.0, nodes=nodes, recompute=rc)
        if extra is not None and extra[0] in graph.node_costs:
            costs = dict(graph.node_costs)
            costs[extra[0]] = costs[extra[0]] + extra[1]
            graph = CostGraph(costs, graph.edges)
        table, _ = reduce_to(graph, keep)
        best = table if best is None else np.minimum(best, table)
    assert best is not None
    return best
