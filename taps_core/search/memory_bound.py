"""The exact plan under a memory limit: Lagrangian bound, then Pareto fronts within its gap.

1. Dual: ``L(lam) = min_x time(x) + lam * (memory(x) - limit)`` is concave and piecewise
   linear in ``lam``; each plain DP solve at a ``lam`` gives a plan, a line, and a lower bound
   on the constrained optimum. The multiplier is found by intersecting the lines of the best
   fitting and best non-fitting plans (Kelley's method in one dimension), a few solves.
2. Primal: if the best fitting plan's time equals the bound, it is proven optimal. Otherwise
   the same eliminations run on (time, memory) fronts (:mod:`taps_core.solver.fronts`),
   pruned by the gap between the two: the fastest fitting point is the exact optimum.

Identical layers are still solved once: the layer's front and the rest's front go to the
chain's memory DP (:mod:`taps_core.search.chain_memory`), exact up to its memory steps with a
proven bound; composing the layer's fronts by repeated squaring is the exact cross-check.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from taps_core.search.chain_memory import ChainPoints, cheapest_chain
from taps_core.search.layered import (
    Assignment,
    Chain,
    cut_out,
    find_chain,
    solve_problem,
    variants,
)
from taps_core.search.problem import KEPT, SearchProblem
from taps_core.solver import fronts
from taps_core.solver.fronts import FrontTable, Rules
from taps_core.solver.minplus import repeated_squaring

DUAL_STEPS = 12
RC_BLOCK = "__rc__"
RC_TOP = "__rc_top__"
RC_LAYER = "__rc_layer__:"  # + a loose layer's index: its own variant (layered.loose_layers)


@dataclass(frozen=True)
class Bounds:
    """Outcome of the dual phase: best fitting plan (UB, seconds), best bound (LB), multiplier."""

    best: Assignment
    best_time: float
    lower: float
    lam: float
    solves: int


def memory_of(problem: SearchProblem, sol: Assignment) -> float:
    """Memory per device (bytes) of a solved assignment."""
    total = 0.0
    for n, s in sol.strategies.items():
        lay = problem.layer.get(n)
        rc = sol.recompute.get(lay, KEPT) if lay is not None else KEPT
        total += float(problem.option_memory[n][rc][s, sol.options[n]])
    return total


class Solved(NamedTuple):
    """A plan solved at one Lagrange multiplier: the plan, its time and its memory."""

    plan: Assignment
    time_s: float
    memory_bytes: float

    def dual_value(self, lam_s_per_byte: float, limit_bytes: float) -> float:
        """``time + lam * (memory - limit)`` (seconds): the Lagrangian at ``lam`` when this
        plan was solved there, a lower bound on every plan within ``limit_bytes``."""
        return self.time_s + lam_s_per_byte * (self.memory_bytes - limit_bytes)


def evaluate_at(problem: SearchProblem, lam_s_per_byte: float) -> Solved:
    """Solve at multiplier ``lam_s_per_byte`` (seconds per byte of memory)."""
    sol = solve_problem(problem, lam_s_per_byte)
    m = memory_of(problem, sol)
    return Solved(sol, sol.cost - lam_s_per_byte * m, m)


def dual_bounds(
    problem: SearchProblem,
    limit_bytes: float,
    fast: Solved,
    lean: Solved,
    cutoff_s: float = math.inf,
    over: tuple[Solved, float] | None = None,
) -> Bounds:
    """Maximise the Lagrangian dual from two (plan, seconds, bytes): the unconstrained optimum
    ``fast`` (over the limit) and a plan ``lean`` that fits (solved at some multiplier).
    ``over``: a plan solved at a multiplier (seconds per byte) > 0 that overflows too, nearer
    the maximum than ``fast`` (its line bounds the dual as well, so the search starts there).
    Stops as soon as the bound reaches ``cutoff`` (seconds, a plan already in hand): the caller
    then prunes this problem, and more iterations would only raise a bound it no longer
    needs."""
    _, lo_t, lo_m = fast
    hi_sol, hi_t, hi_m = lean
    solves = 0
    lower = lo_t  # L(0)
    best, best_t, lam = hi_sol, hi_t, 0.0
    if over is not None:
        line, at = over
        _, lo_t, lo_m = line
        value = line.dual_value(at, limit_bytes)
        if value > lower:
            lower, lam = value, at
    for _ in range(DUAL_STEPS):
        if lo_m <= hi_m:
            break
        cand = (hi_t - lo_t) / (lo_m - hi_m)  # where the two lines cross
        solved = evaluate_at(problem, cand)
        sol, t, m = solved
        solves += 1
        value = solved.dual_value(cand, limit_bytes)
        if value > lower:
            lower, lam = value, cand
        if lower >= cutoff_s * (1 - 1e-12):
            break
        if m <= limit_bytes and t < best_t:
            best, best_t = sol, t
        envelope = lo_t + cand * (lo_m - limit_bytes)
        if value >= envelope - 1e-12 * max(abs(envelope), 1e-30):
            lam = cand  # no new line: cand maximises the dual
            break
        if m > limit_bytes:
            lo_t, lo_m = t, m
        else:
            hi_sol, hi_t, hi_m = sol, t, m
        if best_t - lower <= 1e-12 * best_t:
            break
    return Bounds(best, best_t, lower, lam, solves)


def build_schedule(problem: SearchProblem) -> tuple[fronts.Schedule, Chain | None]:
    """One elimination schedule for the whole problem: the layer block (every recomputation
    variant), its repeated squaring when the model has a chain of identical layers, and the
    rest of the graph with the chain as one edge (the layers there each in their variant)."""
    sched = fronts.Schedule()
    chain = find_chain(problem)
    all_nodes = set(problem.option_time)

    def eliminated(
        names: set[str],
        keep: tuple[str, ...],
        rc: int,
        held: dict[str, int] | None = None,
        extra: tuple[tuple[str, str, int], ...] = (),
    ) -> int:
        """``names`` in variant ``rc`` folded onto ``keep``; ``held``: node tables to use
        instead of a node's own input, ``extra``: more edge tables."""
        nodes = {
            n: sched.input(("node", n, rc), (len(problem.option_time[n][rc]),))
            for n in problem.option_time
            if n in names
        }
        nodes.update(held or {})
        edges = [
            (e.u, e.v, sched.input(("edge", i, rc), e.keep.shape))
            for i, e in enumerate(problem.edges)
            if e.u in names and e.v in names
        ]
        return fronts.eliminate_schedule(sched, nodes, [*edges, *extra], keep)

    def every_variant(names: set[str], keep: tuple[str, ...], key: str) -> int:
        flags = variants(problem, names - set(keep))
        alts = [eliminated(names, keep, rc) for rc in flags]
        if len(alts) == 1:
            return alts[0]
        return sched.step(
            "union", tuple(alts), sched.shapes[alts[0]], key=key, values=tuple(map(int, flags))
        )

    def part(names: set[str], keep: tuple[str, ...]) -> int:
        """``names`` folded onto ``keep``, each loose layer in its own variant (as
        :func:`~taps_core.search.layered.solve_problem` does), else every variant shared."""
        loose = cut_out(problem, names)
        if loose is None:
            return every_variant(names, keep, RC_TOP)
        held: dict[str, int] = {}
        extra = []
        for lay in loose:
            tab = every_variant(set(lay.nodes) | set(lay.boundary), lay.boundary,
                                f"{RC_LAYER}{lay.layer}")
            if len(lay.boundary) == 2:
                extra.append((lay.boundary[0], lay.boundary[1], tab))
                continue
            (b,) = lay.boundary
            own = held.get(b)
            if own is None:
                own = sched.input(("node", b, KEPT), (len(problem.option_time[b][KEPT]),))
            held[b] = sched.step("add", (own, tab), sched.shapes[tab])
        rest = names - {n for lay in loose for n in lay.nodes}
        return eliminated(rest, keep, KEPT, held, tuple(extra))

    if chain is None:
        sched.final = part(all_nodes, ())
        return sched, None
    first, entry = chain.layers[1], chain.exits[0]
    block = every_variant(set(first) | {entry}, (entry, chain.exits[1]), RC_BLOCK)
    stack = _power_steps(sched, block, len(chain.layers) - 1, chain.exits[1])
    last = chain.exits[-1]
    middle = {n for lay in chain.layers[1:] for n in lay}
    top_nodes = (all_nodes - middle) | {last}
    top = part(top_nodes, (entry, last))
    sched.final = sched.step("join", (top, stack), ())
    sched.marks = {"block": block, "top": top}
    return sched, chain


