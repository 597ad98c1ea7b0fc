"""Variable elimination over cost tables of any arity, in min-weight order, within a budget.

A :class:`FactorProblem` is ``constant + sum_v unary_v(s_v) + sum_S table_S(s_S)`` where each
table is indexed by the strategies of a sorted tuple of variables (its *scope*). Eliminating a
variable ``v`` adds up ``unary_v`` and every table that mentions ``v``, minimises over ``v``'s
strategies, and leaves one table over ``v``'s neighbours (plus the argmin, to recover ``v``
later). Any degree works; the price is the new table's size, the product of the neighbours'
strategy counts. The order is greedy: always the variable whose new table is smallest
("min-weight"), ties broken by index, so runs are deterministic.

:func:`plan` works on the structure alone (scopes and strategy counts, no numbers) and tells
whether a whole elimination fits the budget; :func:`run` then does the arithmetic.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from taps_core.solver.series import min_plus

Scope = tuple[int, ...]
SIZE_CAP = 1 << 62  # products of strategy counts are capped here (compared, never allocated)
BLOCK_ELEMENTS = 1 << 22  # numbers summed per vectorised step of one elimination (32 MiB)
SHRINK_ARITY = 3  # widest table a ``shrink_only`` elimination may leave for the ILP


@dataclass
class FactorProblem:
    """Unary vectors and tables over scopes of >= 2 variables (parallel tables merged)."""

    domains: list[int]  # strategies per variable
    unary: list[np.ndarray]  # unary[v].shape == (domains[v],)
    tables: dict[Scope, np.ndarray] = field(default_factory=dict)
    constant: float = 0.0

    def add(self, scope: Iterable[int], table: np.ndarray) -> None:
        """Add a table over ``scope`` (any order; transposed to ascending variables)."""
        scope = tuple(scope)
        order = sorted(range(len(scope)), key=lambda i: scope[i])
        key = tuple(scope[i] for i in order)
        table = np.transpose(table, order) if order != list(range(len(scope))) else table
        if len(key) == 0:
            self.constant += float(table)
        elif len(key) == 1:
            self.unary[key[0]] = self.unary[key[0]] + table
        elif key in self.tables:
            self.tables[key] = self.tables[key] + table
        else:
            self.tables[key] = table

    def value(self, assign: np.ndarray) -> float:
        """Cost of a full assignment (``assign[v]`` = strategy of variable v)."""
        total = self.constant  # eliminated variables have empty unary vectors and no tables
        total += sum(float(u[assign[v]]) for v, u in enumerate(self.unary) if len(u))
        for scope, t in self.tables.items():
            total += float(t[tuple(assign[list(scope)])])
        return total


@dataclass(frozen=True)
class Budget:
    """How big an elimination may get.

    ``table_elements`` caps each new table (float64: 8 bytes each, plus its argmin), and
    ``step_work`` the numbers one elimination adds up (table size x the variable's strategies);
    ``total_work`` and ``total_elements`` cap the whole run (time, and memory kept for recovery).
    """

    table_elements: int = 1 << 22
    step_work: int = 1 << 31
    total_work: float = 2e10
    total_elements: int = 1 << 27


@dataclass
class Plan:
    """An elimination order and what it costs; ``complete`` when nothing but ``keep`` is left."""

    order: list[int]
    complete: bool
    largest_table: int
    work: float
    stored: int


def _neighbours(p: FactorProblem) -> list[set[int]]:
    nbrs: list[set[int]] = [set() for _ in p.domains]
    for scope in p.tables:
        for v in scope:
            nbrs[v].update(scope)
    for v, s in enumerate(nbrs):
        s.discard(v)
    return nbrs


def _size(domains: list[int], vars_: Iterable[int]) -> int:
    size = 1
    for u in vars_:
        size *= domains[u]
        if size > SIZE_CAP:
            return SIZE_CAP
    return size


def plan(p: FactorProblem, keep: set[int], budget: Budget, *, shrink_only: bool = False) -> Plan:
    """Greedy min-weight order within ``budget`` (structure only, no arithmetic).

    ``shrink_only`` eliminates a variable only when its new table spans at most
    ``SHRINK_ARITY`` variables and is no larger than what it replaces (its unary vector and
    every table mentioning it), or tiny: the problem left for an exact kernel solver then
    never grows.
    """
    nbrs = _neighbours(p)
    dom = p.domains
    scopes: list[set[Scope]] = [set() for _ in dom]
    for scope in p.tables:
        for v in scope:
            scopes[v].add(scope)
    alive = [len(u) > 0 for u in p.unary]  # eliminated earlier: empty unary, no tables

    def key(v: int) -> int:
        return _size(dom, nbrs[v])

    def allowed(v: int, size: int) -> bool:
        if size > budget.table_elements or size * dom[v] > budget.step_work:
            return False
        if not shrink_only:
            return True
        if len(nbrs[v]) > SHRINK_ARITY:
            return False  # wide tables make the ILP's relaxation slow, whatever their size
        replaced = dom[v] + sum(_size(dom, s) for s in scopes[v])
        return size <= max(replaced, 64)

    heap = [(key(v), v) for v in range(len(dom)) if alive[v] and v not in keep]
    heapq.heapify(heap)
    order: list[int] = []
    largest, work, stored = 0, 0.0, 0
    while heap:
        size, v = heapq.heappop(heap)
        if not alive[v] or size != key(v):
            if alive[v]:
                heapq.heappush(heap, (key(v), v))
            continue
        if not allowed(v, size):
            continue  # may become allowed when a neighbour goes; it is pushed again then
        if work + size * dom[v] > budget.total_work or stored + size > budget.total_elements:
            break
        alive[v] = False
        order.append(v)
        largest, work, stored = max(largest, size), work + size * dom[v], stored + size
        new = tuple(sorted(nbrs[v]))
        for u in new:
            nbrs[u].discard(v)
            nbrs[u].update(x for x in new if x != u)
            scopes[u] = {s for s in scopes[u] if v not in s}
            if len(new) >= 2:
                scopes[u].add(new)
            if u not in keep:
                heapq.heappush(heap, (key(u), u))
        nbrs[v] = set()
        scopes[v] = set()
    left = sum(1 for v in range(len(dom)) if alive[v] and v not in keep)
    return Plan(order, left == 0, largest, work, stored)


@dataclass
class Eliminated:
    """Replays eliminations backwards: ``(v, scope, argmin table over scope)`` newest last."""

    records: list[tuple[int, Scope, np.ndarray]] = field(default_factory=list)

    def recover(self, assign: np.ndarray) -> np.ndarray:
        """Fill in every eliminated variable of ``assign`` (a full-length array) in place."""
        for v, scope, arg in reversed(self.records):
            assign[v] = int(arg[tuple(assign[list(scope)])]) if scope else int(arg)
        return assign


def run(p: FactorProblem, order: list[int]) -> Eliminated:
    """Eliminate ``order`` from ``p`` in place (tables and unaries are replaced, not mutated)."""
    scopes: list[set[Scope]] = [set() for _ in p.domains]
    for scope in p.tables:
        for v in scope:
            scopes[v].add(scope)
    done = Eliminated()
    for v in order:
        mine = sorted(scopes[v])
        tables = [(s, p.tables.pop(s)) for s in mine]
        new = tuple(sorted({u for s in mine for u in s if u != v}))
        out, arg = _minimise(p, v, new, tables)
        done.records.append((v, new, arg))
        for u in new:
            scopes[u] = {s for s in scopes[u] if v not in s}
        scopes[v] = set()
        p.add(new, out)
        if len(new) >= 2:
            for u in new:
                scopes[u].add(new)
        p.unary[v] = np.zeros(0)
    return done


def index_dtype(k: int) -> type[np.integer]:
    """Smallest unsigned integer type holding strategy indices below ``k``."""
    return np.uint8 if k <= 256 else np.uint16 if k <= 65536 else np.int64


def _minimise(
    p: FactorProblem, v: int, new: Scope, tables: list[tuple[Scope, np.ndarray]]
) -> tuple[np.ndarray, np.ndarray]:
    """``min_v unary_v + sum tables`` over ``new`` (axes in ``new`` order) and its argmin.

    The sum over ``new + (v,)`` is built in blocks of v's strategies so that temporaries stay
    within ``BLOCK_ELEMENTS`` numbers however large the step is.
    """
    k = p.domains[v]
    unary_v = p.unary[v]
    if len(new) == 1 and len(tables) == 1:  # a leaf: fold into the neighbour
        scope, t = tables[0]
        val = (t if scope[1] == v else t.T) + unary_v[None, :]  # [u, v]
        pick = val.argmin(axis=1)
        return val[np.arange(len(pick)), pick], pick.astype(index_dtype(k))
    if len(new) == 2 and len(tables) == 2 and all(len(sc) == 2 for sc, _ in tables):
        # series: u - v - w becomes one edge u - w (a min-plus product)
        sides = {}
        for scope, t in tables:
            sides[scope[1] if scope[0] == v else scope[0]] = t if scope[0] == v else t.T
        return min_plus(sides[new[0]].T, unary_v, sides[new[1]])  # [u, w]
    axes = (*new, v)
    where = {u: i for i, u in enumerate(axes)}
    shape = [p.domains[u] for u in axes]
    parts = []  # each table transposed to ``axes`` order, with 1-sized axes where absent
    for scope, t in tables:
        perm = sorted(range(len(scope)), key=lambda i: where[scope[i]])
        view = np.transpose(t, perm)
        present = {where[u] for u in scope}
        parts.append(view.reshape([shape[i] if i in present else 1 for i in range(len(axes))]))
    out_size = math.prod(shape[:-1])
    block = max(1, BLOCK_ELEMENTS // max(out_size, 1))
    best = np.full(shape[:-1], np.inf)
    arg = np.zeros(shape[:-1], dtype=index_dtype(k))
    unary = unary_v.reshape([1] * len(new) + [k])
    for lo in range(0, k, block):
        hi = min(k, lo + block)
        acc = np.broadcast_to(unary[..., lo:hi], [*shape[:-1], hi - lo]).copy()
        for part in parts:  # every part mentions v, so its last axis is v's
            acc += part[..., lo:hi]
        pick = acc.argmin(axis=-1)
        val = np.take_along_axis(acc, pick[..., None], axis=-1)[..., 0]
        better = val < best
        best = np.where(better, val, best)
        arg = np.where(better, pick + lo, arg).astype(arg.dtype)
    return best, arg
