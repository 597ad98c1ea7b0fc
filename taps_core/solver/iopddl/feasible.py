"""Feasible, good answers for tight-memory IOPDDL problems: memory first, then local search.

1. *Construction*: start from the minimum-usage assignment (the lowest usage at every time
   step, so it fits whenever anything does), then, in program order, give each node its
   cheapest strategy (node cost plus edges to nodes already placed) whose extra usage fits in
   the headroom (``usage_limit`` minus the usage) over its live range.
2. *Repair* (for any start): while a time step exceeds the limit, move one node live there to
   a strategy using strictly less memory, cheapest extra cost per unit saved first. Each move
   lowers one node's usage, so it ends within ``sum(k_i)`` moves; it only stops short when
   every node live at the worst step already sits at its least usage, i.e. when the
   minimum-usage assignment does not fit either.
3. *Local search* (anytime): single-node moves and joint moves over an edge's two endpoints,
   each kept only when the headroom allows it; then ruin-and-recreate on small connected
   regions, accepted when not worse. The best feasible answer is kept throughout.

Forbidden (``>= 10**18``) strategies are never chosen when a node has a finite one; forbidden
pairs cost ``PEN`` (more than all finite costs together), so every move prefers fewer of them.
The search is deterministic for given settings: work is counted in node evaluations and the
RNG is seeded; the clock is read only to stop at the deadline.
"""

from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from taps_core.solver.iopddl.format import FORBIDDEN, IopddlProblem
from taps_core.solver.memory import segments

EPS = 1e-9  # relative improvement a move must bring (float costs)
EDGE_MOVE_MAX = 40_000  # joint edge moves only where k_u * k_v is at most this
EDGE_SWEEPS = 3  # full sweeps of edge moves before the ruin-and-recreate rounds


@dataclass(frozen=True)
class Flat:
    """Array view of a problem for the search (parallel edges merged, self-loops folded in).

    ``cost[i]``: float node costs, ``inf`` where forbidden (when node i has a finite one),
    ``PEN`` otherwise; ``use[i]``: usage per strategy (memory units); ``first/last``: live
    segments ``[first, last)``; ``adj[i]``: (edge matrix with rows = i's strategies, other
    node); edges: ``eu, ev`` and ``mats[e]`` (``k_u x k_v``, ``PEN`` where forbidden).
    """

    k: np.ndarray
    cost: tuple[np.ndarray, ...]
    use: tuple[np.ndarray, ...]
    least: np.ndarray  # [n] least usage over the node's finite strategies
    first: np.ndarray
    last: np.ndarray
    nseg: int
    limit: float
    eu: np.ndarray
    ev: np.ndarray
    mats: tuple[np.ndarray, ...]
    adj: tuple[tuple[tuple[np.ndarray, int], ...], ...]
    pen: float


def flatten(p: IopddlProblem) -> Flat:
    """The search's view of ``p`` (see :class:`Flat`)."""
    n = len(p.costs)
    finite_sum = sum(float(c[c < FORBIDDEN].max(initial=0)) for c in p.costs)
    finite_sum += sum(float(f[f < FORBIDDEN].max(initial=0)) for _, _, f in p.edges)
    pen = max(float(FORBIDDEN), 4.0 * finite_sum + 1.0)
    cost = []
    for c in p.costs:
        bad = c >= FORBIDDEN
        x = c.astype(float)
        x[bad] = math.inf if not bad.all() else pen
        cost.append(x)
    merged: dict[tuple[int, int], np.ndarray] = {}
    for u, v, flat in p.edges:
        m = flat.astype(float).reshape(len(p.costs[u]), len(p.costs[v]))
        m[flat.reshape(m.shape) >= FORBIDDEN] = pen
        if u == v:
            cost[u] = cost[u] + np.diag(m)
            continue
        key, mm = ((u, v), m) if u < v else ((v, u), m.T)
        merged[key] = merged[key] + mm if key in merged else mm
    keys = sorted(merged)
    mats = tuple(np.ascontiguousarray(merged[key]) for key in keys)
    adj: list[list[tuple[np.ndarray, int]]] = [[] for _ in range(n)]
    for (u, v), m in zip(keys, mats):
        adj[u].append((m, v))
        adj[v].append((m.T, u))
    use = tuple(u.astype(float) for u in p.usages)
    least = np.array(
        [u[np.isfinite(c)].min() if np.isfinite(c).any() else u.min() for u, c in zip(use, cost)]
    )
    seg = segments(p.intervals[:, 0], p.intervals[:, 1])
    limit = math.inf if p.usage_limit is None else float(p.usage_limit)
    return Flat(
        np.array([len(c) for c in p.costs], dtype=np.int64),
        tuple(cost),
        use,
        least,
        seg.first.astype(np.int64),
        seg.last.astype(np.int64),
        int(seg.count),
        limit,
        np.array([u for u, _ in keys], dtype=np.int64),
        np.array([v for _, v in keys], dtype=np.int64),
        mats,
        tuple(tuple(a) for a in adj),
        pen,
    )


