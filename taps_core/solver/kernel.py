"""What elimination leaves behind: an exact ILP when it fits, else greedy plus local search.

The ILP is the Alpa/XLA formulation generalised to tables of any arity: a one-hot ``x`` per
variable and a ``y`` per table entry whose marginal on every axis equals that variable's
``x`` (with ``x`` integral, each ``y`` is then integral too). Optional :class:`RangeRows` add
``sum_v usage_v . x_v <= limit`` rows, where each variable sits on a contiguous range of rows
(live ranges over time). HiGHS reports optimal, or the best found with its dual bound.

Without the ILP (too big, or out of time): min-sum diffusion raises a lower bound (block
coordinate ascent on the dual of the ILP's LP relaxation, which is often tight on sharding
problems) and reparametrises the costs; a greedy pass on those costs, then one-variable moves
while they help (iterated conditional modes), give the assignment. All of it deterministic.
"""

from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import dataclass

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import coo_matrix

from taps_core.solver.factors import FactorProblem, Scope
from taps_core.solver.guarded import run_guarded


@dataclass(frozen=True)
class RangeRows:
    """Linear rows ``sum_{v: lo[v] <= r < hi[v]} weight[v][s_v] <= limit[r]``."""

    lo: dict[int, int]
    hi: dict[int, int]
    weight: dict[int, np.ndarray]
    limit: np.ndarray


@dataclass(frozen=True)
class KernelResult:
    """An assignment of every variable, its status and a lower bound on the optimum."""

    assign: np.ndarray
    status: str  # "optimal" | "feasible" | "infeasible"
    lower_bound: float
    method: str


def ilp_size(p: FactorProblem, alive: list[int], rows: RangeRows | None = None) -> int:
    """Non-zeros of the ILP matrix (its memory and, roughly, its difficulty)."""
    nnz = sum(p.domains[v] for v in alive) * 2
    nnz += sum(t.size * (len(s) + 1) for s, t in p.tables.items())
    if rows is not None:
        nnz += sum(len(rows.weight[v]) * (rows.hi[v] - rows.lo[v]) for v in rows.lo)
    return nnz


