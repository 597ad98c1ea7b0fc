"""Exact memory-constrained elimination: Pareto fronts of (time, memory) instead of numbers.

Minimising time under a memory limit breaks the plain DP (memory is a second sum). Here an
elimination :class:`Schedule` (which node is folded into which table, in what order) is run
three times at a Lagrange multiplier ``lam``:

1. on numbers ``t + lam * m`` (the plain DP): each table's least value per cell;
2. backwards: each table's *outside*, the least value of everything else given the cell;
3. on *fronts*: every cell holds the (seconds, bytes) pairs of the partial plans it stands for
   that no other beats on both, pruned by three rules that keep the constrained optimum:

   - Pareto: a partial plan slower and larger than another in the same cell is dropped;
   - memory cap: one whose bytes plus the least bytes of the rest exceed the limit;
   - Lagrangian: one whose ``t + lam * m`` plus the cell's outside exceeds ``L + g``, where L
     is the least value of the whole problem. A fitting plan of time T has value at most
     ``T + lam * limit``, so with ``g = T - (L - lam * limit)`` for a known fitting T, every
     plan at least as fast survives.

Tables remember where each point came from, so the winner's strategies (and options) are
recovered by walking back. Tables may be used by several steps (a layer's table is squared to
make many layers); outsides then take the least over the uses.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from taps_core.solver.clock import cpu_seconds
from taps_core.solver.minplus import min_plus_values

GAP_TOLERANCE = 1e-9  # relative slack on the Lagrangian rule, against float round-off
MAX_POINTS = 60_000_000  # a step with more point combinations gives up (result unproven)
CHUNK_POINTS = 2_000_000  # combinations expanded and pruned at once


class TruncatedError(Exception):
    """A step outgrew :data:`MAX_POINTS`: the exact search is out of reach at this gap."""


class KnotError(Exception):
    """The graph has a knot (every node of degree 3 or more): no series-parallel schedule."""


# ---- schedules -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    """One table-making step.

    kinds: ``transpose`` (args: x), ``add`` (x, y), ``leaf`` (node u, node v, edge u->v),
    ``series`` (edge u->v, node v or -1, edge v->w), ``root`` (constant, node v), ``kept``
    (constant, node a, node c or -1, edge a->c or -1), ``union`` (alternatives...), ``join``
    (x, y over the same cells: the least of their sum; numbers only).
    ``key`` records the eliminated node's strategy (or the union's choice) under that name, at
    layer offset ``key_offset``; ``shifts`` move the layer offset of each argument.
    """

    kind: str
    out: int
    args: tuple[int, ...]
    key: str | None = None
    key_offset: int = 0
    shifts: tuple[int, ...] = ()
    values: tuple[int, ...] = ()  # union: the value recorded for each alternative


@dataclass
class Schedule:
    """Input tables (by id), steps in order, and the final table's id."""

    inputs: dict[int, tuple] = field(default_factory=dict)  # id -> ("node", name, variant) ...
    steps: list[Step] = field(default_factory=list)
    shapes: dict[int, tuple[int, ...]] = field(default_factory=dict)
    final: int = -1
    marks: dict[str, int] = field(default_factory=dict)  # named tables (e.g. "block", "top")
    _next: int = 0

    def new(self, shape: tuple[int, ...]) -> int:
        i = self._next
        self._next += 1
        self.shapes[i] = shape
        return i

    def input(self, spec: tuple, shape: tuple[int, ...]) -> int:
        i = self.new(shape)
        self.inputs[i] = spec
        return i

    def step(self, kind: str, args: tuple[int, ...], shape: tuple[int, ...], **kw: object) -> int:
        out = self.new(shape)
        self.steps.append(Step(kind, out, args, **kw))  # type: ignore[arg-type]
        return out


