"""Exact memory-constrained elimination: Pareto fronts of (time, memory) instead of numbers.

Minimising time under a memory limit breaks the plain DP (memory is a second sum). Here every
table entry of the elimination is a *front*: the (seconds, bytes) pairs of the partial plans
it stands for that no other partial plan beats on both. Fronts are kept small by three rules,
each exact for the constrained optimum:

- Pareto: a partial plan slower and larger than another with the same boundary is dropped;
- memory cap: one whose bytes, plus the least bytes the rest of the plan can hold, exceed
  the limit is dropped;
- Lagrangian gap: at a multiplier ``lam``, ``t + lam * m`` of any partial plan exceeds the
  least such value at the same boundary by at most ``gap = UB - LB`` if it belongs to an
  optimal plan (swap it for the least one: the rest is unchanged, and no plan scores below the
  Lagrangian bound LB; UB is the time of a known feasible plan). Anything further is dropped.

A :class:`FrontTable` holds every front of one factor (a node's strategies, an edge's pairs of
strategies) as flat arrays sorted by cell, and remembers where each point came from, so the
chosen strategy of every eliminated node can be recovered by walking back from the winner.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from taps_core.solver.elimination import min_plus

GAP_TOLERANCE = 1e-9  # relative slack on the gap rule, against float round-off
MAX_POINTS = 4_000_000  # a table larger than this is truncated (the result is then unproven)


class TruncatedError(Exception):
    """Raised when a table would exceed :data:`MAX_POINTS`: the proof is out of reach."""


@dataclass
class FrontTable:
    """Fronts over a grid of cells (``shape``: () for a constant, (n,) a node, (a, c) an edge).

    Points are sorted by cell. ``parents[j]`` is (table, layer shift) and ``src[:, j]`` the
    point each point came from there (-1: none); ``fixes`` are (key, value per point, layer
    offset): the strategy of an eliminated node, the option of a node, a recomputation flag.
    """

    shape: tuple[int, ...]
    cell: np.ndarray
    t: np.ndarray
    m: np.ndarray
    floor: float = 0.0  # least memory of the nodes folded in (bytes)
    parents: list[tuple[FrontTable, int]] = field(default_factory=list)
    src: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=np.int64))
    fixes: list[tuple[str, np.ndarray, int]] = field(default_factory=list)

    @property
    def ncells(self) -> int:
        return int(np.prod(self.shape)) if self.shape else 1

    def starts(self) -> tuple[np.ndarray, np.ndarray]:
        """(first point, number of points) of every cell."""
        idx = np.arange(self.ncells)
        lo = np.searchsorted(self.cell, idx, side="left")
        hi = np.searchsorted(self.cell, idx, side="right")
        return lo, hi - lo

    def best(self, lam: float) -> np.ndarray:
        """Least ``t + lam * m`` per cell (+inf for an empty cell), shaped like the grid."""
        out = np.full(self.ncells, np.inf)
        np.minimum.at(out, self.cell, self.t + lam * self.m)
        return out.reshape(self.shape) if self.shape else out


@dataclass(frozen=True)
class Rules:
    """The pruning rules of one search: multiplier, gap (s), memory limit and floor (bytes)."""

    lam: float
    gap: float
    limit: float
    total_floor: float  # least memory of the whole problem

    def cap(self, floor: float) -> float:
        """Most memory a table with ``floor`` folded in may hold and still fit."""
        return self.limit - (self.total_floor - floor) + 1e-9 * abs(self.limit)


def _segmented_prefix_min(values: np.ndarray, group: np.ndarray) -> np.ndarray:
    """Running minimum of ``values`` within runs of equal ``group`` (inclusive)."""
    out = values.copy()
    n = len(out)
    shift = 1
    while shift < n:
        same = group[shift:] == group[:-shift]
        cand = np.where(same, out[:-shift], np.inf)
        out[shift:] = np.minimum(out[shift:], cand)
        shift *= 2
    return out


def prune(
    cell: np.ndarray,
    t: np.ndarray,
    m: np.ndarray,
    rules: Rules,
    floor: float,
    bound: np.ndarray | None = None,
) -> np.ndarray:
    """Indices of the points that survive the three rules, sorted by (cell, memory).

    ``bound[cell]`` is the least ``t + lam*m`` of the cell when known (else computed here).
    """
    if len(cell) == 0:
        return np.zeros(0, dtype=np.int64)
    red = t + rules.lam * m
    if bound is None:
        uniq, inv = np.unique(cell, return_inverse=True)
        low = np.full(len(uniq), np.inf)
        np.minimum.at(low, inv, red)
        limit_red = low[inv]
    else:
        limit_red = bound[cell]
    slack = rules.gap + GAP_TOLERANCE * (np.abs(limit_red) + rules.gap)
    keep = (red <= limit_red + slack) & (m <= rules.cap(floor)) & np.isfinite(t)
    idx = np.flatnonzero(keep)
    if len(idx) == 0:
        return idx
    order = np.lexsort((t[idx], m[idx], cell[idx]))
    idx = idx[order]
    c, tt = cell[idx], t[idx]
    prev = np.empty(len(idx))
    prev[0] = np.inf
    prev[1:] = _segmented_prefix_min(tt, c)[:-1]
    first = np.ones(len(idx), dtype=bool)
    first[1:] = c[1:] != c[:-1]
    prev[first] = np.inf
    tol = 1e-12 * np.abs(tt)
    survive = tt < prev - tol
    idx = idx[survive]
    if len(idx) > MAX_POINTS:
        raise TruncatedError(f"a front table grew past {MAX_POINTS} points")
    return idx


def node_table(
    name: str, time: np.ndarray, memory: np.ndarray, rules: Rules, *, key_prefix: str = ""
) -> FrontTable:
    """A node's fronts from its option arrays [strategies, options] (seconds, bytes)."""
    s_count, o_count = time.shape
    cell = np.repeat(np.arange(s_count), o_count)
    opt = np.tile(np.arange(o_count), s_count)
    t, m = time.ravel(), memory.ravel()
    floor = float(np.min(memory[np.isfinite(time)])) if np.isfinite(time).any() else 0.0
    keep = prune(cell, t, m, rules, floor)
    return FrontTable(
        (s_count,),
        cell[keep],
        t[keep],
        m[keep],
        floor,
        [],
        np.zeros((len(keep), 0), dtype=np.int64),
        [(key_prefix + name, cell[keep], 0), ("opt:" + key_prefix + name, opt[keep], 0)],
    )


