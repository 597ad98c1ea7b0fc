"""Solve a search problem whose middle is L identical layers, in O(log L) min-plus products.

Layer l (for l >= 1) is entered through one tensor node, the exit of layer l-1, and left
through one, its own exit. Eliminating a layer's inside leaves a matrix ``M[a, c]``: the least
cost of the layer given its entry layout ``a`` and exit layout ``c``. Layers 1..L-1 together
cost ``M^(L-1)`` (min-plus power, by repeated squaring); the rest of the graph is solved with
that one edge in place of the stack; a Viterbi pass over M recovers every layer boundary and
the (memoised) per-layer elimination recovers every op inside. Exact, like the plain DP.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from taps_core.search_problem import TENSOR_PREFIX, SearchProblem, op_signature
from taps_core.solver.elimination import min_plus, reduce_to, solve
from taps_core.solver.problem import Solution


@dataclass(frozen=True)
class Chain:
    """Node lists of each layer (ops then their tensor nodes, in graph order) and its exit."""

    layers: tuple[tuple[str, ...], ...]
    exits: tuple[str, ...]


def min_plus_power(m: np.ndarray, k: int) -> np.ndarray:
    """``m`` min-plus-multiplied by itself ``k >= 1`` times, by repeated squaring."""
    result: np.ndarray | None = None
    base = m
    zero = np.zeros(m.shape[0])
    while k:
        if k & 1:
            result = base if result is None else min_plus(result, zero, base)[0]
        k >>= 1
        if k:
            base = min_plus(base, zero, base)[0]
    assert result is not None
    return result


def find_chain(problem: SearchProblem) -> Chain | None:
    """The repeated-layer structure, or None when layers differ or leak across boundaries.

    ``layers[0]`` holds the entry tensor node alone when the first layer can join the chain
    (same ops as the others, entered through one tensor with the exits' layouts); otherwise it
    holds the first layer, which is then solved with the rest of the graph.
    """
    graph = problem.graph
    by_layer: dict[int, list[str]] = {}
    for op in graph.ops:
        if op.layer is not None:
            by_layer.setdefault(op.layer, []).append(op.name)
    order = sorted(by_layer)
    if len(order) < 3 or order != list(range(order[0], order[0] + len(order))):
        return None
    sig0 = [op_signature(graph, graph.op_by_name[n]) for n in by_layer[order[1]]]
    nbrs: dict[str, set[str]] = {n: set() for n in problem.time}
    for u, v, _ in problem.edges:
        nbrs[u].add(v)
        nbrs[v].add(u)
    layers: list[tuple[str, ...]] = []
    exits: list[str] = []
    for idx, lay in enumerate(order):
        names = by_layer[lay]
        if idx >= 1 and [op_signature(graph, graph.op_by_name[n]) for n in names] != sig0:
            return None
        tensors = [TENSOR_PREFIX + graph.op_by_name[n].output for n in names]
        nodes = tuple(names + [t for t in tensors if t in problem.time])
        inside = set(nodes)
        outward = [t for t in nodes if t.startswith(TENSOR_PREFIX) and nbrs[t] - inside]
        if len(outward) != 1:
            return None
        layers.append(nodes)
        exits.append(outward[0])
    for idx in range(1, len(layers)):
        if not _sealed(layers, exits, idx, nbrs):
            return None
    # can the first layer join? its entry must be one tensor node with the exits' layouts
    first = set(layers[0])
    entries = {n for node in layers[0] for n in nbrs[node] if n not in first}
    entries.discard(exits[0])
    entries -= set(layers[1])
    if (
        len(entries) == 1
        and [op_signature(graph, graph.op_by_name[n]) for n in by_layer[order[0]]] == sig0
    ):
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


def solve_problem(problem: SearchProblem, memory_weight: float = 0.0) -> Solution:
    """Exact optimum of ``problem`` at the given memory weight, using the chain when present."""
    chain = find_chain(problem)
    if chain is None:
        sol = solve(problem.cost_graph(memory_weight))
        return Solution(sol.strategies, sol.cost, {**sol.stats, "layered": False})
    first, entry = chain.layers[1], chain.exits[0]
    block = problem.cost_graph(memory_weight, nodes=set(first) | {entry})
    m, recover_block = reduce_to(block, (entry, chain.exits[1]))
    repeats = len(chain.layers) - 1
    stack = min_plus_power(m, repeats)
    last = chain.exits[-1]
    middle = {n for lay in chain.layers[1:] for n in lay}
    top_nodes = (set(problem.time) - middle) | {last}
    top = problem.cost_graph(memory_weight, nodes=top_nodes)
    top = type(top)(top.node_costs, (*top.edges, (entry, last, stack)))
    sol = solve(top)
    choice = dict(sol.strategies)
    bounds = _viterbi(m, choice[entry], choice[last], repeats)
    cache: dict[tuple[int, int], dict[str, int]] = {}
    for idx in range(1, len(chain.layers)):
        key = (bounds[idx - 1], bounds[idx])
        if key not in cache:
            cache[key] = recover_block(key)
        inner = cache[key]
        for src, dst in zip(first, chain.layers[idx]):
            choice[dst] = inner[src]
    ordered = {n: choice[n] for n in problem.time}
    return Solution(
        ordered,
        sol.cost,
        {**sol.stats, "layered": True, "repeats": repeats, "block_states": int(m.shape[0])},
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