def eliminate_schedule(
    sched: Schedule,
    nodes: dict[str, int],
    edges: list[tuple[str, str, int]],
    keep: tuple[str, ...],
) -> int:
    """Append the steps that fold every node but ``keep`` (at most two) into one table over the
    kept nodes; return its id. Degree-0/1/2 nodes go cheapest first, as in the plain DP."""
    node = dict(nodes)
    adj: dict[str, dict[str, int]] = {n: {} for n in node}  # adj[u][v]: table oriented u->v

    def size(n: str) -> int:
        return sched.shapes[node[n]][0]

    def put(u: str, v: str, tab: int) -> None:
        if v in adj[u]:
            tab = sched.step("add", (adj[u][v], tab), sched.shapes[tab])
        adj[u][v] = tab
        adj[v][u] = sched.step("transpose", (tab,), sched.shapes[tab][::-1])

    for u, v, tab in edges:
        put(u, v, tab)
    const = sched.input(("const",), ())
    kept = set(keep)
    while True:
        cands = [n for n in node if n not in kept and len(adj[n]) <= 2]
        if not cands:
            break

        def work(n: str) -> tuple[float, str]:
            w = float(size(n))
            for u in adj[n]:
                w *= size(u)
            return w, n

        v = min(cands, key=work)
        nbrs = sorted(adj[v])
        if not nbrs:
            const = sched.step("root", (const, node[v]), (), key=v)
        elif len(nbrs) == 1:
            u = nbrs[0]
            node[u] = sched.step("leaf", (node[u], node[v], adj[u][v]), (size(u),), key=v)
        else:
            u, w = nbrs
            tab = sched.step("series", (adj[u][v], node[v], adj[v][w]), (size(u), size(w)), key=v)
            _drop(adj, v)
            del node[v]
            put(u, w, tab)
            continue
        _drop(adj, v)
        del node[v]
    rest = [n for n in node if n not in kept]
    if rest:
        raise KnotError(f"nodes {rest[:4]} form a knot")
    if not keep:
        return const
    if len(keep) == 1:
        return sched.step("kept", (const, node[keep[0]], -1, -1), (size(keep[0]),))
    a, c = keep
    edge = adj[a].get(c, -1)
    return sched.step("kept", (const, node[a], node[c], edge), (size(a), size(c)))


def _drop(adj: dict[str, dict[str, int]], v: str) -> None:
    for u in adj.pop(v):
        del adj[u][v]


# ---- numbers: forward values and backward outsides -------------------------------------------

def forward_values(sched: Schedule, inputs: dict[int, np.ndarray]) -> dict[int, np.ndarray]:
    """Every table's least value per cell (the plain DP on the schedule)."""
    val = dict(inputs)
    for st in sched.steps:
        a = [val[i] if i >= 0 else None for i in st.args]
        if st.kind == "transpose":
            out = a[0].T
        elif st.kind == "add":
            out = a[0] + a[1]
        elif st.kind == "leaf":
            out = a[0] + (a[2] + a[1][None, :]).min(axis=1)
        elif st.kind == "series":
            mid = a[1] if a[1] is not None else np.zeros(a[0].shape[1])
            out = min_plus_values(a[0], mid, a[2])
        elif st.kind == "root":
            out = a[0] + a[1].min()
        elif st.kind == "kept":
            out = _kept_values(a)
        elif st.kind == "join":  # two tables over the same cells, summed, best cell
            out = np.asarray((a[0] + a[1]).min())
        else:  # union
            out = np.minimum.reduce(a)
        val[st.out] = out
    return val


def _kept_values(a: list) -> np.ndarray:
    const, na, nc, edge = a
    if nc is None:
        return const + na
    out = const + na[:, None] + nc[None, :]
    return out + edge if edge is not None else out