def edge_table(matrix: np.ndarray) -> FrontTable:
    """An edge's fronts: one point per finite entry, no memory."""
    a, c = matrix.shape
    flat = matrix.ravel()
    cell = np.flatnonzero(np.isfinite(flat))
    return FrontTable(
        (a, c),
        cell,
        flat[cell].astype(float),
        np.zeros(len(cell)),
        0.0,
        [],
        np.zeros((len(cell), 0), dtype=np.int64),
        [],
    )


def constant_table() -> FrontTable:
    """The empty sum: one point (0 s, 0 bytes) in the single cell."""
    return FrontTable(
        (),
        np.zeros(1, dtype=np.int64),
        np.zeros(1),
        np.zeros(1),
        0.0,
        [],
        np.zeros((1, 0), dtype=np.int64),
        [],
    )


def transpose(x: FrontTable) -> FrontTable:
    """An edge table with its two ends swapped."""
    a, c = x.shape
    cell = (x.cell % c) * a + x.cell // c
    order = np.argsort(cell, kind="stable")
    return FrontTable(
        (c, a),
        cell[order],
        x.t[order],
        x.m[order],
        x.floor,
        [(x, 0)],
        order[:, None].astype(np.int64),
        [],
    )


def _expand(counts: list[np.ndarray]) -> tuple[np.ndarray, list[np.ndarray]]:
    """For candidates with ``counts[j][i]`` points in source j: every combination, as
    (candidate index, offset within source j) arrays."""
    total = np.ones_like(counts[0])
    for c in counts:
        total = total * c
    n = int(total.sum())
    rep = np.repeat(np.arange(len(total)), total)
    start = np.cumsum(total) - total
    local = np.arange(n) - start[rep]
    offs = []
    for c in reversed(counts):
        cr = c[rep]
        offs.append(local % cr)
        local = local // cr
    return rep, offs[::-1]


