"""The fastest chain of identical layers under one memory cap: a DP over layers and memory.

A model's repeated layers each take one point of the layer's front: (entry layout, exit
layout, seconds, bytes); the rest of the graph takes one point of its own front, whose entry
and exit layouts the layers must join (a path of ``repeats`` layer points from the rest's
entry to its exit). Minimise the total seconds with the total bytes within the limit.

This is a knapsack with a path constraint (NP-hard in general, and an integer program's bound
stalls on it: thousands of near-equal layer variants). Memory is the only coupling, so a
dynamic program over (layers placed, current layout, memory used) is exact once memory is
counted in whole steps of ``delta`` bytes; it is run twice:

* **floor** (each point's bytes above the layer's least, rounded down to steps): every plan
  within the limit also fits here, so its optimum is a lower bound on the true optimum; if the
  plan it finds fits the exact limit, it is the exact optimum (proven).
* **ceil** (rounded up): every plan that fits here fits the exact limit, so its optimum is a
  feasible plan; the gap to the floor bound is at most what ``repeats * delta`` bytes buy.

Both are deterministic (no time limit): the answer does not depend on the machine's load.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from taps_core.solver.fronts import TruncatedError

MEMORY_STEPS = 2048  # memory steps between the least chain and the limit (resolution)
WORK_CAP = 4e9  # array cells one pass may touch before the search says it is too large
_ROUND = 1e-9  # steps: a value this close to a whole step counts as on it (float noise)
REFINE = 4  # when no plan fits at rounded-up memory, retry with this many times the steps
REFINES = 4  # at most this many refinements


@dataclass(frozen=True)
class ChainPoints:
    """Points of a front: entry and exit layout (state index), seconds and bytes each."""

    entry: np.ndarray
    exit: np.ndarray
    time_s: np.ndarray
    memory_bytes: np.ndarray


@dataclass(frozen=True)
class ChainAnswer:
    """The rest's point, the layers' points in path order, and the proof.

    ``time_s`` is the exact total; ``lower_bound_s`` a bound no plan within the limit beats
    (equal to ``time_s`` when the answer is proven optimal)."""

    rest: int
    layers: tuple[int, ...]
    time_s: float
    memory_bytes: float
    lower_bound_s: float

    @property
    def proven(self) -> bool:
        return self.lower_bound_s >= self.time_s


def cheapest_chain(
    layer: ChainPoints,
    rest: ChainPoints,
    repeats: int,
    limit_bytes: float,
    steps: int = MEMORY_STEPS,
    _tries: int = REFINES,
) -> ChainAnswer | None:
    """The fastest plan within ``limit_bytes`` (see the module docstring), or None when no
    combination of these points fits. Raises
    :class:`~taps_core.solver.fronts.TruncatedError` past :data:`WORK_CAP`."""
    if len(layer.time_s) == 0 or len(rest.time_s) == 0:
        return None
    base_layer = float(layer.memory_bytes.min())
    base_rest = float(rest.memory_bytes.min())
    free = limit_bytes - repeats * base_layer - base_rest
    if free < 0:
        return None
    delta = free / steps if free > 0 else 1.0
    capacity = steps if free > 0 else 0
    extra_layer = (layer.memory_bytes - base_layer) / delta
    extra_rest = (rest.memory_bytes - base_rest) / delta
    low = _solve(layer, rest, repeats, capacity, _floor(extra_layer), _floor(extra_rest))
    if low is None:
        return None
    bound, path = low
    answer = _answer(layer, rest, path, bound)
    if answer.memory_bytes <= limit_bytes:  # the relaxation's optimum fits: proven
        return replace(answer, lower_bound_s=answer.time_s)
    high = _solve(layer, rest, repeats, capacity, _ceil(extra_layer), _ceil(extra_rest))
    if high is not None:
        high_answer = _answer(layer, rest, high[1], bound)
        if high_answer.memory_bytes <= limit_bytes:
            return high_answer
    if _tries <= 0 or free == 0:
        raise TruncatedError("no plan fits once memory is rounded up; the bound stands alone")
    finer = cheapest_chain(layer, rest, repeats, limit_bytes, steps * REFINE, _tries - 1)
    if finer is None:
        return None
    return ChainAnswer(
        finer.rest, finer.layers, finer.time_s, finer.memory_bytes,
        min(finer.time_s, max(bound, finer.lower_bound_s)),
    )


def _floor(x: np.ndarray) -> np.ndarray:
    return np.floor(x + _ROUND).astype(np.int64)


def _ceil(x: np.ndarray) -> np.ndarray:
    return np.ceil(x - _ROUND).astype(np.int64)


def _answer(
    layer: ChainPoints, rest: ChainPoints, path: tuple[int, tuple[int, ...]], bound: float
) -> ChainAnswer:
    q, layers = path
    idx = np.array(layers, dtype=np.int64)
    time_s = float(rest.time_s[q] + layer.time_s[idx].sum())
    memory = float(rest.memory_bytes[q] + layer.memory_bytes[idx].sum())
    return ChainAnswer(q, layers, time_s, memory, min(bound, time_s))


def _leanest(
    cell: np.ndarray, steps: np.ndarray, time_s: np.ndarray, capacity: int
) -> np.ndarray:
    """Indices of each cell's Pareto points within ``capacity``: by memory steps, each faster
    than every leaner one (ties: the lowest index). A point with as many steps and no less
    time than another of its cell can be swapped for it in any plan, so it is never needed."""
    ok = np.flatnonzero(steps <= capacity)
    order = ok[np.lexsort((ok, time_s[ok], steps[ok], cell[ok]))]
    keep: list[int] = []
    current, fastest = -1, np.inf
    for p in order:
        if cell[p] != current:
            current, fastest = int(cell[p]), np.inf
        if time_s[p] < fastest:
            keep.append(int(p))
            fastest = float(time_s[p])
    return np.array(keep, dtype=np.int64)


def _solve(
    layer: ChainPoints,
    rest: ChainPoints,
    repeats: int,
    capacity: int,
    layer_steps: np.ndarray,
    rest_steps: np.ndarray,
) -> tuple[float, tuple[int, tuple[int, ...]]] | None:
    """The DP at integer memory steps: (optimum seconds, (rest point, layer points)) or None.

    Pass 1 keeps, for every exit layout of the rest, the least seconds per (layout reached,
    steps used); pass 2 repeats it for the best exit only, keeping each layer's table, and
    walks back from the optimum."""
    states = np.unique(np.concatenate([layer.entry, layer.exit, rest.entry, rest.exit]))
    index = {int(s): i for i, s in enumerate(states)}
    n = len(states)
    lookup = np.zeros(int(states.max()) + 1, dtype=np.int64)
    lookup[states] = np.arange(n)
    cell = lookup[layer.entry] * n + lookup[layer.exit]
    keep = _leanest(cell, layer_steps, layer.time_s, capacity)
    pts = [
        (index[int(layer.entry[p])], index[int(layer.exit[p])], int(layer_steps[p]),
         float(layer.time_s[p]), int(p))
        for p in keep
    ]
    ends = sorted({index[int(c)] for c in rest.exit})
    work = float(repeats) * len(pts) * len(ends) * (capacity + 1)
    if work > WORK_CAP:
        raise TruncatedError(f"{work:.3g} cells over the layer-and-memory table")
    first = _start_table(rest, rest_steps, index, ends, n, capacity)
    last = first
    for _ in range(repeats):
        last = _step(last, pts)
    finals = np.array([last[i, e].min() for i, e in enumerate(ends)])
    if not np.isfinite(finals).any():
        return None
    pick = int(np.argmin(finals))
    end = ends[pick]
    tables = [first[pick : pick + 1]]
    for _ in range(repeats):
        tables.append(_step(tables[-1], pts))
    b = int(np.argmin(tables[-1][0, end]))
    value = float(tables[-1][0, end, b])
    layers: list[int] = []
    state = end
    for k in range(repeats, 0, -1):
        prev, here = tables[k - 1][0], float(tables[k][0, state, b])
        for a, c, s, t, p in pts:
            if c == state and s <= b and prev[a, b - s] + t == here:
                layers.append(p)
                state, b = a, b - s
                break
        else:  # pragma: no cover - the tables were built from these very points
            raise AssertionError("chain walk-back lost its way")
    q = _rest_point(rest, rest_steps, index, states, end, state, b, float(tables[0][0, state, b]))
    layers.reverse()
    return value, (q, tuple(layers))


def _start_table(
    rest: ChainPoints,
    rest_steps: np.ndarray,
    index: dict[int, int],
    ends: list[int],
    n: int,
    capacity: int,
) -> np.ndarray:
    """Seconds of the rest's points by (its exit, its entry = the first layer's entry, steps)."""
    table = np.full((len(ends), n, capacity + 1), np.inf)
    where = {e: i for i, e in enumerate(ends)}
    for q in range(len(rest.time_s)):
        s = int(rest_steps[q])
        if s > capacity:
            continue
        e, a = where[index[int(rest.exit[q])]], index[int(rest.entry[q])]
        table[e, a, s] = min(table[e, a, s], float(rest.time_s[q]))
    return table


def _step(table: np.ndarray, pts: list[tuple[int, int, int, float, int]]) -> np.ndarray:
    """One more layer: each point moves its entry's row to its exit, ``s`` steps further."""
    out = np.full_like(table, np.inf)
    width = table.shape[2]
    for a, c, s, t, _ in pts:
        view = out[:, c, s:]
        np.minimum(view, table[:, a, : width - s] + t, out=view)
    return out


def _rest_point(
    rest: ChainPoints,
    rest_steps: np.ndarray,
    index: dict[int, int],
    states: np.ndarray,
    end: int,
    entry: int,
    b: int,
    value: float,
) -> int:
    """The rest's point the walk-back arrived at (the lowest index among equals)."""
    for q in range(len(rest.time_s)):
        if (
            index[int(rest.exit[q])] == end
            and index[int(rest.entry[q])] == entry
            and int(rest_steps[q]) == b
            and float(rest.time_s[q]) == value
        ):
            return q
    raise AssertionError("no rest point matches the chain's start")  # pragma: no cover