def backward_outsides(
    sched: Schedule, val: dict[int, np.ndarray], final_outside: np.ndarray | float = 0.0
) -> dict[int, np.ndarray]:
    """Every table's outside: the least value of the rest of the problem given its cell."""
    out: dict[int, np.ndarray] = {
        sched.final: np.broadcast_to(
            np.asarray(final_outside, dtype=float), np.shape(val[sched.final])
        ).copy()
    }

    def give(i: int, o: np.ndarray) -> None:
        if i < 0:
            return
        out[i] = o if i not in out else np.minimum(out[i], o)

    for st in reversed(sched.steps):
        if st.out not in out:
            continue
        oz = out[st.out]
        a = [val[i] if i >= 0 else None for i in st.args]
        if st.kind == "transpose":
            give(st.args[0], oz.T)
        elif st.kind == "add":
            give(st.args[0], oz + a[1])
            give(st.args[1], oz + a[0])
        elif st.kind == "leaf":
            nu, nv, e = a
            give(st.args[0], oz + (e + nv[None, :]).min(axis=1))
            give(st.args[1], ((oz + nu)[:, None] + e).min(axis=0))
            give(st.args[2], (oz + nu)[:, None] + nv[None, :])
        elif st.kind == "series":
            euv, nv, evw = a
            mid = nv if nv is not None else np.zeros(euv.shape[1])
            tail = min_plus_values(oz, np.zeros(oz.shape[1]), evw.T)  # [a, b]
            give(st.args[0], tail + mid[None, :])
            if nv is not None:
                give(st.args[1], (euv + tail).min(axis=0))
            head = min_plus_values(euv.T, np.zeros(euv.shape[0]), oz)  # [b, c]
            give(st.args[2], head + mid[:, None])
        elif st.kind == "root":
            const, nv = a
            give(st.args[0], oz + nv.min())
            give(st.args[1], oz + const + np.zeros_like(nv))
        elif st.kind == "kept":
            _kept_outsides(st, a, oz, give)
        elif st.kind == "join":
            give(st.args[0], oz + a[1])
            give(st.args[1], oz + a[0])
        else:  # union: each alternative sees the same rest
            for i in st.args:
                give(i, oz)
    return out


def _kept_outsides(
    st: Step, a: list, oz: np.ndarray, give: Callable[[int, np.ndarray], None]
) -> None:
    const, na, nc, edge = a
    if nc is None:
        give(st.args[0], np.asarray((oz + na).min()))
        give(st.args[1], oz + const)
        return
    e = edge if edge is not None else 0.0
    full = oz + na[:, None] + nc[None, :] + e
    give(st.args[0], np.asarray(full.min()))
    give(st.args[1], (oz + const + nc[None, :] + e).min(axis=1))
    give(st.args[2], (oz + const + na[:, None] + e).min(axis=0))
    if st.args[3] >= 0:
        give(st.args[3], oz + const + na[:, None] + nc[None, :])


# ---- fronts ----------------------------------------------------------------------------------