def _power_steps(sched: fronts.Schedule, block: int, k: int, exit_key: str) -> int:
    """Steps composing ``k`` consecutive layers by repeated squaring (layer offsets tracked)."""
    shape = sched.shapes[block]

    def join(x: int, n_x: int, y: int, n_y: int) -> int:
        return sched.step(
            "series", (x, -1, y), shape, key=exit_key, key_offset=n_x - 1, shifts=(0, 0, n_x)
        )

    return repeated_squaring(block, k, join)


def _scalar_inputs(
    problem: SearchProblem, sched: fronts.Schedule, lam: float
) -> dict[int, np.ndarray]:
    out: dict[int, np.ndarray] = {}
    for i, spec in sched.inputs.items():
        if spec[0] == "node":
            out[i] = problem.node_cost(spec[1], lam, spec[2])[0]
        elif spec[0] == "edge":
            e = problem.edges[spec[1]]
            out[i] = e.matrix(spec[2])
        else:
            out[i] = np.zeros(())
    return out


@dataclass
class FrontSearch:
    """A schedule with its values and outsides at one multiplier, ready for front passes."""

    problem: SearchProblem
    limit_bytes: float  # memory per device
    lam_s_per_byte: float  # the Lagrange multiplier the fronts are pruned at
    schedule: fronts.Schedule
    chain: Chain | None
    least: float  # least value of the whole problem at ``lam_s_per_byte`` (seconds)
    outsides: dict[int, np.ndarray]

    @classmethod
    def prepare(
        cls, problem: SearchProblem, limit_bytes: float, lam_s_per_byte: float
    ) -> FrontSearch:
        """The schedule, its values and outsides at multiplier ``lam_s_per_byte``."""
        sched, chain = build_schedule(problem)
        values = fronts.forward_values(sched, _scalar_inputs(problem, sched, lam_s_per_byte))
        least = float(values[sched.final])
        return cls(
            problem, limit_bytes, lam_s_per_byte, sched, chain, least,
            fronts.backward_outsides(sched, values),
        )

    def run(
        self, best_time: float, *, squaring: bool = False, deadline: float = float("inf")
    ) -> Assignment | None:
        """The fastest plan within the limit among those no slower than ``best_time`` (None if
        none). Raises :class:`~taps_core.solver.fronts.TruncatedError` past the budget.

        A chain of layers is solved by the chain's memory DP (:func:`chain_plan`); ``squaring``
        composes the layers' fronts by repeated squaring instead (exact too, but fronts of
        mixed layers grow fast: a cross-check for small problems)."""
        problem, limit = self.problem, self.limit_bytes
        floors = sum(problem.min_memory(n) for n in problem.option_time)
        lam = self.lam_s_per_byte
        rules = Rules(lam, best_time + lam * limit, limit, floors, deadline)
        if self.least > rules.target_s + rules.slack():
            return None
        tables: dict[int, FrontTable] = {}
        for i, spec in self.schedule.inputs.items():
            if i not in self.outsides:
                continue
            out = self.outsides[i]
            if spec[0] == "node":
                n, rc = spec[1], spec[2]
                t, m = problem.option_time[n][rc], problem.option_memory[n][rc]
                tables[i] = fronts.node_front(n, t, m, rules, out)
            elif spec[0] == "edge":
                e = problem.edges[spec[1]]
                tables[i] = fronts.matrix_front(e.matrix(spec[2]), rules, out)
            else:
                tables[i] = fronts.constant_front()
        if self.chain is None or squaring:
            final = fronts.forward_fronts(self.schedule, tables, self.outsides, rules)[
                self.schedule.final
            ]
            point = fronts.pick(final, limit)
            if point is None:
                return None
            found = [fronts.recover(final, point)]
            return _assignment(problem, found, self.chain, final.t[point])
        marks = self.schedule.marks
        made = fronts.forward_fronts(
            self.schedule, tables, self.outsides, rules, (marks["block"], marks["top"])
        )
        return chain_plan(problem, self.chain, made[marks["block"]], made[marks["top"]], limit)