def combine(
    shape: tuple[int, ...],
    out_cell: np.ndarray,
    sources: list[tuple[FrontTable, np.ndarray]],
    rules: Rules,
    bound: np.ndarray | None,
    fixes: list[tuple[str, np.ndarray, int]],
    shifts: list[int] | None = None,
) -> FrontTable:
    """Sum one point of each source for every candidate (``out_cell[i]``, source cells ``i``),
    over all point combinations, then prune. ``fixes`` give values per candidate."""
    floor = sum(tab.floor for tab, _ in sources)
    if len(out_cell) == 0:
        return FrontTable(
            shape,
            np.zeros(0, dtype=np.int64),
            np.zeros(0),
            np.zeros(0),
            floor,
            [(tab, s) for (tab, _), s in zip(sources, shifts or [0] * len(sources))],
            np.zeros((0, len(sources)), dtype=np.int64),
            [(k, v[:0], o) for k, v, o in fixes],
        )
    ranges = [tab.starts() for tab, _ in sources]
    counts = [cnt[cells] for (lo, cnt), (_, cells) in zip(ranges, sources)]
    rep, offs = _expand(counts)
    if len(rep) > 4 * MAX_POINTS:
        raise TruncatedError(f"{len(rep)} point combinations in one step")
    pts = [lo[cells][rep] + off for (lo, _), (_, cells), off in zip(ranges, sources, offs)]
    t = np.zeros(len(rep))
    m = np.zeros(len(rep))
    for (tab, _), p in zip(sources, pts):
        t += tab.t[p]
        m += tab.m[p]
    cell = out_cell[rep]
    keep = prune(cell, t, m, rules, floor, bound)
    return FrontTable(
        shape,
        cell[keep],
        t[keep],
        m[keep],
        floor,
        [(tab, s) for (tab, _), s in zip(sources, shifts or [0] * len(sources))],
        np.stack([p[keep] for p in pts], axis=1) if pts else np.zeros((len(keep), 0), int),
        [(k, v[rep][keep], o) for k, v, o in fixes],
    )