@dataclass
class FrontTable:
    """Fronts over a grid of cells (``shape``: () a constant, (n,) a node, (a, c) an edge).

    Points are sorted by cell. ``parents[j]`` is (table, layer shift) and ``src[:, j]`` the
    point each point came from there (-1: none); ``fixes`` are (key, value per point, layer
    offset): an eliminated node's strategy, a node's option, a recomputation flag.
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
    """Pruning: multiplier (s/byte), target value (s), memory limit and least total (bytes);
    ``deadline`` (a :func:`~taps_core.solver.clock.cpu_seconds` value) past which a pass gives
    up."""

    lam_s_per_byte: float
    target_s: float
    limit_bytes: float
    total_floor_bytes: float
    deadline: float = float("inf")  # a cpu_seconds() value (s)

    def cap(self, floor: float) -> float:
        """Most memory a table with ``floor`` folded in may hold and still fit."""
        return self.limit_bytes - (self.total_floor_bytes - floor) + 1e-9 * abs(self.limit_bytes)

    def slack(self) -> float:
        return GAP_TOLERANCE * max(abs(self.target_s), 1e-30)


def _segmented_prefix_min(values: np.ndarray, group: np.ndarray) -> np.ndarray:
    """Running minimum of ``values`` within runs of equal ``group`` (inclusive)."""
    n = len(values)
    if n == 0:
        return values.copy()
    starts = np.flatnonzero(np.r_[True, group[1:] != group[:-1]])
    sizes = np.diff(np.r_[starts, n])
    width = int(sizes.max())
    if width * len(starts) <= 4 * n + 1024:  # runs of similar length: one padded accumulate
        rows = np.repeat(np.arange(len(starts)), sizes)
        cols = np.arange(n) - starts[rows]
        pad = np.full((len(starts), width), np.inf)
        pad[rows, cols] = values
        return np.minimum.accumulate(pad, axis=1)[rows, cols]
    out = values.copy()
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
    outside: np.ndarray,
) -> np.ndarray:
    """Indices of the points that survive the three rules, sorted by (cell, memory)."""
    if len(cell) == 0:
        return np.zeros(0, dtype=np.int64)
    red = t + rules.lam_s_per_byte * m + outside.ravel()[cell]
    keep = (red <= rules.target_s + rules.slack()) & (m <= rules.cap(floor)) & np.isfinite(t)
    idx = np.flatnonzero(keep)
    if len(idx) == 0:
        return idx
    idx = idx[np.lexsort((m[idx], cell[idx]))]
    c, tt = cell[idx], t[idx]
    prev = np.empty(len(idx))
    prev[0] = np.inf
    prev[1:] = _segmented_prefix_min(tt, c)[:-1]
    first = np.ones(len(idx), dtype=bool)
    first[1:] = c[1:] != c[:-1]
    prev[first] = np.inf
    return idx[tt < prev - 1e-12 * np.abs(tt)]


def _expand(counts: list[np.ndarray]) -> tuple[np.ndarray, list[np.ndarray]]:
    """Every combination of one point per source: (candidate index, offset in each source)."""
    total = np.ones_like(counts[0])
    for c in counts:
        total = total * c
    n = int(total.sum())
    rep = np.repeat(np.arange(len(total)), total)
    local = np.arange(n) - (np.cumsum(total) - total)[rep]
    offs = []
    for c in reversed(counts):
        cr = c[rep]
        offs.append(local % cr)
        local = local // cr
    return rep, offs[::-1]


def combine(
    shape: tuple[int, ...],
    out_cell: np.ndarray,
    sources: list[tuple[FrontTable, np.ndarray, int]],
    rules: Rules,
    outside: np.ndarray,
    fixes: list[tuple[str, np.ndarray, int]],
) -> FrontTable:
    """For each candidate ``i``: sum one point of every source (table, its cell ``i``, layer
    shift) over all point combinations, into ``out_cell[i]``; then prune. Candidates are
    expanded in chunks of about :data:`CHUNK_POINTS` combinations, pruned chunk by chunk."""
    floor = sum(tab.floor for tab, _, _ in sources)
    parents = [(tab, shift) for tab, _, shift in sources]
    if len(out_cell) == 0:
        none = np.zeros(0, dtype=np.int64)
        return FrontTable(
            shape,
            none,
            np.zeros(0),
            np.zeros(0),
            floor,
            parents,
            np.zeros((0, len(sources)), dtype=np.int64),
            [(k, none, o) for k, _, o in fixes],
        )
    ranges = [tab.starts() for tab, _, _ in sources]
    counts = [cnt[cells] for (_, cnt), (_, cells, _) in zip(ranges, sources)]
    total = np.ones(len(out_cell), dtype=np.int64)
    for c in counts:
        total = total * c
    if int(total.sum()) > MAX_POINTS:
        raise TruncatedError(f"{int(total.sum())} point combinations in one step")
    bounds = np.searchsorted(np.cumsum(total), np.arange(CHUNK_POINTS, total.sum(), CHUNK_POINTS))
    edges = [0, *sorted(set(bounds.tolist()) - {0}), len(out_cell)]
    parts: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, list[np.ndarray]]] = []
    for lo_i, hi_i in itertools.pairwise(edges):
        sel = slice(lo_i, hi_i)
        rep, offs = _expand([c[sel] for c in counts]) if hi_i > lo_i else (np.zeros(0, int), [])
        rep = rep + lo_i
        pts = [lo[cells][rep] + off for (lo, _), (_, cells, _), off in zip(ranges, sources, offs)]
        t = np.zeros(len(rep))
        m = np.zeros(len(rep))
        for (tab, _, _), p in zip(sources, pts):
            t += tab.t[p]
            m += tab.m[p]
        cell = out_cell[rep]
        keep = prune(cell, t, m, rules, floor, outside)
        parts.append((cell[keep], t[keep], m[keep], rep[keep], [p[keep] for p in pts]))
    cell = np.concatenate([x[0] for x in parts]) if parts else np.zeros(0, dtype=np.int64)
    t = np.concatenate([x[1] for x in parts]) if parts else np.zeros(0)
    m = np.concatenate([x[2] for x in parts]) if parts else np.zeros(0)
    rep = np.concatenate([x[3] for x in parts]) if parts else np.zeros(0, dtype=np.int64)
    pts = [np.concatenate([x[4][j] for x in parts]) for j in range(len(sources))] if parts else []
    keep = prune(cell, t, m, rules, floor, outside) if len(parts) > 1 else np.arange(len(cell))
    src = (
        np.stack([p[keep] for p in pts], axis=1)
        if pts
        else np.zeros((len(keep), len(sources)), dtype=np.int64)
    )
    return FrontTable(
        shape,
        cell[keep],
        t[keep],
        m[keep],
        floor,
        parents,
        src,
        [(k, v[rep][keep], o) for k, v, o in fixes],
    )


def node_front(
    name: str, time: np.ndarray, memory: np.ndarray, rules: Rules, outside: np.ndarray
) -> FrontTable:
    """A node's fronts from its option arrays [strategies, options] (seconds, bytes)."""
    s_count, o_count = time.shape
    cell = np.repeat(np.arange(s_count), o_count)
    opt = np.tile(np.arange(o_count), s_count)
    t, m = time.ravel(), memory.ravel()
    finite = np.isfinite(t)
    floor = float(np.min(m[finite])) if finite.any() else 0.0
    keep = prune(cell, t, m, rules, floor, outside)
    return FrontTable(
        (s_count,),
        cell[keep],
        t[keep],
        m[keep],
        floor,
        [],
        np.zeros((len(keep), 0), dtype=np.int64),
        [(name, cell[keep], 0), ("opt:" + name, opt[keep], 0)],
    )