def min_usage(f: Flat) -> np.ndarray:
    """Least-usage finite strategy per node (ties: lowest node cost): the lowest profile."""
    out = np.zeros(len(f.k), dtype=np.int64)
    for i, (c, u) in enumerate(zip(f.cost, f.use)):
        out[i] = int(np.lexsort((c, np.where(np.isfinite(c), u, np.inf)))[0])
    return out


def profile(f: Flat, assign: np.ndarray) -> np.ndarray:
    """Usage per time segment of an assignment (memory units)."""
    w = np.array([u[s] for u, s in zip(f.use, assign)])
    diff = np.zeros(f.nseg + 1)
    np.add.at(diff, f.first, w)
    np.add.at(diff, f.last, -w)
    return np.cumsum(diff)[: f.nseg]


def total(f: Flat, assign: np.ndarray) -> float:
    """Search cost of an assignment (forbidden pairs at ``PEN`` each)."""
    s = sum(float(c[a]) for c, a in zip(f.cost, assign))
    return s + sum(float(m[assign[u], assign[v]]) for m, u, v in zip(f.mats, f.eu, f.ev))


def _local(f: Flat, i: int, assign: np.ndarray, costs: tuple[np.ndarray, ...]) -> np.ndarray:
    """Cost of each strategy of node i given its neighbours' strategies."""
    out = costs[i].copy()
    for m, j in f.adj[i]:
        out += m[:, assign[j]]
    return out


def _peak(load: np.ndarray, a: int, b: int) -> float:
    return float(load[a:b].max()) if b > a else -math.inf


def repair(f: Flat, assign: np.ndarray) -> np.ndarray | None:
    """Lower usage where it exceeds the limit (module docstring, step 2); None only when the
    minimum-usage assignment exceeds the limit too."""
    assign = assign.copy()
    load = profile(f, assign)
    if f.nseg == 0 or load.max() <= f.limit:
        return assign
    n = len(f.k)
    ratio = np.full(n, np.nan)  # cached best extra cost per unit saved (nan: stale)
    target = np.zeros(n, dtype=np.int64)
    cur_use = np.array([u[s] for u, s in zip(f.use, assign)])
    for _ in range(int(f.k.sum()) + 1):  # each move lowers one node's usage: this bounds them
        r = int(np.argmax(load))
        if load[r] <= f.limit:
            return assign
        live = np.flatnonzero((f.first <= r) & (f.last > r) & (cur_use > f.least))
        if not len(live):
            return None  # every live node at its least usage: the min-usage profile is over
        for i in live[np.isnan(ratio[live])]:
            local = _local(f, int(i), assign, f.cost)
            saved = cur_use[i] - f.use[i]
            with np.errstate(invalid="ignore", divide="ignore"):
                per = np.where(saved > 0, (local - local[assign[i]]) / saved, np.inf)
            per = np.where(np.isnan(per), np.inf, per)
            if not np.isfinite(per).any():  # only forbidden pairs left: least usage among them
                per = np.where(saved > 0, -saved, np.inf)
            target[i] = int(np.argmin(per))
            ratio[i] = per[target[i]] if np.isfinite(per[target[i]]) else 1e300
        i = int(live[np.argmin(ratio[live])])
        s = int(target[i])
        new = f.use[i][s]
        load[f.first[i] : f.last[i]] += new - cur_use[i]
        cur_use[i], assign[i] = new, s
        ratio[i] = np.nan
        for _, j in f.adj[i]:
            ratio[j] = np.nan
    return None


def construct(f: Flat, order: np.ndarray | None = None) -> np.ndarray | None:
    """Memory-first construction (module docstring, step 1); None when nothing fits."""
    assign = min_usage(f)
    load = profile(f, assign)
    if f.nseg and load.max() > f.limit:
        return None
    placed = np.zeros(len(f.k), dtype=bool)
    for i in range(len(f.k)) if order is None else order:
        i = int(i)
        placed[i] = True
        if f.k[i] == 1:
            continue
        local = f.cost[i].copy()
        for m, j in f.adj[i]:
            if placed[j]:
                local += m[:, assign[j]]
        a, b = f.first[i], f.last[i]
        du = f.use[i] - f.use[i][assign[i]]
        local[du > f.limit - _peak(load, a, b)] = math.inf
        s = int(np.argmin(local))
        if np.isfinite(local[s]) and s != assign[i]:
            load[a:b] += du[s]
            assign[i] = s
    return assign