def solve_ilp(
    p: FactorProblem,
    alive: list[int],
    *,
    rows: RangeRows | None = None,
    time_limit_s: float | None = None,
) -> KernelResult | None:
    """Exact ILP over the ``alive`` variables (None when HiGHS found no assignment in time)."""
    dom = p.domains
    off = {}
    n_x = 0
    for v in alive:
        off[v] = n_x
        n_x += dom[v]
    costs = [np.concatenate([p.unary[v] for v in alive]) if alive else np.zeros(0)]
    r_idx: list[np.ndarray] = []
    c_idx: list[np.ndarray] = []
    vals: list[np.ndarray] = []
    lo: list[np.ndarray] = []
    hi: list[np.ndarray] = []
    n_rows = 0
    # one-hot rows
    for v in alive:
        r_idx.append(np.full(dom[v], n_rows))
        c_idx.append(off[v] + np.arange(dom[v]))
        vals.append(np.ones(dom[v]))
        n_rows += 1
    lo.append(np.ones(len(alive)))
    hi.append(np.ones(len(alive)))
    n_y = n_x
    for scope, t in p.tables.items():
        size = t.size
        costs.append(t.reshape(-1))
        entries = n_y + np.arange(size)
        stride = size
        for v in scope:  # marginal rows: sum of y with s_v = s equals x_v,s
            stride //= dom[v]
            coord = (np.arange(size) // stride) % dom[v]
            r_idx += [n_rows + coord, n_rows + np.arange(dom[v])]
            c_idx += [entries, off[v] + np.arange(dom[v])]
            vals += [np.ones(size), -np.ones(dom[v])]
            lo.append(np.zeros(dom[v]))
            hi.append(np.zeros(dom[v]))
            n_rows += dom[v]
        n_y += size
    if rows is not None and len(rows.limit):
        # each row divided by its limit: HiGHS's absolute tolerances then act relatively
        row_scale = 1.0 / np.maximum(np.abs(np.asarray(rows.limit, dtype=float)), 1.0)
        for v in alive:
            if v not in rows.lo or rows.hi[v] <= rows.lo[v]:
                continue
            span = np.arange(rows.lo[v], rows.hi[v])
            w = np.where(np.isfinite(rows.weight[v]), rows.weight[v], 0.0)
            r_idx.append(n_rows + np.repeat(span, len(w)))
            c_idx.append(np.tile(off[v] + np.arange(len(w)), len(span)))
            vals.append(np.tile(w, len(span)) * np.repeat(row_scale[span], len(w)))
        lo.append(np.full(len(rows.limit), -np.inf))
        hi.append(np.asarray(rows.limit, dtype=float) * row_scale)
        n_rows += len(rows.limit)
    c = np.concatenate(costs)
    finite = np.isfinite(c)
    upper = finite.astype(float)
    c = np.where(finite, c, 0.0)
    # HiGHS stops within an absolute gap of 1e-6: rescale the objective to ~1e6 and ask for a
    # tight relative gap so that the true optimum comes back
    scale = 1e6 / max(float(np.abs(c).max(initial=0.0)), 1e-300)
    a = coo_matrix(
        (np.concatenate(vals), (np.concatenate(r_idx), np.concatenate(c_idx))),
        shape=(n_rows, n_y),
    ).tocsr()
    integrality = np.zeros(n_y)
    integrality[:n_x] = 1
    options: dict[str, float] = {"mip_rel_gap": 1e-12}
    model = (c * scale, a, np.concatenate(lo), np.concatenate(hi), integrality, upper)
    if time_limit_s is None:
        out = _milp(model, options, [off[v] for v in alive], [dom[v] for v in alive])
    else:
        options["time_limit"] = max(time_limit_s, 0.1)
        args = (model, options, [off[v] for v in alive], [dom[v] for v in alive])
        out = run_guarded(_milp, args, options["time_limit"])
    if out is None:
        return None
    code, picks, bound = out
    if code == 2:  # proven infeasible
        return KernelResult(np.zeros(len(dom), dtype=np.int64), "infeasible", math.inf, "ilp")
    if picks is None:
        return None
    assign = np.zeros(len(dom), dtype=np.int64)
    assign[alive] = picks
    bound = bound / scale if np.isfinite(bound) else -math.inf
    status = "optimal" if code == 0 else "feasible"
    return KernelResult(assign, status, bound + p.constant, "ilp")


def _milp(
    model: tuple, options: dict[str, float], offsets: list[int], sizes: list[int]
) -> tuple[int, np.ndarray | None, float]:
    """HiGHS on the model: (status code, strategy per variable or None, dual bound)."""
    c, a, lo, hi, integrality, upper = model
    res = milp(
        c,
        constraints=LinearConstraint(a, lo, hi),
        integrality=integrality,
        bounds=Bounds(0, upper),
        options=options,
    )
    bound = getattr(res, "mip_dual_bound", None)
    bound = float(bound) if bound is not None else -math.inf
    if res.x is None:
        return res.status, None, bound
    picks = np.array([int(np.argmax(res.x[o : o + k])) for o, k in zip(offsets, sizes)])
    return res.status, picks, bound


def incidence(p: FactorProblem, alive: list[int]) -> dict[int, list[tuple[Scope, np.ndarray]]]:
    """The tables that mention each variable of ``alive``."""
    inc: dict[int, list[tuple[Scope, np.ndarray]]] = {v: [] for v in alive}
    for scope, t in p.tables.items():
        for v in scope:
            inc[v].append((scope, t))
    return inc


def local_costs(
    v: int, inc: list[tuple[Scope, np.ndarray]], assign: np.ndarray, known: np.ndarray | None
) -> np.ndarray:
    """Cost vector of ``v`` given the others' strategies (unknown ones minimised away)."""
    total = 0.0
    for scope, t in inc:
        if len(scope) == 2:  # the common case, without the general indexing below
            first = scope[0] == v
            u = scope[1] if first else scope[0]
            if known is None or known[u]:
                total = total + (t[:, assign[u]] if first else t[assign[u]])
            else:
                total = total + t.min(axis=1 if first else 0)
            continue
        index: list[object] = []
        free = []
        for axis, u in enumerate(scope):
            if u == v:
                index.append(slice(None))
            elif known is None or known[u]:
                index.append(int(assign[u]))
            else:
                index.append(slice(None))
                free.append(axis)
        sub = t[tuple(index)]
        if free:  # axes left: v's and the unknown ones; minimise the unknown ones away
            pos_v = [a for a, u in enumerate(scope) if u == v or a in free].index(scope.index(v))
            sub = np.moveaxis(sub, pos_v, 0).reshape(sub.shape[pos_v], -1).min(axis=1)
        total = total + sub
    return total


def greedy(p: FactorProblem, alive: list[int]) -> np.ndarray:
    """Assign variables one by one (most connected first), each at its cheapest strategy given
    the ones already assigned (optimistic about the rest)."""
    inc = incidence(p, alive)
    assign = np.zeros(len(p.domains), dtype=np.int64)
    known = np.zeros(len(p.domains), dtype=bool)
    for v in sorted(alive, key=lambda v: (-len(inc[v]), v)):
        local = p.unary[v] + local_costs(v, inc[v], assign, known)
        assign[v] = int(np.argmin(local))
        known[v] = True
    return assign


def local_search(
    p: FactorProblem, alive: list[int], assign: np.ndarray, *, deadline: float
) -> np.ndarray:
    """Iterated conditional modes with a work list: move one variable to its best strategy
    while that lowers the cost; a move re-queues the variable's neighbours."""
    inc = incidence(p, alive)
    nbrs = {v: sorted({u for s, _ in inc[v] for u in s if u != v}) for v in alive}
    assign = assign.copy()
    queue = deque(alive)
    queued = set(alive)
    while queue:
        v = queue.popleft()
        queued.discard(v)
        local = p.unary[v] + local_costs(v, inc[v], assign, None)
        best = int(np.argmin(local))
        if local[best] < local[assign[v]] - 1e-12 * abs(local[assign[v]]):
            assign[v] = best
            for u in nbrs[v]:
                if u not in queued:
                    queue.append(u)
                    queued.add(u)
        if time.perf_counter() > deadline:
            break
    return assign


def solve_kernel(
    p: FactorProblem,
    alive: list[int],
    *,
    deadline: float,
    ilp_max_nonzeros: int,
    exact: bool,
    quick: bool = False,
    messages: dict[tuple[Scope, int], np.ndarray] | None = None,
) -> KernelResult:
    """Best assignment of ``alive``: the exact ILP when ``exact`` (no deadline); otherwise a
    diffusion bound, greedy decoding plus local search, then the ILP (within its size cap)
    for the time left unless the bound already proves the assignment optimal. ``quick``
    (inside an outer loop): fewer diffusion sweeps and one greedy start; ``messages`` warm-start
    the diffusion (see :func:`diffusion`)."""
    if not alive:
        return KernelResult(np.zeros(len(p.domains), dtype=np.int64), "optimal", p.constant, "none")
    if exact:
        res = solve_ilp(p, alive)
        if res is not None:
            return res
    now = time.perf_counter()
    stop = now + 0.3 * max(deadline - now, 0.0)
    sweeps, tolerance = (20, 1e-7) if quick else (100, 1e-9)
    bound, rep = diffusion(
        p, alive, deadline=stop, max_sweeps=sweeps, tolerance=tolerance, messages=messages
    )
    best = local_search(p, alive, greedy(rep, alive), deadline=deadline)
    if not quick and time.perf_counter() < deadline:  # a second start, if there is time
        plain = local_search(p, alive, greedy(p, alive), deadline=deadline)
        if p.value(plain) < p.value(best):
            best = plain
    value = p.value(best)
    if value <= bound + 1e-9 * max(1.0, abs(bound)):
        return KernelResult(best, "optimal", bound, "diffusion + local search")
    found = KernelResult(best, "feasible", bound, "diffusion + local search")
    left = deadline - time.perf_counter()
    if exact or ilp_size(p, alive) > ilp_max_nonzeros or left < 0.5:
        return found
    res = solve_ilp(p, alive, time_limit_s=left)
    if res is None:
        return found
    if res.status in ("optimal", "infeasible"):
        return res
    bound = max(bound, res.lower_bound)
    if p.value(res.assign) < value:
        return KernelResult(res.assign, "feasible", bound, "ilp (time limit)")
    return KernelResult(best, "feasible", bound, found.method)


def diffusion(
    p: FactorProblem,
    alive: list[int],
    *,
    deadline: float,
    max_sweeps: int = 100,
    tolerance: float = 1e-9,
    messages: dict[tuple[Scope, int], np.ndarray] | None = None,
) -> tuple[float, FactorProblem]:
    """A lower bound by min-sum diffusion (block coordinate ascent on the LP relaxation's
    dual), and the reparametrised problem (same cost for every assignment) it ends with.

    Node-centred updates: for each variable, its cost vector and the min-marginals of its
    tables are averaged, which never lowers ``sum_v min unary + sum_T min table``. Sweeps
    run until the bound rises by less than ``tolerance`` (relative), ``max_sweeps`` or the
    deadline. ``p`` is not changed. ``messages`` (what table ``scope`` passed to its variable
    on ``axis``) start from an earlier run on a problem of the same shape and are updated in
    place: a warm start.
    """
    unary = list(p.unary)
    for v in alive:
        unary[v] = unary[v].astype(float)
    tables = {s: t.astype(float) for s, t in p.tables.items()}
    inc: dict[int, list[tuple[Scope, int]]] = {v: [] for v in alive}
    for scope in tables:
        for axis, v in enumerate(scope):
            inc[v].append((scope, axis))
    sent = {} if messages is None else messages
    for (scope, axis), delta in list(sent.items()):
        t = tables.get(scope)
        if t is None or t.shape[axis] != len(delta):
            del sent[(scope, axis)]
            continue
        shape = [1] * t.ndim
        shape[axis] = -1
        tables[scope] = t - delta.reshape(shape)
        unary[scope[axis]] = unary[scope[axis]] + delta

    def bound() -> float:
        low = sum(float(unary[v].min()) for v in alive)
        return p.constant + low + sum(float(t.min()) for t in tables.values())

    best = bound()
    order = sorted((v for v in alive if inc[v]), key=lambda v: (-len(inc[v]), v))
    for _ in range(max_sweeps):
        for v in order:
            parts = []
            total = unary[v].copy()
            for scope, axis in inc[v]:
                t = tables[scope]
                m = t.min(axis=tuple(a for a in range(t.ndim) if a != axis))
                parts.append((scope, axis, m))
                total += m
            share = total / (len(parts) + 1)
            if not np.isfinite(share).any():
                continue  # no strategy of v is possible: the bound is already inf
            unary[v] = share
            for scope, axis, m in parts:
                shift = np.where(np.isfinite(m), m - share, 0.0)
                shape = [1] * tables[scope].ndim
                shape[axis] = -1
                tables[scope] = tables[scope] - shift.reshape(shape)
                if messages is not None:
                    old = sent.get((scope, axis))
                    total = shift if old is None else old + shift
                    sent[(scope, axis)] = np.where(np.isfinite(total), total, 0.0)
        now = bound()
        rising = now > best + tolerance * max(1.0, abs(best))
        best = max(best, now)
        if not rising or time.perf_counter() > deadline:
            break
    return best, FactorProblem(p.domains, unary, tables, p.constant)
