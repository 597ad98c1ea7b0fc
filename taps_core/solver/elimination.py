"""Exact dynamic programming by graph elimination (MindSpore-style), with branching.

Reductions, applied until none is left:
- isolated node: take its cheapest strategy;
- leaf: fold a degree-one node into its neighbour's cost vector;
- series: a degree-two node v between u and w becomes an edge u-w with
  ``C'(a, c) = min_b C_uv(a, b) + c_v(b) + C_vw(b, c)`` (a min-plus product; argmin kept);
- parallel edges add up as they appear.
When every remaining node has degree >= 3, branch on the node with the fewest strategies.
Replaying the records backwards recovers every node's strategy.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from taps_core.solver.problem import CostGraph, Solution

CHUNK_ELEMENTS = 1 << 18  # temporaries of one min-plus chunk stay cache-sized (2 MiB)
Record = tuple  # ("root", v, s) | ("leaf", v, u, arg[S_u]) | ("series", v, u, w, arg[S_u,S_w])


@dataclass
class _State:
    """Mutable working copy of the problem (arrays are replaced, never written in place)."""

    costs: dict[str, np.ndarray]
    adj: dict[str, dict[str, np.ndarray]]  # adj[u][v] has shape [S_u, S_v]
    constant: float = 0.0
    records: list[Record] = field(default_factory=list)
    branches: int = 0

    def copy(self) -> _State:
        return _State(
            dict(self.costs),
            {k: dict(v) for k, v in self.adj.items()},
            self.constant,
            list(self.records),
            self.branches,
        )

    def add_edge(self, u: str, v: str, m: np.ndarray) -> None:
        if v in self.adj[u]:
            m = self.adj[u][v] + m
        self.adj[u][v] = m
        self.adj[v][u] = m.T

    def remove(self, v: str) -> None:
        for u in self.adj.pop(v):
            del self.adj[u][v]
        del self.costs[v]


def _state(problem: CostGraph) -> _State:
    st = _State(dict(problem.node_costs), {n: {} for n in problem.node_costs})
    for u, v, m in problem.edges:
        st.add_edge(u, v, m)
    return st


def min_plus(a: np.ndarray, mid: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``out[i, k] = min_j a[i, j] + mid[j] + b[j, k]`` and its argmin j, chunked over i.

    Selection edges (one finite entry per row or column) take O(n^2) shortcuts.
    """
    n_i, n_j = a.shape
    n_k = b.shape[1]
    if n_j == 0:
        return np.full((n_i, n_k), np.inf), np.zeros((n_i, n_k), dtype=np.int32)
    fin_a, fin_b = np.isfinite(a), np.isfinite(b)
    if (fin_a.sum(axis=1) == 1).all():  # each i picks one j
        j = fin_a.argmax(axis=1)
        out = (a[np.arange(n_i), j] + mid[j])[:, None] + b[j]
        return out, np.repeat(j[:, None].astype(np.int32), n_k, axis=1)
    if (fin_b.sum(axis=0) == 1).all():  # each k is reached from one j
        j = fin_b.argmax(axis=0)
        out = a[:, j] + (mid[j] + b[j, np.arange(n_k)])[None, :]
        return out, np.repeat(j[None, :].astype(np.int32), n_i, axis=0)
    if (fin_b.sum(axis=1) == 1).all():  # each j maps to one k
        return _min_plus_select(a, mid, b)
    if (fin_a.sum(axis=0) == 1).all():  # each j comes from one i
        out, arg = _min_plus_select(b.T, mid, a.T)
        return out.T, arg.T
    out = np.empty((n_i, n_k))
    arg = np.empty((n_i, n_k), dtype=np.int32)
    right = mid[:, None] + b  # [j, k]
    step = max(1, CHUNK_ELEMENTS // max(1, n_j * n_k))
    for start in range(0, n_i, step):
        block = a[start : start + step, :, None] + right[None, :, :]  # [i, j, k]
        idx = block.argmin(axis=1)
        arg[start : start + step] = idx
        out[start : start + step] = np.take_along_axis(block, idx[:, None, :], axis=1)[:, 0, :]
    return out, arg


def _min_plus_select(
    a: np.ndarray, mid: np.ndarray, b: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """min_plus when each row j of ``b`` has exactly one finite entry (j selects one k)."""
    col = np.isfinite(b).argmax(axis=1)
    val = b[np.arange(len(col)), col]
    base = a + (mid + val)[None, :]  # [i, j]
    out = np.full((a.shape[0], b.shape[1]), np.inf)
    arg = np.zeros((a.shape[0], b.shape[1]), dtype=np.int32)
    order = np.argsort(col, kind="stable")
    cols_sorted = col[order]
    starts = np.flatnonzero(np.r_[True, cols_sorted[1:] != cols_sorted[:-1]])
    ends = np.r_[starts[1:], len(order)]
    for s, e in zip(starts, ends):
        members = order[s:e]
        sub = base[:, members]
        pick = sub.argmin(axis=1)
        out[:, cols_sorted[s]] = sub[np.arange(len(pick)), pick]
        arg[:, cols_sorted[s]] = members[pick]
    return out, arg


def _work(st: _State, v: str) -> float:
    """Estimated cost of eliminating ``v`` now (inf if it has degree >= 3)."""
    nbrs = st.adj[v]
    if len(nbrs) > 2:
        return np.inf
    size = len(st.costs[v])
    for u in nbrs:
        size *= len(st.costs[u])
    return float(size)


def _eliminate(st: _State, keep: frozenset[str]) -> None:
    """Apply reductions, cheapest first, until only ``keep`` and degree >= 3 nodes are left."""
    heap = [(_work(st, n), i, n) for i, n in enumerate(st.costs) if n not in keep]
    heapq.heapify(heap)
    tick = len(heap)
    while heap:
        est, _, v = heapq.heappop(heap)
        if v not in st.costs or not np.isfinite(est):
            continue
        now = _work(st, v)
        if now != est:  # stale entry: requeue with the current estimate
            tick += 1
            heapq.heappush(heap, (now, tick, v))
            continue
        nbrs = list(st.adj[v])
        c_v = st.costs[v]
        if len(nbrs) == 0:
            s = int(np.argmin(c_v))
            st.constant += float(c_v[s])
            st.records.append(("root", v, s))
            st.remove(v)
        elif len(nbrs) == 1:
            u = nbrs[0]
            val = c_v[:, None] + st.adj[v][u]  # [S_v, S_u]
            arg = val.argmin(axis=0)
            st.costs[u] = st.costs[u] + val[arg, np.arange(val.shape[1])]
            st.records.append(("leaf", v, u, arg))
            st.remove(v)
        else:
            u, w = nbrs
            out, arg = min_plus(st.adj[v][u].T, c_v, st.adj[v][w])
            st.records.append(("series", v, u, w, arg))
            st.remove(v)
            st.add_edge(u, w, out)
        for n in nbrs:
            if n not in keep:
                tick += 1
                heapq.heappush(heap, (_work(st, n), tick, n))


def _kept_table(st: _State, keep: tuple[str, ...]) -> np.ndarray:
    """Total cost as an array over the kept nodes' strategies."""
    if not keep:
        return np.array(st.constant)
    if len(keep) == 1:
        return st.costs[keep[0]] + st.constant
    a, b = keep
    table = st.costs[a][:, None] + st.costs[b][None, :] + st.constant
    if b in st.adj[a]:
        table = table + st.adj[a][b]
    return table


def _recover(st: _State, kept: dict[str, int]) -> dict[str, int]:
    chosen = dict(kept)
    for rec in reversed(st.records):
        if rec[0] in ("root", "fixed"):
            chosen[rec[1]] = rec[2]
        elif rec[0] == "leaf":
            chosen[rec[1]] = int(rec[3][chosen[rec[2]]])
        else:
            chosen[rec[1]] = int(rec[4][chosen[rec[2]], chosen[rec[3]]])
    return chosen


def _solve_state(
    st: _State, keep: tuple[str, ...]
) -> tuple[np.ndarray, Callable[[tuple[int, ...]], dict[str, int]], int]:
    """Eliminate (branching where needed); return kept table, recover function, branch count."""
    _eliminate(st, frozenset(keep))
    rest = [n for n in st.costs if n not in keep]
    if not rest:
        return _kept_table(st, keep), lambda k: _recover(st, dict(zip(keep, k))), 0
    # irreducible knot: branch on the node with fewest strategies, most neighbours
    z = min(rest, key=lambda n: (len(st.costs[n]), -len(st.adj[n]), n))
    best: np.ndarray | None = None
    which: np.ndarray | None = None
    subs = []
    branches = 0
    for x in range(len(st.costs[z])):
        sub = st.copy()
        sub.constant += float(sub.costs[z][x])
        for y, m in sub.adj[z].items():
            sub.costs[y] = sub.costs[y] + m[x]
        sub.remove(z)
        sub.records.append(("fixed", z, x))
        table, rec, nb = _solve_state(sub, keep)
        branches += 1 + nb
        subs.append(rec)
        if best is None:
            best, which = table.copy(), np.full(table.shape, x, dtype=np.int64)
        better = table < best
        best = np.where(better, table, best)
        which = np.where(better, x, which)
    assert best is not None and which is not None
    final_best, final_which = best, which

    def recover(k: tuple[int, ...]) -> dict[str, int]:
        x = int(final_which[k] if k else final_which)
        return subs[x](k)

    return final_best, recover, branches


def solve(problem: CostGraph) -> Solution:
    """Exact minimum-cost assignment of ``problem`` by elimination (see module docstring).

    Examples
    --------
    >>> import numpy as np
    >>> p = CostGraph({"a": np.array([1.0, 2.0]), "b": np.array([0.0, 0.0])},
    ...               (("a", "b", np.array([[0.0, 3.0], [3.0, 0.0]])),))
    >>> solve(p).strategies, solve(p).cost
    ({'a': 0, 'b': 0}, 1.0)
    """
    st = _state(problem)
    table, recover, branches = _solve_state(st, ())
    chosen = recover(())
    ordered = {n: chosen[n] for n in problem.node_costs}
    return Solution(ordered, float(table), {"branches": branches})


def reduce_to(
    problem: CostGraph, keep: tuple[str, ...]
) -> tuple[np.ndarray, Callable[[tuple[int, ...]], dict[str, int]]]:
    """Eliminate every node but ``keep`` (at most two): the minimum total cost as a table over
    the kept nodes' strategies, and a function giving every node's strategy for a kept choice."""
    if len(keep) > 2:
        raise ValueError("reduce_to keeps at most two nodes")
    table, recover, _ = _solve_state(_state(problem), keep)
    return table, recover
