"""Solve a search problem whose middle is L identical layers, in O(log L) min-plus products.

Layer l (for l >= 1) is entered through one tensor node, the exit of layer l-1, and left
through one, its own exit. Eliminating a layer's inside leaves a matrix ``M[a, c]``: the least
cost of the layer given its entry layout ``a`` and exit layout ``c``, the best of the layer
kept for backward, recomputed and selectively recomputed (each layer chooses). Layers 1..L-1
together cost ``M^(L-1)`` (min-plus power, by repeated squaring); the rest of the graph is
solved with that one edge in place of the stack; a Viterbi pass over M recovers every layer
boundary and the (memoised) per-layer elimination recovers every op inside. Exact, like the
plain DP.

Layers outside the chain (a pipeline stage's first layer, whose input comes from the previous
stage, its odd last one, and every layer of a model without a chain) choose their variant on
their own too (:func:`loose_layers`): each is cut out at the tensors it shares with the rest,
eliminated per variant into a table over them, and the best variant per boundary layout joins
the rest as one edge (a part with a single such layer is simply solved once per variant: as
exact, and cheaper). Only where a layer cannot be cut out at two tensors do the layers outside
the chain share one choice.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from taps_core.search.problem import KEPT, TENSOR_PREFIX, SearchProblem, op_signature
from taps_core.solver.elimination import reduce_to, solve
from taps_core.solver.minplus import min_plus_power
from taps_core.solver.problem import CostGraph


@dataclass(frozen=True)
class Chain:
    """Node lists of each layer (ops then their tensor nodes, in graph order) and its exit."""

    layers: tuple[tuple[str, ...], ...]
    exits: tuple[str, ...]


@dataclass(frozen=True)
class Assignment:
    """A solved problem: strategy and option index per node, each layer's recomputation
    variant (:data:`~taps_core.search.problem.KEPT`, ``FULL``, ``SELECTIVE``), the cost."""

    strategies: dict[str, int]
    options: dict[str, int]
    recompute: dict[int, int]
    cost: float
    stats: dict[str, Any] = field(default_factory=dict)


def _neighbours(problem: SearchProblem) -> dict[str, set[str]]:
    nbrs: dict[str, set[str]] = {n: set() for n in problem.option_time}
    for e in problem.edges:
        nbrs[e.u].add(e.v)
        nbrs[e.v].add(e.u)
    return nbrs


def find_chain(problem: SearchProblem) -> Chain | None:
    """The repeated-layer structure, or None when layers differ or leak across boundaries.

    ``layers[0]`` holds the entry tensor node alone when the first layer can join the chain
    (same ops as the others, entered through one tensor with the exits' layouts); otherwise it
    holds the first layer, which is then solved with the rest of the graph. A last layer that
    differs from the others (a pipeline stage's last layer, whose output leaves the stage) or
    has no exit is likewise left out of the chain and solved with the rest: the chain's last
    exit is its entry, so the optimum is the same.
    """
    if "chain" not in problem.structure_memo:
        problem.structure_memo["chain"] = _find_chain(problem)
    return problem.structure_memo["chain"]  # type: ignore[return-value]


def _find_chain(problem: SearchProblem) -> Chain | None:
    graph = problem.graph
    by_layer: dict[int, list[str]] = {}
    for node in problem.members:
        lay = problem.layer[node]
        if lay is not None:
            by_layer.setdefault(lay, []).append(node)
    order = sorted(by_layer)
    if len(order) < 3 or order != list(range(order[0], order[0] + len(order))):
        return None

    def sig(names: list[str]) -> list[tuple]:
        return [
            tuple(op_signature(graph, graph.op_by_name[m]) for m in problem.members[n])
            for n in names
        ]

    sig0 = sig(by_layer[order[1]])
    nbrs = _neighbours(problem)
    layers: list[tuple[str, ...]] = []
    exits: list[str] = []
    for idx, lay in enumerate(order):
        names = by_layer[lay]
        odd_last = idx == len(order) - 1 and idx >= 3  # the chain keeps >= 3 layers without it
        if idx >= 1 and sig(names) != sig0:
            if odd_last:
                break
            return None
        tensors = [
            TENSOR_PREFIX + graph.op_by_name[m].output for n in names for m in problem.members[n]
        ]
        nodes = tuple(names + [t for t in tensors if t in problem.option_time])
        inside = set(nodes)
        outward = [t for t in nodes if t.startswith(TENSOR_PREFIX) and nbrs[t] - inside]
        if len(outward) != 1:
            if odd_last:
                break
            return None
        layers.append(nodes)
        exits.append(outward[0])
    for idx in range(1, len(layers)):
        if not _sealed(layers, exits, idx, nbrs):
            return None
    first = set(layers[0])
    entries = {n for node in layers[0] for n in nbrs[node] if n not in first}
    entries.discard(exits[0])
    entries -= set(layers[1])
    if len(entries) == 1 and sig(by_layer[order[0]]) == sig0:
        entry = next(iter(entries))
        if problem.layouts.get(entry) == problem.layouts[exits[0]]:
            return Chain(((entry,), *layers), (entry, *exits))
    return Chain(tuple(layers), tuple(exits))


def _sealed(
    layers: list[tuple[str, ...]], exits: list[str], idx: int, nbrs: dict[str, set[str]]
) -> bool:
    """Layer ``idx`` touches only its entry (the previous exit) and, via its exit, the next."""
    inside = set(layers[idx])
    entry = exits[idx - 1]
    for n in layers[idx]:
        allowed = inside | {entry}
        if n == exits[idx]:
            allowed |= set(layers[idx + 1]) if idx + 1 < len(layers) else nbrs[n]
        if nbrs[n] - allowed:
            return False
    return not (idx + 1 < len(layers) and nbrs[exits[idx]] - inside - set(layers[idx + 1]))


@dataclass(frozen=True)
class LooseLayer:
    """A layer outside the chain, cut out of the rest at one or two tensor nodes: its
    ``nodes`` (its ops and the tensors read only inside it) and the ``boundary`` tensors it
    shares with the rest."""

    layer: int
    nodes: tuple[str, ...]
    boundary: tuple[str, ...]


def loose_layers(problem: SearchProblem, names: set[str]) -> tuple[LooseLayer, ...] | None:
    """The layers lying wholly in ``names``, each cut out at the tensors it shares with the
    rest, or None when one cannot be (more than two such tensors, or a shared node that costs
    anything: it could not be counted once); ``()`` when no layered op is in ``names``.

    Why exact: a layer's ops touch only tensor nodes, and its tensors read outside it are kept
    with the rest, so given their layouts the layer's cost, in each variant, is independent of
    everything else; tensor nodes cost nothing (0, or inf for a layout they cannot take)."""
    key = "loose:" + ",".join(sorted(names))
    if key not in problem.structure_memo:
        problem.structure_memo[key] = _loose_layers(problem, names)
    return problem.structure_memo[key]  # type: ignore[return-value]


def _free(problem: SearchProblem, node: str) -> bool:
    """A tensor node costing nothing in every variant (inf where a layout is impossible)."""
    return node.startswith(TENSOR_PREFIX) and all(
        np.all((problem.option_time[node][v] == 0) | np.isinf(problem.option_time[node][v]))
        and not np.any(problem.option_memory[node][v])
        for v in problem.variant_keys
    )


def _loose_layers(problem: SearchProblem, names: set[str]) -> tuple[LooseLayer, ...] | None:
    by_layer: dict[int, list[str]] = {}
    for n, lay in problem.layer.items():
        if lay is not None:
            by_layer.setdefault(lay, []).append(n)
    nbrs = _neighbours(problem)
    out = []
    rest = set(names)
    for lay, members in sorted(by_layer.items()):
        inside = set(members)
        if not inside & names:
            continue
        if not inside <= names:  # a chain layer's handle (its exit) in the rest
            if not all(_free(problem, n) for n in inside & names):
                return None
            continue
        shared = {n for n in members if n.startswith(TENSOR_PREFIX) and nbrs[n] - inside}
        own = inside - shared
        boundary = sorted({b for n in own for b in nbrs[n]} - own)
        if not 1 <= len(boundary) <= 2 or not set(boundary) <= names or not all(
            _free(problem, b) for b in boundary
        ):
            return None
        out.append(LooseLayer(lay, tuple(n for n in members if n in own), tuple(boundary)))
        rest -= own
    if any(problem.layer.get(n) is not None and not _free(problem, n) for n in rest):
        return None
    return tuple(out)


def cut_out(problem: SearchProblem, names: set[str]) -> tuple[LooseLayer, ...] | None:
    """The loose layers of ``names`` worth solving apart (:func:`loose_layers`), or None: with
    fewer than two, one variant for the whole part is as exact, and cheaper (no boundary
    tables; they enlarge the memory fronts too)."""
    loose = loose_layers(problem, names)
    return loose if loose is not None and len(loose) >= 2 else None


def best_variant(
    made: dict[int, tuple[np.ndarray, Any]],
) -> tuple[np.ndarray, np.ndarray]:
    """From each variant's table over the same boundary layouts (``made[variant][0]``): the
    least per layout and the variant reaching it (ties: the earlier variant, the one
    recomputing less)."""
    tried = tuple(made)
    stacked = np.stack([made[v][0] for v in tried])
    pick = stacked.argmin(axis=0)
    return np.take_along_axis(stacked, pick[None], axis=0)[0], np.asarray(tried)[pick]


def _loose_tables(
    problem: SearchProblem, loose: tuple[LooseLayer, ...], weight: float
) -> list[tuple[np.ndarray, np.ndarray, dict[int, Any]]]:
    """Per loose layer: its least cost per boundary layout over its variants, the variant
    reaching it and each variant's recovery."""
    out = []
    for lay in loose:
        nodes = set(lay.nodes) | set(lay.boundary)
        made = {
            rc: reduce_to(problem.cost_graph(weight, nodes=nodes, recompute=rc), lay.boundary)
            for rc in variants(problem, set(lay.nodes), weight)
        }
        out.append((*best_variant(made), {v: made[v][1] for v in made}))
    return out


@dataclass(frozen=True)
class _Solved:
    """A solution of part of a problem (the plain solver's fields the callers read)."""

    cost: float
    strategies: dict[str, int]
    stats: dict[str, Any]


def _solve_part(
    problem: SearchProblem,
    names: set[str],
    keep: tuple[str, ...],
    weight: float,
    extra: tuple[tuple[str, str, np.ndarray], ...] = (),
) -> tuple[_Solved, dict[str, int], dict[int, int]]:
    """The nodes ``names`` (with ``extra`` edges; ``keep``: chain handles among them) solved
    once with each loose layer in its best variant (:func:`cut_out`), else once per variant
    shared by all their layers (as :func:`~taps_core.search.memory_bound.build_schedule`'s
    parts). Returns the solution (every node of ``names`` assigned), the variant of each
    layered node and of each layer."""
    tried = variants(problem, names - set(keep), weight)
    # one variant (memory weight 0, recomputing never faster): one elimination is as exact
    loose = None if len(tried) == 1 else cut_out(problem, names)
    if loose is None:
        best, shared = None, KEPT  # the cheapest solution and its recomputation variant
        for variant in tried:
            part = problem.cost_graph(weight, nodes=names, recompute=variant)
            sol = solve(CostGraph(part.node_costs, (*part.edges, *extra)))
            if best is None or sol.cost < best.cost:
                best, shared = sol, variant
        assert best is not None
        laid = [n for n in best.strategies if problem.layer.get(n) is not None]
        return (_Solved(best.cost, best.strategies, best.stats), dict.fromkeys(laid, shared),
                {problem.layer[n]: shared for n in laid})
    tables = _loose_tables(problem, loose, weight)
    rest = names - {n for lay in loose for n in lay.nodes}
    top = problem.cost_graph(weight, nodes=rest, recompute=KEPT)
    costs = {n: c.copy() for n, c in top.node_costs.items()}
    edges = list(top.edges) + list(extra)
    for lay, (table, _, _) in zip(loose, tables):
        if len(lay.boundary) == 1:
            costs[lay.boundary[0]] = costs[lay.boundary[0]] + table
        else:
            edges.append((lay.boundary[0], lay.boundary[1], table))
    sol = solve(CostGraph(costs, tuple(edges)))
    choice = dict(sol.strategies)
    rc_of: dict[str, int] = {}
    layers: dict[int, int] = {}
    for lay, (_, which, recover) in zip(loose, tables):
        key = tuple(choice[b] for b in lay.boundary)
        rc = int(which[key])
        inner = recover[rc](key)
        for n in lay.nodes:
            choice[n] = inner[n]
            rc_of[n] = rc
        layers[lay.layer] = rc
    return _Solved(sol.cost, choice, sol.stats), rc_of, layers


def variants(
    problem: SearchProblem, nodes: set[str] | None = None, memory_weight: float | None = None
) -> tuple[int, ...]:
    """Recomputation variants worth solving: all the problem prices in training when layered
    nodes are present, unless the memory weight is 0 and recomputing is never faster (then only
    the kept one)."""
    if problem.mode != "train":
        return (KEPT,)
    if memory_weight == 0 and problem.recompute_never_faster:
        return (KEPT,)
    pool = problem.option_time if nodes is None else nodes
    if any(problem.layer.get(n) is not None for n in pool):
        return problem.variant_keys
    return (KEPT,)


def _options(
    problem: SearchProblem, choice: dict[str, int], weight: float, rc_of: dict[str, int]
) -> dict[str, int]:
    """The option each node takes at its chosen strategy (ties: less memory)."""
    by_variant: dict[int, list[str]] = {}
    for n in choice:
        by_variant.setdefault(rc_of.get(n, KEPT), []).append(n)
    costs: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for variant, names in by_variant.items():
        costs.update(problem.node_costs(weight, variant, names))
    return {n: int(costs[n][1][s]) for n, s in choice.items()}


def _solve_flat(problem: SearchProblem, weight: float) -> Assignment:
    """Whole graph in one elimination, its layers cut out each in its best variant
    (:func:`cut_out`), else once per recomputation variant shared by every layer."""
    whole, rc_of, layers = _solve_part(problem, set(problem.option_time), (), weight)
    choice = whole.strategies
    return Assignment(
        {n: choice[n] for n in problem.option_time},
        _options(problem, choice, weight, rc_of),
        layers,
        whole.cost,
        {**whole.stats, "layered": False},
    )


def solve_problem(problem: SearchProblem, memory_weight: float = 0.0) -> Assignment:
    """Exact optimum of ``problem`` at ``time + memory_weight * memory``, using the chain of
    identical layers when there is one."""
    chain = find_chain(problem)
    if chain is None:
        return _solve_flat(problem, memory_weight)
    first, entry = chain.layers[1], chain.exits[0]
    block_nodes = set(first) | {entry}
    blocks = {}
    for rc in variants(problem, set(first), memory_weight):
        block = problem.cost_graph(memory_weight, nodes=block_nodes, recompute=rc)
        blocks[rc] = reduce_to(block, (entry, chain.exits[1]))
    m, which = best_variant(blocks)  # each layer's best variant per pair of boundary layouts
    repeats = len(chain.layers) - 1
    stack = min_plus_power(m, repeats)
    last = chain.exits[-1]
    middle = {n for lay in chain.layers[1:] for n in lay}
    top_nodes = (set(problem.option_time) - middle) | {last}
    best, rc_of, layers = _solve_part(
        problem, top_nodes, (entry, last), memory_weight, ((entry, last, stack),)
    )
    cost, top_choice, stats = best.cost, best.strategies, best.stats
    choice = dict(top_choice)
    for n in top_choice:  # a chain handle's layer: set by the chain below
        if problem.layer.get(n) is not None:
            layers.setdefault(problem.layer[n], KEPT)
    bounds = _viterbi(m, choice[entry], choice[last], repeats)
    cache: dict[tuple[int, int], dict[str, int]] = {}
    for idx in range(1, len(chain.layers)):
        key = (bounds[idx - 1], bounds[idx])
        rc = int(which[key])
        if key not in cache:
            cache[key] = blocks[rc][1](key)
        inner = cache[key]
        for src, dst in zip(first, chain.layers[idx]):
            choice[dst] = inner[src]
            rc_of[dst] = rc
        lay = problem.layer[chain.layers[idx][0]]
        if lay is not None:
            layers[lay] = rc
    ordered = {n: choice[n] for n in problem.option_time}
    return Assignment(
        ordered,
        _options(problem, ordered, memory_weight, rc_of),
        layers,
        cost,
        {**stats, "layered": True, "repeats": repeats, "block_states": int(m.shape[0])},
    )


def _viterbi(m: np.ndarray, start: int, end: int, steps: int) -> list[int]:
    """Boundary states x_0=start..x_steps=end minimising sum M[x_{i-1}, x_i]."""
    best = m[start].copy()
    back = []
    for _ in range(steps - 1):
        cand = best[:, None] + m  # [prev, next]
        arg = cand.argmin(axis=0)
        back.append(arg)
        best = cand[arg, np.arange(m.shape[1])]
    path = [end]
    for arg in reversed(back):
        path.append(int(arg[path[-1]]))
    path.append(start)
    return path[::-1]