@dataclass(frozen=True)
class Settings:
    """How the search runs: ``work_per_s`` node evaluations budgeted per second of time
    limit (the budget, not the clock, ends a normal run); ``seed`` for the RNG."""

    seed: int = 0
    work_per_s: float = 30_000.0
    edge_moves: bool = True
    perturb: bool = True


@dataclass(frozen=True)
class Result:
    """Best assignment found: ``cost`` in the problem's cost unit (forbidden pairs at PEN),
    ``fits`` the limit, and ``stats`` (``work``, ``rounds``, ``stopped_by``)."""

    solution: np.ndarray
    cost: float
    fits: bool
    stats: dict[str, Any] = field(default_factory=dict)


class _State:
    """Current assignment, its usage profile and cost, with the moves."""

    def __init__(self, f: Flat, assign: np.ndarray, stop: float, budget: float) -> None:
        self.f, self.assign = f, assign.copy()
        self.load = profile(f, self.assign)
        self.cost = total(f, self.assign)
        self.stop, self.budget, self.work = stop, budget, 0
        self.nbrs = [[j for _, j in a] for a in f.adj]
        self.trail: dict[int, int] | None = None  # first strategy of each node moved

    def undo(self, cost: float) -> None:
        """Back to the strategies recorded in the trail (and to ``cost``)."""
        f = self.f
        for i, s in (self.trail or {}).items():
            self.load[f.first[i] : f.last[i]] += f.use[i][s] - f.use[i][self.assign[i]]
            self.assign[i] = s
        self.cost = cost

    def out(self) -> bool:
        return self.work >= self.budget or time.perf_counter() > self.stop

    def set(self, i: int, s: int, delta: float) -> None:
        f = self.f
        if self.trail is not None:
            self.trail.setdefault(i, int(self.assign[i]))
        self.load[f.first[i] : f.last[i]] += f.use[i][s] - f.use[i][self.assign[i]]
        self.assign[i] = s
        self.cost += delta

    def node_move(self, i: int, noise: np.ndarray | None = None) -> bool:
        """Best single move of node i within the headroom; True if it moved."""
        f = self.f
        self.work += 1
        local = _local(f, i, self.assign, f.cost)
        cur = self.assign[i]
        du = f.use[i] - f.use[i][cur]
        pick = local if noise is None else local * noise
        pick = np.where(du <= f.limit - _peak(self.load, f.first[i], f.last[i]), pick, np.inf)
        s = int(np.argmin(pick))
        gain = local[cur] - local[s]
        if s != cur and (noise is not None or gain > EPS * max(1.0, abs(local[cur]))):
            self.set(i, s, -gain)
            return True
        return False

    def edge_move(self, e: int) -> bool:
        """Best joint move of edge e's two endpoints within the headroom."""
        f = self.f
        u, v, m = int(f.eu[e]), int(f.ev[e]), f.mats[e]
        self.work += 2 + m.size // 256  # big tables cost more than two node moves
        a, b = self.assign[u], self.assign[v]
        lu = _local(f, u, self.assign, f.cost) - m[:, b]
        lv = _local(f, v, self.assign, f.cost) - m[a, :]
        c = lu[:, None] + lv[None, :] + m
        du, dv = f.use[u] - f.use[u][a], f.use[v] - f.use[v][b]
        au, bu, av, bv = f.first[u], f.last[u], f.first[v], f.last[v]
        x, y = max(au, av), min(bu, bv)
        load = self.load
        if y > x:  # overlapping ranges: the shared part takes both changes
            both = _peak(load, x, y)
            pu = max(_peak(load, au, x), _peak(load, y, bu))
            pv = max(_peak(load, av, x), _peak(load, y, bv))
            ok = (du[:, None] + dv[None, :] <= f.limit - both) & (
                (du <= f.limit - pu)[:, None] & (dv <= f.limit - pv)[None, :]
            )
        else:
            ok = (du <= f.limit - _peak(load, au, bu))[:, None] & (
                dv <= f.limit - _peak(load, av, bv)
            )[None, :]
        c = np.where(ok, c, np.inf)
        s, t = divmod(int(np.argmin(c)), c.shape[1])
        gain = float(lu[a] + lv[b] + m[a, b] - c[s, t])
        if (s, t) != (a, b) and gain > EPS * max(1.0, abs(c[a, b])):
            if self.trail is not None:
                self.trail.setdefault(u, int(a))
                self.trail.setdefault(v, int(b))
            self.load[au:bu] += du[s]
            self.load[av:bv] += dv[t]
            self.assign[u], self.assign[v] = s, t
            self.cost -= gain
            return True
        return False

    def descend(self, start: list[int] | np.ndarray) -> None:
        """Single-node moves from a work list until none helps (moves re-queue neighbours)."""
        queue = deque(int(i) for i in start if self.f.k[i] > 1)
        queued = set(queue)
        while queue and not self.out():
            i = queue.popleft()
            queued.discard(i)
            if self.node_move(i):
                for j in self.nbrs[i]:
                    if j not in queued and self.f.k[j] > 1:
                        queue.append(j)
                        queued.add(j)