def chain_plan(
    problem: SearchProblem, chain: Chain, block: FrontTable, top: FrontTable, limit: float
) -> Assignment | None:
    """The fastest plan from the layer's and the rest's fronts by the chain's memory DP
    (:func:`~taps_core.search.chain_memory.cheapest_chain`); when its floor and ceil passes do
    not meet, the plan carries the floor's proven bound as ``stats["lower_bound_s"]``."""
    a_p, c_p = np.divmod(block.cell, block.shape[1])
    a_q, c_q = np.divmod(top.cell, top.shape[1])
    answer = cheapest_chain(
        ChainPoints(a_p, c_p, block.t, block.m),
        ChainPoints(a_q, c_q, top.t, top.m),
        len(chain.layers) - 1,
        limit,
    )
    if answer is None:
        return None
    found = [fronts.recover(top, answer.rest)]
    for i, p in enumerate(answer.layers):
        found.append({(k, off + i): v for (k, off), v in fronts.recover(block, p).items()})
    out = _assignment(problem, found, chain, answer.time_s)
    if not answer.proven:
        out.stats["lower_bound_s"] = answer.lower_bound_s
    return out


def _assignment(
    problem: SearchProblem,
    found_parts: list[dict[tuple[str, int], int]],
    chain: Chain | None,
    cost: float,
) -> Assignment:
    """Map recovered values back to every node (layer offsets resolved through the chain)."""
    first = chain.layers[1] if chain is not None else ()
    index = {n: i for i, n in enumerate(first)}

    def real(name: str, off: int) -> str | None:
        if off == 0:
            return name
        if chain is not None and name in index:
            return chain.layers[1 + off][index[name]]
        return None

    strategies: dict[str, int] = {}
    options: dict[str, int] = {}
    recompute: dict[int, int] = {}
    top_rc = KEPT
    for found in found_parts:
        for (key, off), value in found.items():
            if key == RC_TOP:
                top_rc = int(value)
            elif key.startswith(RC_LAYER):
                recompute[int(key[len(RC_LAYER):])] = int(value)
            elif key == RC_BLOCK:
                lay = problem.layer[chain.layers[1 + off][0]] if chain is not None else None
                if lay is not None:
                    recompute[lay] = int(value)
            elif key.startswith("opt:"):
                name = real(key[4:], off)
                if name is not None:
                    options[name] = value
            else:
                name = real(key, off)
                if name is not None:
                    strategies[name] = value
    middle = _middle(chain) if chain is not None else set()
    for n, lay in problem.layer.items():
        if lay is not None and lay not in recompute and n not in middle:
            recompute[lay] = top_rc
    missing = set(problem.option_time) - set(strategies)
    if missing:
        raise RuntimeError(f"front recovery lost nodes: {sorted(missing)[:5]}")
    ordered = {n: strategies[n] for n in problem.option_time}
    return Assignment(
        ordered,
        {n: options.get(n, 0) for n in problem.option_time},
        recompute,
        float(cost),
        {"layered": chain is not None, "fronts": True},
    )


def _middle(chain: Chain) -> set[str]:
    return {n for lay in chain.layers[1:] for n in lay}