def series(
    uv: FrontTable,
    v: FrontTable | None,
    vw: FrontTable,
    rules: Rules,
    v_key: str | None,
    shifts: tuple[int, int, int] = (0, 0, 0),
    key_offset: int = 0,
) -> FrontTable:
    """Eliminate the middle of u -(uv)- v -(vw)- w: fronts over (a, c) of
    ``uv[a, b] + v[b] + vw[b, c]`` for every b (b is recorded under ``v_key``, at layer offset
    ``key_offset``); ``shifts`` move the layer offset of each source."""
    a, b = uv.shape
    c = vw.shape[1]
    r_uv = uv.best(rules.lam)
    r_vw = vw.best(rules.lam)
    r_v = v.best(rules.lam) if v is not None else np.zeros(b)
    low, _ = min_plus(r_uv, r_v, r_vw)
    low_flat = low.ravel()
    cand: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    step = max(1, (1 << 22) // max(1, b * c))
    for start in range(0, a, step):
        blk = r_uv[start : start + step, :, None] + r_v[None, :, None] + r_vw[None, :, :]
        lim = low[start : start + step, None, :]
        slack = rules.gap + GAP_TOLERANCE * (np.abs(lim) + rules.gap)
        ia, ib, ic = np.nonzero(blk <= lim + slack)
        cand.append((ia + start, ib, ic))
    ia = np.concatenate([x[0] for x in cand])
    ib = np.concatenate([x[1] for x in cand])
    ic = np.concatenate([x[2] for x in cand])
    sources = [(uv, ia * b + ib)]
    shift_list = [shifts[0]]
    if v is not None:
        sources.append((v, ib))
        shift_list.append(shifts[1])
    sources.append((vw, ib * c + ic))
    shift_list.append(shifts[2])
    fixes = [(v_key, ib, key_offset)] if v_key is not None else []
    return combine((a, c), ia * c + ic, sources, rules, low_flat, fixes, shift_list)


def add(x: FrontTable, y: FrontTable, rules: Rules) -> FrontTable:
    """Cellwise sum of two tables of the same shape (parallel edges, or a node plus a row)."""
    rx, ry = x.best(rules.lam).ravel(), y.best(rules.lam).ravel()
    both = np.flatnonzero(np.isfinite(rx) & np.isfinite(ry))
    bound = np.full(x.ncells, np.inf)
    bound[both] = rx[both] + ry[both]
    return combine(x.shape, both, [(x, both), (y, both)], rules, bound, [])


def union(tables: list[FrontTable], rules: Rules, key: str, values: list[int]) -> FrontTable:
    """Fronts of the best of several alternatives for the same cells (recorded under ``key``)."""
    shape = tables[0].shape
    cell = np.concatenate([t.cell for t in tables])
    tt = np.concatenate([t.t for t in tables])
    mm = np.concatenate([t.m for t in tables])
    which = np.concatenate([np.full(len(t.cell), i) for i, t in enumerate(tables)])
    local = np.concatenate([np.arange(len(t.cell)) for t in tables])
    floor = min(t.floor for t in tables)
    keep = prune(cell, tt, mm, rules, floor)
    src = np.full((len(keep), len(tables)), -1, dtype=np.int64)
    src[np.arange(len(keep)), which[keep]] = local[keep]
    return FrontTable(
        shape,
        cell[keep],
        tt[keep],
        mm[keep],
        floor,
        [(t, 0) for t in tables],
        src,
        [(key, np.array(values)[which[keep]], 0)],
    )


def row(x: FrontTable, i: int) -> FrontTable:
    """Row ``i`` of an edge table, as a node table over the other end."""
    c = x.shape[1]
    sel = np.flatnonzero(x.cell // c == i)
    return FrontTable(
        (c,),
        x.cell[sel] % c,
        x.t[sel],
        x.m[sel],
        x.floor,
        [(x, 0)],
        sel[:, None].astype(np.int64),
        [],
    )


def cell_of(x: FrontTable, i: int) -> FrontTable:
    """Cell ``i`` of a node table, as a constant table."""
    sel = np.flatnonzero(x.cell == i)
    return FrontTable(
        (),
        np.zeros(len(sel), dtype=np.int64),
        x.t[sel],
        x.m[sel],
        x.floor,
        [(x, 0)],
        sel[:, None].astype(np.int64),
        [],
    )


def recover(table: FrontTable, point: int) -> dict[tuple[str, int], int]:
    """Every fixed value behind one point: {(key, layer offset): value}."""
    out: dict[tuple[str, int], int] = {}
    stack = [(table, point, 0)]
    while stack:
        tab, p, off = stack.pop()
        for key, vals, extra in tab.fixes:
            out[(key, off + extra)] = int(vals[p])
        for j, (parent, shift) in enumerate(tab.parents):
            q = int(tab.src[p, j])
            if q >= 0:
                stack.append((parent, q, off + shift))
    return out


def pick(table: FrontTable, limit: float) -> int | None:
    """The fastest point within ``limit`` bytes (ties: less memory, then the first)."""
    ok = np.flatnonzero(table.m <= limit * (1 + 1e-12))
    if len(ok) == 0:
        return None
    order = np.lexsort((ok, table.m[ok], table.t[ok]))
    return int(ok[order[0]])


@dataclass
class _FrontState:
    """Working copy of a front elimination: node tables, oriented edge tables, constant."""

    nodes: dict[str, FrontTable]
    adj: dict[str, dict[str, FrontTable]]  # adj[u][v] has shape (S_u, S_v)
    constant: FrontTable

    def add_edge(self, u: str, v: str, tab: FrontTable, rules: Rules) -> None:
        if v in self.adj[u]:
            tab = add(self.adj[u][v], tab, rules)
        self.adj[u][v] = tab
        self.adj[v][u] = transpose(tab)

    def remove(self, v: str) -> None:
        for u in self.adj.pop(v):
            del self.adj[u][v]
        del self.nodes[v]

    def copy(self) -> _FrontState:
        return _FrontState(
            dict(self.nodes), {k: dict(v) for k, v in self.adj.items()}, self.constant
        )


def _fold_constant(const: FrontTable, v: FrontTable, key: str, rules: Rules) -> FrontTable:
    """The constant plus the best of an isolated node's cells (its strategy under ``key``)."""
    _, cnt = v.starts()
    cells = np.flatnonzero(cnt > 0)
    return combine(
        (),
        np.zeros(len(cells), dtype=np.int64),
        [(const, np.zeros(len(cells), int)), (v, cells)],
        rules,
        None,
        [(key, cells, 0)],
    )


def _leaf(st: _FrontState, v: str, u: str, rules: Rules) -> None:
    """Fold degree-one ``v`` into its neighbour ``u``."""
    uv = st.adj[u][v]  # (S_u, S_v)
    ones = edge_table(np.zeros((uv.shape[1], 1)))
    folded = series(uv, st.nodes[v], ones, rules, v)
    folded = FrontTable(
        (uv.shape[0],),
        folded.cell,
        folded.t,
        folded.m,
        folded.floor,
        folded.parents,
        folded.src,
        folded.fixes,
    )
    st.nodes[u] = add(st.nodes[u], folded, rules)
    st.remove(v)


def _kept(st: _FrontState, keep: tuple[str, ...], rules: Rules) -> FrontTable:
    """Everything left as one table over the kept nodes' strategies (at most two)."""
    const = st.constant
    if not keep:
        return const
    if len(keep) == 1:
        e = st.nodes[keep[0]]
        return combine(
            e.shape,
            np.arange(e.ncells),
            [(const, np.zeros(e.ncells, int)), (e, np.arange(e.ncells))],
            rules,
            None,
            [],
        )
    a_name, c_name = keep
    e, x = st.nodes[a_name], st.nodes[c_name]
    a, c = e.ncells, x.ncells
    edge = st.adj[a_name].get(c_name) or edge_table(np.zeros((a, c)))
    bound = (
        const.best(rules.lam)[0]
        + e.best(rules.lam)[:, None]
        + x.best(rules.lam)[None, :]
        + edge.best(rules.lam)
    ).ravel()
    cells = np.flatnonzero(np.isfinite(bound))
    return combine(
        (a, c),
        cells,
        [(const, np.zeros(len(cells), int)), (e, cells // c), (x, cells % c), (edge, cells)],
        rules,
        bound,
        [],
    )


def eliminate(
    nodes: dict[str, FrontTable],
    edges: list[tuple[str, str, FrontTable]],
    keep: tuple[str, ...],
    rules: Rules,
) -> FrontTable:
    """Fronts of the whole problem over the kept nodes' strategies (at most two kept).

    Degree-0/1/2 nodes are eliminated cheapest first (as the plain DP does); a knot of nodes of
    degree >= 3 is broken by fixing the node with the fewest strategies to each of them.
    """
    st = _FrontState(dict(nodes), {n: {} for n in nodes}, constant_table())
    for u, v, tab in edges:
        st.add_edge(u, v, tab, rules)
    return _eliminate_state(st, keep, rules)


def _eliminate_state(st: _FrontState, keep: tuple[str, ...], rules: Rules) -> FrontTable:
    kept = set(keep)
    while True:
        cands = [n for n in st.nodes if n not in kept and len(st.adj[n]) <= 2]
        if not cands:
            break

        def work(n: str) -> float:
            size = float(st.nodes[n].ncells)
            for u in st.adj[n]:
                size *= st.nodes[u].ncells
            return size

        v = min(cands, key=lambda n: (work(n), n))
        nbrs = sorted(st.adj[v])
        if not nbrs:
            st.constant = _fold_constant(st.constant, st.nodes[v], v, rules)
            st.remove(v)
        elif len(nbrs) == 1:
            _leaf(st, v, nbrs[0], rules)
        else:
            u, w = nbrs
            out = series(st.adj[u][v], st.nodes[v], st.adj[v][w], rules, v)
            st.remove(v)
            st.add_edge(u, w, out, rules)
    rest = [n for n in st.nodes if n not in kept]
    if not rest:
        return _kept(st, keep, rules)
    z = min(rest, key=lambda n: (st.nodes[n].ncells, -len(st.adj[n]), n))
    zt = st.nodes[z]
    _, cnt = zt.starts()
    results: list[FrontTable] = []
    values: list[int] = []
    for x in np.flatnonzero(cnt > 0):
        sub = st.copy()
        sub.constant = add(sub.constant, cell_of(zt, int(x)), rules)
        for y, tab in sub.adj[z].items():
            sub.nodes[y] = add(sub.nodes[y], row(tab, int(x)), rules)
        sub.remove(z)
        results.append(_eliminate_state(sub, keep, rules))
        values.append(int(x))
    return union(results, rules, z, values)