def matrix_front(matrix: np.ndarray, rules: Rules, outside: np.ndarray) -> FrontTable:
    """An edge's fronts: one point (seconds, 0 bytes) per entry."""
    flat = np.asarray(matrix, dtype=float).ravel()
    cell = np.arange(len(flat))
    keep = prune(cell, flat, np.zeros(len(flat)), rules, 0.0, outside)
    return FrontTable(
        matrix.shape,
        cell[keep],
        flat[keep],
        np.zeros(len(keep)),
        0.0,
        [],
        np.zeros((len(keep), 0), dtype=np.int64),
        [],
    )


def constant_front() -> FrontTable:
    """The empty sum: one point (0 s, 0 bytes)."""
    one = np.zeros(1)
    return FrontTable(
        (),
        np.zeros(1, dtype=np.int64),
        one,
        one.copy(),
        0.0,
        [],
        np.zeros((1, 0), dtype=np.int64),
        [],
    )


def forward_fronts(
    sched: Schedule,
    inputs: dict[int, FrontTable],
    outside: dict[int, np.ndarray],
    rules: Rules,
    wanted: tuple[int, ...] | None = None,
) -> dict[int, FrontTable]:
    """Run the schedule on fronts up to the ``wanted`` tables (default: the final one)."""
    tab = dict(inputs)
    lam = rules.lam_s_per_byte
    wanted = (sched.final,) if wanted is None else wanted
    needed = _ancestors(sched, wanted)
    for st in sched.steps:
        if st.out not in outside or st.out not in needed:
            continue  # not on any path to a wanted table
        if cpu_seconds() > rules.deadline:
            raise TruncatedError("the front search ran out of time")
        oz = np.asarray(outside[st.out], dtype=float)
        a = [tab[i] if i >= 0 else None for i in st.args]
        sh = st.shifts or (0,) * len(st.args)
        fix = _fixer(st)
        if st.kind == "transpose":
            x = a[0]
            r, c = x.shape
            cell = (x.cell % c) * r + x.cell // c
            order = np.argsort(cell, kind="stable")
            out = FrontTable(
                (c, r),
                cell[order],
                x.t[order],
                x.m[order],
                x.floor,
                [(x, 0)],
                order[:, None].astype(np.int64),
                [],
            )
        elif st.kind == "add":
            x, y = a
            both = np.flatnonzero(np.isfinite(x.best(lam).ravel() + y.best(lam).ravel()))
            out = combine(x.shape, both, [(x, both, sh[0]), (y, both, sh[1])], rules, oz, [])
        elif st.kind == "leaf":
            nu, nv, e = a
            low = e.best(lam) + nv.best(lam)[None, :] + nu.best(lam)[:, None] + oz[:, None]
            ia, ib = np.nonzero(low <= rules.target_s + rules.slack())
            b = nv.shape[0]
            out = combine(
                nu.shape,
                ia,
                [(nu, ia, sh[0]), (nv, ib, sh[1]), (e, ia * b + ib, sh[2])],
                rules,
                oz,
                fix(ib),
            )
        elif st.kind == "series":
            out = _series(st, a, sh, oz, rules, fix)
        elif st.kind == "root":
            const, nv = a
            cells = np.flatnonzero(np.isfinite(nv.best(lam)))
            out = combine(
                (),
                np.zeros(len(cells), dtype=np.int64),
                [(const, np.zeros(len(cells), dtype=np.int64), sh[0]), (nv, cells, sh[1])],
                rules,
                oz,
                fix(cells),
            )
        elif st.kind == "kept":
            out = _kept_front(a, sh, oz, rules)
        elif st.kind == "join":
            x, y = a
            low = (x.best(lam) + y.best(lam)).ravel()
            cells = np.flatnonzero(low <= rules.target_s + rules.slack())
            zero = np.zeros(len(cells), dtype=np.int64)
            out = combine((), zero, [(x, cells, sh[0]), (y, cells, sh[1])], rules, oz, [])
        else:  # union
            out = _union(st, a, rules, oz)
        tab[st.out] = out
    return {i: tab[i] for i in wanted}