def search(
    p: IopddlProblem | Flat,
    *,
    time_limit_s: float,
    settings: Settings = Settings(),
    starts: tuple[np.ndarray, ...] = (),
) -> Result:
    """Best feasible assignment found within ``time_limit_s`` seconds (module docstring).

    ``starts`` are extra first answers (e.g. the exact path's), repaired when over the limit.
    The result ``fits`` whenever the minimum-usage assignment does.
    """
    t0 = time.perf_counter()
    f = p if isinstance(p, Flat) else flatten(p)
    stop = t0 + time_limit_s
    budget = settings.work_per_s * time_limit_s
    rng = np.random.default_rng(settings.seed)
    cands = []
    first = construct(f)
    if first is not None:
        cands.append(first)
    for s in starts:
        fixed = repair(f, np.asarray(s, dtype=np.int64))
        if fixed is not None:
            cands.append(fixed)
    if not cands:  # nothing fits: the leanest assignment, its forbidden pairs lowered
        lean = min_usage(f)
        return Result(lean, total(f, lean), False, {"work": 0, "stopped_by": "infeasible"})
    st = _State(f, min(cands, key=lambda a: total(f, a)), stop, budget)
    multi = np.flatnonzero(f.k > 1)
    st.descend(multi)
    edges = [
        e for e in range(len(f.mats)) if f.mats[e].shape[0] > 1 and f.mats[e].shape[1] > 1
        and f.mats[e].size <= EDGE_MOVE_MAX
    ]
    rounds = 0
    if settings.edge_moves:
        for _ in range(EDGE_SWEEPS):  # edge sweeps, until one moves nothing
            moved = [e for e in edges if not st.out() and st.edge_move(e)]
            touched = {int(x) for e in moved for x in (f.eu[e], f.ev[e])}
            st.descend(sorted({j for i in touched for j in [i, *st.nbrs[i]]}))
            if not moved or st.out():
                break
    best, best_cost = st.assign.copy(), st.cost
    by_node: list[list[int]] = [[] for _ in range(len(f.k))]
    for e in edges:
        by_node[int(f.eu[e])].append(e)
        by_node[int(f.ev[e])].append(e)
    leanest = min_usage(f)
    while settings.perturb and len(multi) and not st.out():
        rounds += 1
        # ruin and recreate a small connected region: reset to least usage (frees its
        # headroom), re-place it in random order with noisy costs, then descend around it
        seed = int(multi[rng.integers(len(multi))])
        size = int(rng.integers(3, 30))
        region, seen, q = [], {seed}, deque([seed])
        while q and len(region) < size:
            i = q.popleft()
            region.append(i)
            for j in st.nbrs[i]:
                if j not in seen:
                    seen.add(j)
                    q.append(j)
        before = st.cost
        st.trail = {}
        for i in region:
            loc = _local(f, i, st.assign, f.cost)
            st.set(i, int(leanest[i]), float(loc[leanest[i]] - loc[st.assign[i]]))
        for i in rng.permutation(region):
            st.node_move(int(i), noise=rng.uniform(1.0, 1.3, int(f.k[int(i)])))
        st.descend(sorted({j for i in region for j in [i, *st.nbrs[i]]}))
        if settings.edge_moves:
            for e in sorted({e for i in region for e in by_node[i]}):
                if st.edge_move(e):
                    st.descend([int(f.eu[e]), int(f.ev[e])])
        if st.cost <= before + EPS * max(1.0, abs(before)):
            if st.cost < best_cost - EPS * max(1.0, abs(best_cost)):
                st.cost = total(f, st.assign)  # exact again (float drift of the deltas)
                if st.cost < best_cost:
                    best, best_cost = st.assign.copy(), st.cost
        else:
            st.undo(before)
        st.trail = None
    stopped = "clock" if time.perf_counter() > stop else "budget"
    fits = f.nseg == 0 or bool(profile(f, best).max() <= f.limit)
    stats = {"work": st.work, "rounds": rounds, "stopped_by": stopped,
             "time_s": time.perf_counter() - t0}
    return Result(best, total(f, best), fits, stats)