def _ancestors(sched: Schedule, wanted: tuple[int, ...]) -> set[int]:
    """Tables the wanted ones are made from (themselves included)."""
    made = {st.out: st for st in sched.steps}
    seen: set[int] = set()
    stack = list(wanted)
    while stack:
        i = stack.pop()
        if i in seen or i < 0:
            continue
        seen.add(i)
        if i in made:
            stack.extend(made[i].args)
    return seen


def _fixer(st: Step) -> Callable[[np.ndarray], list[tuple[str, np.ndarray, int]]]:
    """Record the step's key (an eliminated node's strategy) for each candidate."""

    def fix(vals: np.ndarray) -> list[tuple[str, np.ndarray, int]]:
        return [(st.key, vals, st.key_offset)] if st.key else []

    return fix


def _series(
    st: Step,
    a: list,
    sh: tuple[int, ...],
    oz: np.ndarray,
    rules: Rules,
    fix: Callable[[np.ndarray], list[tuple[str, np.ndarray, int]]],
) -> FrontTable:
    """Fronts of ``uv[a, b] + v[b] + vw[b, c]``: candidate triples are the join on b of the
    non-empty cells of both edge tables, kept when their least values and the outside of
    (a, c) stay within the target."""
    euv, nv, evw = a
    lam = rules.lam_s_per_byte
    ra, rb = euv.shape
    rc = evw.shape[1]
    r_v = nv.best(lam) if nv is not None else np.zeros(rb)
    uv_cells, uv_low = _cell_minima(euv, lam)
    ua, ub = np.divmod(uv_cells, rb)
    uv_low = uv_low + r_v[ub]
    ok = np.isfinite(uv_low)
    ua, ub, uv_low = ua[ok], ub[ok], uv_low[ok]
    vw_cells, vw_low = _cell_minima(evw, lam)
    wb, wc = np.divmod(vw_cells, rc)
    limit = rules.target_s + rules.slack()
    # join on b: uv entries grouped by b, each paired with every vw entry of that b
    order_u = np.argsort(ub, kind="stable")
    order_w = np.argsort(wb, kind="stable")
    n_u = np.bincount(ub, minlength=rb)
    n_w = np.bincount(wb, minlength=rb)
    start_u = np.cumsum(n_u) - n_u
    start_w = np.cumsum(n_w) - n_w
    bs = np.flatnonzero((n_u > 0) & (n_w > 0))
    pairs = n_u[bs] * n_w[bs]
    if int(pairs.sum()) > MAX_POINTS:
        raise TruncatedError(f"{int(pairs.sum())} candidate triples in one series step")
    grp, (iu, iw) = _expand([n_u[bs], n_w[bs]]) if len(bs) else (np.zeros(0, int), [[], []])
    iu = order_u[start_u[bs][grp] + np.asarray(iu, dtype=np.int64)]
    iw = order_w[start_w[bs][grp] + np.asarray(iw, dtype=np.int64)]
    ia, ib, ic = ua[iu], ub[iu], wc[iw]
    keep = uv_low[iu] + vw_low[iw] + oz[ia, ic] <= limit
    ia, ib, ic = ia[keep], ib[keep], ic[keep]
    sources = [(euv, ia * rb + ib, sh[0])]
    if nv is not None:
        sources.append((nv, ib, sh[1]))
    sources.append((evw, ib * rc + ic, sh[2]))
    return combine((ra, rc), ia * rc + ic, sources, rules, oz, fix(ib))


def _cell_minima(x: FrontTable, lam: float) -> tuple[np.ndarray, np.ndarray]:
    """(non-empty cells, least ``t + lam * m`` of each) of a table."""
    if len(x.cell) == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0)
    first = np.flatnonzero(np.r_[True, x.cell[1:] != x.cell[:-1]])
    return x.cell[first], np.minimum.reduceat(x.t + lam * x.m, first)


def _kept_front(a: list, sh: tuple[int, ...], oz: np.ndarray, rules: Rules) -> FrontTable:
    const, na, nc, edge = a
    lam = rules.lam_s_per_byte
    if nc is None:
        low = const.best(lam)[0] + na.best(lam) + oz
        cells = np.flatnonzero(low <= rules.target_s + rules.slack())
        return combine(
            na.shape,
            cells,
            [(const, np.zeros(len(cells), dtype=np.int64), sh[0]), (na, cells, sh[1])],
            rules,
            oz,
            [],
        )
    c = nc.shape[0]
    low = const.best(lam)[0] + na.best(lam)[:, None] + nc.best(lam)[None, :] + oz
    if edge is not None:
        low = low + edge.best(lam)
    cells = np.flatnonzero(low.ravel() <= rules.target_s + rules.slack())
    sources = [
        (const, np.zeros(len(cells), dtype=np.int64), sh[0]),
        (na, cells // c, sh[1]),
        (nc, cells % c, sh[2]),
    ]
    if edge is not None:
        sources.append((edge, cells, sh[3]))
    return combine((na.shape[0], c), cells, sources, rules, oz, [])


def _union(st: Step, alts: list, rules: Rules, oz: np.ndarray) -> FrontTable:
    cell = np.concatenate([x.cell for x in alts])
    t = np.concatenate([x.t for x in alts])
    m = np.concatenate([x.m for x in alts])
    which = np.concatenate([np.full(len(x.cell), i) for i, x in enumerate(alts)])
    local = np.concatenate([np.arange(len(x.cell)) for x in alts])
    floor = min(x.floor for x in alts)
    keep = prune(cell, t, m, rules, floor, oz)
    src = np.full((len(keep), len(alts)), -1, dtype=np.int64)
    src[np.arange(len(keep)), which[keep]] = local[keep]
    fixes = [(st.key, np.array(st.values)[which[keep]], st.key_offset)] if st.key else []
    return FrontTable(
        alts[0].shape, cell[keep], t[keep], m[keep], floor, [(x, 0) for x in alts], src, fixes
    )


def recover(table: FrontTable, point: int) -> dict[tuple[str, int], int]:
    """Every recorded value behind one point: {(key, layer offset): value}."""
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
